package container

import (
	"context"
	"errors"
	"fmt"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

// engineError turns an error of the Docker engine into a sentence a user
// understands; the raw text goes to the operator's log. what names the
// action ("creating the app's container").
func (r *Runtime) engineError(what string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	r.cfg.Logger.Error("container: engine error", "action", what, "err", err)
	msg := err.Error()
	var plain string
	switch {
	case client.IsErrConnectionFailed(err):
		plain = "the container engine is not reachable; ask the operator to check Docker on the server"
	case strings.Contains(msg, "No such image") || strings.Contains(msg, "pull access denied") ||
		strings.Contains(msg, "manifest unknown") || strings.Contains(msg, "repository does not exist"):
		plain = "an image it needs is not available on this server (and could not be pulled); ask the operator to provide it"
	case strings.Contains(msg, "could not find an available, non-overlapping IPv4 address pool"):
		plain = "the container engine has no network addresses left for another app; ask the operator to raise Docker's default-address-pools"
	case strings.Contains(msg, "no space left on device"):
		plain = "the server's disk is full"
	case strings.Contains(msg, "port is already allocated") || strings.Contains(msg, "address already in use"):
		plain = "no port was free to publish the app on; try again"
	case cerrdefs.IsNotFound(err):
		plain = "its container no longer exists"
	case cerrdefs.IsConflict(err):
		plain = "the container engine is busy with the same deployment; try again"
	default:
		plain = "the container engine refused it"
	}
	return fmt.Errorf("%s: %s", what, plain)
}
