package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"syscall"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/keelson-dev/keelson/deployments/assemble"
	"github.com/keelson-dev/keelson/deployments/container"
)

// DefaultRuntimeWait is how long start-up waits for the Docker engine to
// answer (KEELSON_RUNTIME_WAIT).
const DefaultRuntimeWait = assemble.DefaultRuntimeWait

// runtimeError is the one line start-up stops with when the runtime
// KEELSON_RUNTIME asks for (docker, also when unset) has no engine: what was
// tried, and the ways on.
func runtimeError(runtime string, u *assemble.EngineUnreachable) *ConfigError {
	const process = "or set KEELSON_RUNTIME=process to run builds and apps unsandboxed, as the server's own processes (single-tenant use only)"
	chose := "unset (docker)"
	if runtime != "" {
		chose = runtime
	}
	if u.Denied {
		add := "add the socket's group to the server's user (docker run --group-add <the socket's gid>)"
		if gid, ok := socketGroup(u.Host); ok {
			add = fmt.Sprintf("add the socket's group (gid %d) to the server's user (docker run --group-add %d)", gid, gid)
		}
		return &ConfigError{"KEELSON_RUNTIME", fmt.Sprintf("%s, but permission denied on the Docker engine socket at %s: %s, %s", chose, u.Host, add, process)}
	}
	return &ConfigError{"KEELSON_RUNTIME", fmt.Sprintf("%s, but no Docker engine answered at %s within %s (KEELSON_RUNTIME_WAIT; %s): start a Docker engine or point DOCKER_HOST at one, %s",
		chose, u.Host, u.Waited, oneLine(u.Err), process)}
}

// socketGroup is the group of host's unix socket, when it can be read.
func socketGroup(host string) (uint32, bool) {
	path, ok := strings.CutPrefix(host, "unix://")
	if !ok {
		return 0, false
	}
	fi, err := os.Stat(path)
	if err != nil {
		return 0, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return st.Gid, true
}

// logMissingImages logs one line per preset image the engine does not hold.
// Where a registry answers the engine pulls it at the first build; where none
// does, a deployment of that preset fails until the image is built locally,
// so the line names the variable and the command that builds it.
func logMissingImages(ctx context.Context, docker *client.Client, imgs container.Images, log *slog.Logger) {
	def := container.DefaultImages()
	seen := map[string]bool{}
	for _, p := range []struct{ env, image, part string }{
		{"KEELSON_IMAGE_GO", cmp.Or(imgs.Go, def.Go), "go"},
		{"KEELSON_IMAGE_GO_RUN", cmp.Or(imgs.GoRun, def.GoRun), "go-run"},
		{"KEELSON_IMAGE_NODE", cmp.Or(imgs.Node, def.Node), "node"},
		{"KEELSON_IMAGE_STATIC", cmp.Or(imgs.Static, def.Static), "static"},
	} {
		if seen[p.image] {
			continue
		}
		seen[p.image] = true
		if _, err := docker.ImageInspect(ctx, p.image); err == nil || !cerrdefs.IsNotFound(err) {
			continue
		}
		log.Warn(fmt.Sprintf("preset image %s (%s) is not on the engine: it is pulled at the first build where a registry answers; without one, build it with `scripts/local-images.sh %s` and start with `eval \"$(scripts/local-images.sh --env)\"`",
			p.image, p.env, p.part), "variable", p.env, "image", p.image)
	}
}

// oneLine keeps an error on the one line start-up failures print.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
