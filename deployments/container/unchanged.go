package container

import (
	"context"
	"os"
	"os/exec"
	"strings"

	"github.com/moby/moby/client"

	"github.com/keelson-dev/keelson/deployments/container/dockerfile"
	"github.com/keelson-dev/keelson/deployments/container/scratchimage"
	"github.com/keelson-dev/keelson/deployments/internal/runlog"
	"github.com/keelson-dev/keelson/deployments/rt"
)

// No build for an unchanged context: a build's key is the checkout's git
// tree, the Dockerfile as built and the id of every image it builds on.
// The image carries its key (LabelContext); when the project's newest image
// (its cache tag) has the key a new build would have, that image is tagged
// for the deployment instead of building it again. The build's own options
// (limits, network) do not change what it makes; the job's environment is
// not passed to builds.

// LabelContext is an image's build key (see contextKey).
const LabelContext = "dev.keelson.context"

// contextKey answers the key of building dockerfile on the checkout in
// root/src, or "" when there is none (a base image the engine does not
// have yet, git failing): then the build runs.
func (r *Runtime) contextKey(ctx context.Context, root, text string) string {
	cmd := exec.CommandContext(ctx, r.cfg.GitPath, "-C", "src", "rev-parse", "HEAD^{tree}")
	cmd.Dir = root
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + root, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=" + os.DevNull}
	tree, err := cmd.Output()
	if err != nil {
		return ""
	}
	images := map[string]string{}
	ok := true
	_ = dockerfile.Check("Dockerfile", text, func(ref string) error {
		res, err := r.docker.ImageInspect(ctx, ref)
		ok = ok && err == nil
		images[ref] = res.ID
		return nil
	})
	if !ok {
		return ""
	}
	return scratchimage.Key(strings.TrimSpace(string(tree)), text, images)
}

// reuseUnchanged tags the project's newest image for job when it was built
// from the same key, and reports whether it did.
func (r *Runtime) reuseUnchanged(ctx context.Context, job rt.Job, key string, out *runlog.Output) bool {
	if key == "" {
		return false
	}
	res, err := r.docker.ImageInspect(ctx, r.cacheTag(job.ProjectID))
	if err != nil || res.Config == nil || res.Config.Labels[LabelContext] != key ||
		res.Config.Labels[LabelInstance] != r.cfg.Instance {
		return false
	}
	if _, err := r.docker.ImageTag(ctx, client.ImageTagOptions{Source: res.ID, Target: r.imageTag(job)}); err != nil {
		r.cfg.Logger.Warn("container: tagging the unchanged image", "err", err)
		return false
	}
	out.System("nothing changed since the project's last image (same files, Dockerfile and base images): reusing it, no build")
	return true
}
