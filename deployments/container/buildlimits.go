package container

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/client"

	"github.com/keelson-dev/keelson/deployments"
)

// setUpBuildCgroup makes the build's cgroup parent with the pids limit. The
// build must not run without it: an error here fails the build.
func (r *Runtime) setUpBuildCgroup(ctx context.Context, job deployments.Job) (*buildCgroup, error) {
	r.mu.Lock()
	driver := r.cgroupDriver
	r.mu.Unlock()
	if driver == "" {
		res, err := r.docker.Info(ctx, client.InfoOptions{})
		if err != nil {
			return nil, r.engineError("asking the container engine how it runs containers", err)
		}
		driver = res.Info.CgroupDriver
		r.mu.Lock()
		r.cgroupDriver = driver
		r.mu.Unlock()
	}
	refuse := func(why string) error {
		r.cfg.Logger.Error("container: a build's process limit could not be set up; builds are refused until it can", "why", why)
		return fmt.Errorf("the build was not started: its process limit (%d) could not be set up (%s); the operator must fix this (README: Security model)",
			r.cfg.BuildPidsLimit, why)
	}
	if driver != "cgroupfs" {
		return nil, refuse(fmt.Sprintf("the engine uses the %q cgroup driver; build limits need the cgroupfs driver", driver))
	}
	cg, err := newBuildCgroup(r.cfg.CgroupRoot, "keelson-build-"+r.cfg.Instance+"-"+strings.ToLower(job.DeploymentID), r.cfg.BuildPidsLimit)
	if err != nil {
		return nil, refuse(err.Error())
	}
	return cg, nil
}

func (r *Runtime) removeBuildCgroup(cg *buildCgroup) {
	if err := cg.remove(); err != nil {
		r.cfg.Logger.Warn("container: removing a build's cgroup", "cgroup", cg.name, "err", err)
	}
}

// Lines of the classic builder's output naming the step's container and
// the image each step committed.
var (
	stepContainer = regexp.MustCompile(`(?m)^\s*---> Running in ([0-9a-f]{12,64})\s*$`)
	stepImage     = regexp.MustCompile(`(?m)^\s*---> ([0-9a-f]{12,64})\s*$`)
)

// diskWatch bounds a build's disk: the checkout plus what the build has
// made so far (the running step's container, base image included, or the
// last image a step committed) against the plan's storage limit, measured
// every interval while the build runs. Over the limit, it cancels the build
// with a cause naming the limit.
type diskWatch struct {
	r        *Runtime
	checkout int64
	limit    int64
	gi       int
	cancel   context.CancelCauseFunc

	mu        sync.Mutex
	container string
	image     string
}

// watchDisk starts a diskWatch for the build of job whose checkout is at
// root, or returns nil when the plan sets no storage limit. An error means
// the checkout alone is over the limit.
func (r *Runtime) watchDisk(ctx context.Context, job deployments.Job, root string, cancel context.CancelCauseFunc) (*diskWatch, error) {
	gi := job.Limits.StorageGi
	if gi <= 0 {
		return nil, nil
	}
	w := &diskWatch{r: r, limit: int64(gi) * r.cfg.StorageGiB, gi: gi, cancel: cancel}
	w.checkout = dirSize(root)
	if w.checkout > w.limit {
		return nil, w.overError("the checkout is", w.checkout)
	}
	go w.run(ctx)
	return w, nil
}

// see reads one chunk of the build's output for the step's container and image.
func (w *diskWatch) see(stream string) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if m := stepContainer.FindAllStringSubmatch(stream, -1); m != nil {
		w.container = m[len(m)-1][1]
	}
	if m := stepImage.FindAllStringSubmatch(stream, -1); m != nil {
		w.image, w.container = m[len(m)-1][1], ""
	}
}

func (w *diskWatch) run(ctx context.Context) {
	t := time.NewTicker(w.r.cfg.DiskPollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if used := w.used(ctx); used > w.limit {
			w.cancel(w.overError("the build has used", used))
			return
		}
	}
}

// used is the checkout plus the size of what the build has made so far.
func (w *diskWatch) used(ctx context.Context) int64 {
	w.mu.Lock()
	cid, img := w.container, w.image
	w.mu.Unlock()
	var made int64
	if cid != "" {
		if res, err := w.r.docker.ContainerInspect(ctx, cid, client.ContainerInspectOptions{Size: true}); err == nil && res.Container.SizeRootFs != nil {
			made = *res.Container.SizeRootFs
		}
	}
	if made == 0 && img != "" {
		if res, err := w.r.docker.ImageInspect(ctx, img); err == nil {
			made = res.Size
		}
	}
	return w.checkout + made
}

func (w *diskWatch) overError(what string, used int64) error {
	return storageError(what, used, w.gi)
}

// storageError says a build went over the plan's storage limit.
func storageError(what string, used int64, gi int) error {
	return fmt.Errorf("%s %s of disk, more than the plan's storage limit of %d GiB (maxStorageGi: the checkout and the image count); the build was stopped",
		what, sizeText(used), gi)
}

func sizeText(n int64) string {
	if n >= 1<<30 {
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// dirSize is the bytes of the regular files under root (symlinks not followed).
func dirSize(root string) int64 {
	var n int64
	_ = filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrPermission) {
				return nil
			}
			return err
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}
