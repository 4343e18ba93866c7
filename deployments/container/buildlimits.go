package container

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/client"

	"github.com/keelson-dev/keelson/deployments/container/internal/buildcg"
	"github.com/keelson-dev/keelson/deployments/rt"
)

// setUpBuildCgroup makes the build's cgroup parent with the pids limit. The
// build must not run without it: an error here fails the build.
func (r *Runtime) setUpBuildCgroup(ctx context.Context, job rt.Job) (*buildcg.Cgroup, error) {
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
	cg, err := buildcg.New(r.cfg.CgroupRoot, "keelson-build-"+r.cfg.Instance+"-"+strings.ToLower(job.DeploymentID), r.cfg.BuildPidsLimit)
	if err != nil {
		return nil, refuse(err.Error())
	}
	return cg, nil
}

func (r *Runtime) removeBuildCgroup(cg *buildcg.Cgroup) {
	if err := cg.Remove(); err != nil {
		r.cfg.Logger.Warn("container: removing a build's cgroup", "cgroup", cg.Parent, "err", err)
	}
}

// Lines of the classic builder's output naming the step's container and
// the image each step committed (read by buildTrace).
var (
	stepContainer = regexp.MustCompile(`(?m)^\s*---> Running in ([0-9a-f]{12,64})\s*$`)
	stepImage     = regexp.MustCompile(`(?m)^\s*---> ([0-9a-f]{12,64})\s*$`)
)

// diskWatch bounds a build's disk: the checkout plus what the build has
// written so far (each stage's committed layers over its base image, and
// the running step's container's writable layer) against the plan's storage
// limit, measured every DiskPollInterval while the build runs. Base images
// do not count: they are the engine's, shared by every build. Over the
// limit, it cancels the build with a cause naming the limit.
type diskWatch struct {
	r        *Runtime
	trace    *buildTrace
	checkout int64
	limit    int64
	gi       int
	cancel   context.CancelCauseFunc
	sizes    map[string]int64 // image id -> size (images do not change)
}

// watchDisk starts a diskWatch for the build of job whose checkout is at
// root, or returns nil when the plan sets no storage limit. An error means
// the checkout alone is over the limit.
func (r *Runtime) watchDisk(ctx context.Context, job rt.Job, root string, trace *buildTrace, cancel context.CancelCauseFunc) (*diskWatch, error) {
	gi := job.Limits.StorageGi
	if gi <= 0 {
		return nil, nil
	}
	w := &diskWatch{r: r, trace: trace, limit: int64(gi) * r.cfg.StorageGiB, gi: gi, cancel: cancel, sizes: map[string]int64{}}
	w.checkout = dirSize(root)
	if w.checkout > w.limit {
		return nil, w.overError("the checkout is", w.checkout)
	}
	go w.run(ctx)
	return w, nil
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

// used is the checkout plus what the build has written so far.
func (w *diskWatch) used(ctx context.Context) int64 {
	w.trace.mu.Lock()
	imgs := append([]tracedImage(nil), w.trace.images...)
	cid := w.trace.container
	w.trace.mu.Unlock()
	used := w.checkout
	base, last := map[int]string{}, map[int]string{}
	for _, img := range imgs {
		if img.from {
			base[img.stage] = img.id
		} else {
			last[img.stage] = img.id
		}
	}
	for stage, id := range last {
		if made := w.size(ctx, id) - w.size(ctx, base[stage]); made > 0 {
			used += made
		}
	}
	if cid != "" {
		if res, err := w.r.docker.ContainerInspect(ctx, cid, client.ContainerInspectOptions{Size: true}); err == nil && res.Container.SizeRw != nil {
			used += *res.Container.SizeRw
		}
	}
	return used
}

func (w *diskWatch) size(ctx context.Context, id string) int64 {
	if id == "" {
		return 0
	}
	if n, ok := w.sizes[id]; ok {
		return n
	}
	res, err := w.r.docker.ImageInspect(ctx, id)
	if err != nil {
		return 0
	}
	w.sizes[id] = res.Size
	return res.Size
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

// verifyCgroup checks, while the build runs, that each running step's
// container cgroup is under the parent this server made: a server that does
// not see the host's cgroup file system (a container with its own cgroup
// namespace) makes its parent somewhere the engine never looks, and the
// engine then makes one without the limit. Seen so, the build is stopped.
func (r *Runtime) verifyCgroup(ctx context.Context, cg *buildcg.Cgroup, trace *buildTrace, stop context.CancelCauseFunc) {
	t := time.NewTicker(r.cfg.DiskPollInterval)
	defer t.Stop()
	checked := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if got := strings.TrimSpace(buildcg.ReadFile(filepath.Join(cg.PidsDir(), "pids.max"))); got != strconv.FormatInt(r.cfg.BuildPidsLimit, 10) {
			r.cfg.Logger.Error("container: a build's cgroup parent lost its pids.max", "parent", cg.PidsDir(), "pids.max", got)
			stop(fmt.Errorf("the build was stopped: its process limit (%d) is not in effect (its cgroup was removed or changed while it ran)", r.cfg.BuildPidsLimit))
			return
		}
		trace.mu.Lock()
		cid := trace.container
		trace.mu.Unlock()
		if cid == "" || checked[cid] {
			continue
		}
		running := func() bool {
			res, err := r.docker.ContainerInspect(ctx, cid, client.ContainerInspectOptions{})
			return err == nil && res.Container.State != nil && res.Container.State.Running
		}
		if !running() {
			continue
		}
		found, _ := filepath.Glob(filepath.Join(cg.PidsDir(), cid+"*"))
		if len(found) > 0 {
			checked[cid] = true
			continue
		}
		if running() { // running before and after: its cgroup is elsewhere
			r.cfg.Logger.Error("container: a build step's cgroup is not under the parent the server made; the server does not see the host's cgroup file system",
				"parent", cg.PidsDir(), "container", cid)
			stop(fmt.Errorf("the build was stopped: its process limit (%d) is not in effect (the engine did not put the build under the cgroup the server made); the operator must fix this (README: Security model)",
				r.cfg.BuildPidsLimit))
			return
		}
	}
}
