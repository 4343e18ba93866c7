package container

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"sync"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/keelson-dev/keelson/deployments/rt"
)

// The classic builder labels only the final image (ImageBuildOptions.Labels
// become its last step). What a build leaves besides it (the last image of
// each earlier stage of a multi-stage build, the images of a build that
// failed or was stopped) carries no label of its project, so no label
// filter finds it again. buildTrace reads the images each step committed
// from the build's output: the last image of each earlier stage is kept as
// the project's stage cache (<repo>:cache-stage<N>, removed with the
// project), and every other image the build made that ends up with no tag is
// removed when the build ends.

var (
	stepLine = regexp.MustCompile(`^Step \d+/\d+ : (\S+)`)
	// stepImage (buildlimits.go) is the " ---> <id>" line after each step.
)

type tracedImage struct {
	id    string
	from  bool // the image a FROM step resolved to (a base image, not made here)
	stage int  // the stage it belongs to (0-based)
}

// buildTrace records the images one build committed.
type buildTrace struct {
	mu        sync.Mutex
	instr     string
	stages    int // FROM steps seen
	images    []tracedImage
	container string // the running step's, if any
}

func (t *buildTrace) see(stream string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, l := range strings.Split(stream, "\n") {
		if m := stepLine.FindStringSubmatch(l); m != nil {
			t.instr = strings.ToUpper(m[1])
			if t.instr == "FROM" {
				t.stages++
			}
			continue
		}
		if m := stepContainer.FindStringSubmatch(l); m != nil {
			t.container = m[1]
			continue
		}
		if m := stepImage.FindStringSubmatch(l); m != nil && t.instr != "" {
			t.images = append(t.images, tracedImage{id: m[1], from: t.instr == "FROM", stage: t.stages - 1})
			t.container = ""
		}
	}
}

// stageFinals is the last image made by each stage but the final one, by
// stage ("" when a stage made none of its own).
func (t *buildTrace) stageFinals() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stages < 2 {
		return nil
	}
	out := make([]string, t.stages-1)
	for _, img := range t.images {
		if img.stage >= 0 && img.stage < len(out) {
			out[img.stage] = img.id
			if img.from {
				out[img.stage] = ""
			}
		}
	}
	return out
}

func (r *Runtime) stageTag(projectID string, n int) string {
	return r.repo(projectID) + ":cache-stage" + strconv.Itoa(n)
}

// keepStages tags the last image of each earlier stage of a successful
// build as the project's stage cache, in place of the previous build's.
func (r *Runtime) keepStages(ctx context.Context, job rt.Job, t *buildTrace) {
	finals := t.stageFinals()
	for n := 0; ; n++ {
		tag := r.stageTag(job.ProjectID, n)
		if n < len(finals) && finals[n] != "" {
			old, _ := r.docker.ImageInspect(ctx, tag)
			if _, err := r.docker.ImageTag(ctx, client.ImageTagOptions{Source: finals[n], Target: tag}); err != nil {
				r.cfg.Logger.Warn("container: tagging a stage's cache image", "err", err)
			} else if old.ID != "" && !strings.HasPrefix(strings.TrimPrefix(old.ID, "sha256:"), finals[n]) {
				r.dropIfUntagged(ctx, old.ID)
			}
			continue
		}
		if n >= len(finals) {
			// Tags of stages this build no longer has go, up to the first gap.
			if _, err := r.docker.ImageInspect(ctx, tag); err != nil {
				return
			}
		}
		r.removeImage(ctx, tag)
	}
}

// dropUntagged removes every image the build made that has no tag (nor
// digest) now: a failed or stopped build's, and images replaced as a cache.
// An image still a parent of another is refused by the engine and stays.
func (r *Runtime) dropUntagged(ctx context.Context, t *buildTrace) {
	t.mu.Lock()
	imgs := append([]tracedImage(nil), t.images...)
	t.mu.Unlock()
	for i := len(imgs) - 1; i >= 0; i-- {
		if imgs[i].from {
			continue
		}
		r.dropIfUntagged(ctx, imgs[i].id)
	}
}

func (r *Runtime) dropIfUntagged(ctx context.Context, id string) {
	res, err := r.docker.ImageInspect(ctx, id)
	if err != nil || len(res.RepoTags) > 0 || len(res.RepoDigests) > 0 {
		return
	}
	if _, err := r.docker.ImageRemove(ctx, id, client.ImageRemoveOptions{PruneChildren: true}); err != nil &&
		!cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
		r.cfg.Logger.Warn("container: removing an image a build left", "image", id, "err", err)
	}
}
