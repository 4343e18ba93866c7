package container

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/api/types/registry"
	"github.com/moby/moby/client"

	"github.com/keelson-dev/keelson/deployments/internal/runlog"
	"github.com/keelson-dev/keelson/deployments/rt"
)

// Registry is the image registry builds go to, so that any host can run
// them: Publish pushes each built image and returns it by digest, and a
// host whose engine lacks a deployment's image pulls it by that digest
// (never by a tag, which can move). The zero Registry keeps images on the
// local engine.
type Registry struct {
	// Repository is where images go: host[:port][/path], e.g.
	// 127.0.0.1:5000/keelson. A project's images are
	// <Repository>/<project id>:<deployment id>.
	Repository string
	// Username and Password, when set, authenticate pushes and pulls. They
	// are sent to the engine only (never logged, never in an error).
	Username, Password string
}

var _ rt.Publisher = (*Runtime)(nil)

// Check validates the repository name (an image reference without a tag).
func (g Registry) Check() error {
	if g.Repository == "" {
		return nil
	}
	ref, err := reference.ParseNormalizedNamed(g.Repository + "/p")
	if err != nil || reference.Domain(ref) == "docker.io" && !strings.HasPrefix(g.Repository, "docker.io/") {
		return fmt.Errorf("%q is not host[:port][/path] (e.g. 127.0.0.1:5000/keelson)", g.Repository)
	}
	if ref.String() != g.Repository+"/p" {
		return fmt.Errorf("%q must be a lowercase host[:port][/path]", g.Repository)
	}
	return nil
}

// auth is the engine's X-Registry-Auth value for ref's registry ("" without
// credentials, or for another registry: the password only goes to its own).
func (g Registry) auth(ref string) string {
	if g.Username == "" && g.Password == "" {
		return ""
	}
	host, _, _ := strings.Cut(g.Repository, "/")
	if !strings.HasPrefix(ref, host+"/") {
		return ""
	}
	b, _ := json.Marshal(registry.AuthConfig{Username: g.Username, Password: g.Password, ServerAddress: host})
	return base64.URLEncoding.EncodeToString(b)
}

// remote is the registry tag a build is pushed under.
func (r *Runtime) remote(job rt.Job) string {
	return r.cfg.Registry.Repository + "/" + strings.ToLower(job.ProjectID) + ":" + strings.ToLower(job.DeploymentID)
}

// Publish pushes the image of job's deployment to the registry and returns
// it by digest; "" when no registry is configured. A failure fails the
// build: a deployment other hosts could not run is not made.
func (r *Runtime) Publish(ctx context.Context, job rt.Job, logs rt.LogSink) (string, error) {
	if r.cfg.Registry.Repository == "" {
		return "", nil
	}
	if err := errors.Join(checkID(job.DeploymentID), checkID(job.ProjectID)); err != nil {
		return "", err
	}
	out := runlog.New(logs, rt.StreamBuild, runlog.Masker(job))
	tag := r.remote(job)
	if _, err := r.docker.ImageTag(ctx, client.ImageTagOptions{Source: r.imageTag(job), Target: tag}); err != nil {
		return "", r.engineError("tagging the image for the registry", err)
	}
	// The push tag goes at once; the image stays under the deployment's own tag.
	defer r.untag(context.WithoutCancel(ctx), tag)
	start := time.Now()
	out.System("pushing the image to the registry " + r.cfg.Registry.Repository)
	res, err := r.docker.ImagePush(ctx, tag, client.ImagePushOptions{RegistryAuth: r.cfg.Registry.auth(tag)})
	var digest string
	if err == nil {
		digest, err = r.readPush(ctx, res)
	}
	if err == nil && digest == "" {
		err = errors.New("the registry returned no digest")
	}
	if err != nil {
		if ctx.Err() != nil {
			return "", context.Cause(ctx)
		}
		r.cfg.Logger.Error("container: pushing an image", "image", tag, "err", r.scrub(err.Error()))
		return "", fmt.Errorf("pushing the image to the registry %s failed: %s", r.cfg.Registry.Repository, r.registryText(err))
	}
	image := strings.TrimSuffix(tag, ":"+strings.ToLower(job.DeploymentID)) + "@" + digest
	// The engine also keeps the image under its digest; the deployment's
	// tag is the one reference Cleanup removes, so that one goes too.
	r.untag(context.WithoutCancel(ctx), image)
	out.System(fmt.Sprintf("pushed %s in %.1fs", image, time.Since(start).Seconds()))
	return image, nil
}

// readPush reads the push's progress to its end and returns the digest the
// registry gave the image.
func (r *Runtime) readPush(ctx context.Context, res client.ImagePushResponse) (string, error) {
	var digest string
	for msg, err := range res.JSONMessages(ctx) {
		if err != nil {
			return "", err
		}
		if msg.Error != nil {
			return "", msg.Error
		}
		if msg.Aux != nil {
			var aux struct{ Digest string }
			if json.Unmarshal(*msg.Aux, &aux) == nil && strings.HasPrefix(aux.Digest, "sha256:") {
				digest = aux.Digest
			}
		}
	}
	return digest, nil
}

// pull fetches image (a reference by digest) from its registry and tags it
// as job's deployment's image, the name Start and Cleanup use. Its error
// names the digest.
func (r *Runtime) pull(ctx context.Context, job rt.Job, out *runlog.Output) error {
	if _, err := reference.ParseNormalizedNamed(job.Image); err != nil || !strings.Contains(job.Image, "@sha256:") {
		return fmt.Errorf("the deployment's image %q is not a reference by digest", job.Image)
	}
	start := time.Now()
	out.System("pulling the image " + job.Image + " from the registry")
	res, err := r.docker.ImagePull(ctx, job.Image, client.ImagePullOptions{RegistryAuth: r.cfg.Registry.auth(job.Image)})
	if err == nil {
		err = pullErr(ctx, res)
	}
	if err == nil {
		_, err = r.docker.ImageTag(ctx, client.ImageTagOptions{Source: job.Image, Target: r.imageTag(job)})
	}
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		r.cfg.Logger.Error("container: pulling an image", "image", job.Image, "err", r.scrub(err.Error()))
		return fmt.Errorf("pulling the image %s failed: %s", job.Image, r.registryText(err))
	}
	r.untag(context.WithoutCancel(ctx), job.Image)
	out.System(fmt.Sprintf("pulled the image in %.1fs", time.Since(start).Seconds()))
	return nil
}

func pullErr(ctx context.Context, res client.ImagePullResponse) error {
	for msg, err := range res.JSONMessages(ctx) {
		if err != nil {
			return err
		}
		if msg.Error != nil {
			return msg.Error
		}
	}
	return nil
}

// untag removes one reference of an image, never the image while another
// reference names it.
func (r *Runtime) untag(ctx context.Context, ref string) {
	if _, err := r.docker.ImageRemove(ctx, ref, client.ImageRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
		r.cfg.Logger.Warn("container: removing an image reference", "image", ref, "err", r.scrub(err.Error()))
	}
}

// registryText is a registry error in a sentence for the deployment's log:
// the engine's and registry's own words, which name no credential, with the
// password removed should one ever appear.
func (r *Runtime) registryText(err error) string {
	msg := err.Error()
	var je *jsonstream.Error
	if errors.As(err, &je) {
		msg = je.Message
	}
	msg = strings.TrimPrefix(oneLine(msg), "Error response from daemon: ")
	switch {
	case client.IsErrConnectionFailed(err):
		return "the container engine is not reachable"
	case strings.Contains(msg, "unauthorized") || strings.Contains(msg, "authentication required") || strings.Contains(msg, "denied"):
		msg = "the registry refused the credentials: " + msg
	case strings.Contains(msg, "connection refused") || strings.Contains(msg, "no such host") || strings.Contains(msg, "i/o timeout"):
		msg = "the registry cannot be reached: " + msg
	}
	if len(msg) > 400 {
		msg = msg[:400] + "..."
	}
	return r.scrub(msg)
}

// scrub removes the registry password from text.
func (r *Runtime) scrub(text string) string {
	if p := r.cfg.Registry.Password; len(p) >= 4 {
		text = strings.ReplaceAll(text, p, "***")
	}
	return text
}
