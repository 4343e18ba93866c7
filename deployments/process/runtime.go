package process

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/keelson-dev/keelson/deployments/ingress"
	"github.com/keelson-dev/keelson/deployments/internal/gitclone"
	"github.com/keelson-dev/keelson/deployments/internal/lifecycle"
	"github.com/keelson-dev/keelson/deployments/internal/runlog"
	"github.com/keelson-dev/keelson/deployments/internal/supervise"
	"github.com/keelson-dev/keelson/deployments/rt"
	"github.com/keelson-dev/keelson/platform"
)

// Config configures a Runtime.
type Config struct {
	// DataDir holds the workspaces (<DataDir>/workspaces/<deploymentID>). Required.
	DataDir string
	// CacheDir holds the build caches shared by every deployment. Default <DataDir>/cache.
	CacheDir string
	// AllowLocalRepos allows file:// URLs and absolute paths as repositories
	// (and http://, and hosts on private networks).
	AllowLocalRepos bool
	// AllowPrivateHosts allows https repositories whose host resolves to a
	// loopback, private or link-local address (a code host on the LAN).
	// Without it such hosts are refused and git is pinned to the address checked.
	AllowPrivateHosts bool
	// Ingress routes the apps' hosts. Required.
	Ingress *ingress.Router
	// Logger receives what operators need (crashes, give-ups). Default: discard.
	Logger *slog.Logger
	// GitPath is the git binary. Default: "git" looked up in PATH.
	GitPath string
	// GitCAFile, when set, is a PEM bundle git trusts for https (a private code
	// host with an internal CA).
	GitCAFile string
	// Path is the PATH of builds and apps. Default: the server's PATH.
	Path string
	// CloneTimeout bounds fetching the repository. Default 10m.
	CloneTimeout time.Duration
	// BuildTimeout kills a build command when the job's plan sets none. Default 10m.
	BuildTimeout time.Duration
	// Supervision: the health wait, stop grace and crash window of apps.
	rt.Supervision
	// Clock times the crash window and the restart backoff (see
	// supervise.Config.Clock). Default: the wall clock.
	Clock platform.Clock
}

func (c Config) withDefaults() Config {
	c.CacheDir = cmp.Or(c.CacheDir, filepath.Join(c.DataDir, "cache"))
	c.Logger = cmp.Or(c.Logger, slog.New(slog.DiscardHandler))
	c.GitPath = cmp.Or(c.GitPath, "git")
	c.Path = cmp.Or(c.Path, os.Getenv("PATH"), "/usr/local/bin:/usr/bin:/bin")
	c.CloneTimeout = cmp.Or(c.CloneTimeout, 10*time.Minute)
	c.BuildTimeout = cmp.Or(c.BuildTimeout, 10*time.Minute)
	c.Supervision = c.Supervision.WithDefaults()
	return c
}

// Runtime builds and runs deployments as local processes. Safe for concurrent
// use; every method is idempotent per deployment.
type Runtime struct {
	cfg    Config
	base   context.Context // cancelled by Close: ends every build
	cancel context.CancelFunc

	mu       sync.Mutex
	builds   lifecycle.Builds                                             // running builds, workspace locks
	ports    map[int]string                                               // ports handed to apps -> deploymentID
	portFree func(port int) bool                                          // whether a restarted app may keep its port (a seam for tests)
	contain  *containment                                                 // finds and kills what builds and apps start
	running  runCount                                                     // started process groups not yet ended
	lookupIP func(ctx context.Context, host string) ([]netip.Addr, error) // resolves repository hosts (a seam for tests)
	sup      *supervise.Supervisor                                        // starts, supervises and stops the apps
}

var _ rt.Runtime = (*Runtime)(nil)

// New returns a Runtime. It creates the data and cache directories.
func New(cfg Config) (*Runtime, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("process: DataDir is required")
	}
	if cfg.Ingress == nil {
		return nil, errors.New("process: Ingress is required")
	}
	cfg = cfg.withDefaults()
	var err error
	if cfg.DataDir, err = filepath.Abs(cfg.DataDir); err != nil {
		return nil, fmt.Errorf("process: data dir: %w", err)
	}
	if cfg.CacheDir, err = filepath.Abs(cfg.CacheDir); err != nil {
		return nil, fmt.Errorf("process: cache dir: %w", err)
	}
	if cfg.GitPath, err = exec.LookPath(cfg.GitPath); err != nil {
		return nil, fmt.Errorf("process: git not found: %w", err)
	}
	for _, d := range []string{filepath.Join(cfg.DataDir, "workspaces"), cfg.CacheDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("process: %w", err)
		}
	}
	contain, err := newContainment(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	// What a previous server on this data dir left running (killed with -9,
	// it cleaned nothing up) dies before anything starts: a LIVE deployment
	// started again must not run next to its orphan.
	if n := contain.sweep(); n > 0 {
		cfg.Logger.Warn("process: killed processes a previous server run left behind", "count", n)
	}
	if contain.cg == noCgroup {
		cfg.Logger.Info("process: no writable cgroup; builds and apps are tracked by process group and environment tag only")
	}
	base, cancel := context.WithCancel(context.Background())
	return &Runtime{
		cfg: cfg, base: base, cancel: cancel, contain: contain,
		ports: map[int]string{}, portFree: portFree, lookupIP: gitclone.LookupIP,
		sup: supervise.New(supervise.Config{
			Name: "process", Ingress: cfg.Ingress, Logger: cfg.Logger, Clock: cfg.Clock,
			Supervision: cfg.Supervision, GaveUp: "crashed",
			Relaunched: func(upstream string, moved bool) string {
				if !moved {
					return ""
				}
				return "the app now listens on " + upstream
			},
		}),
	}, nil
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// workspace is the directory tree of one deployment.
type workspace struct{ root, src, home, tmp string }

func (r *Runtime) workspace(id string) (workspace, error) {
	if !idPattern.MatchString(id) {
		return workspace{}, fmt.Errorf("deployment id %q is not valid", id)
	}
	root := filepath.Join(r.cfg.DataDir, "workspaces", id)
	return workspace{root: root, src: filepath.Join(root, "src"), home: filepath.Join(root, "home"),
		tmp: filepath.Join(root, "tmp")}, nil
}

// baseEnv is what every build and app starts from: no variable of the server's
// own environment except PATH.
func (r *Runtime) baseEnv(ws workspace) []string {
	c := r.cfg.CacheDir
	return []string{
		"PATH=" + r.cfg.Path,
		"HOME=" + ws.home,
		"TMPDIR=" + ws.tmp,
		"GOCACHE=" + filepath.Join(c, "go-build"),
		"GOPATH=" + filepath.Join(c, "gopath"),
		"GOMODCACHE=" + filepath.Join(c, "gopath", "pkg", "mod"),
		"GOFLAGS=-modcacherw",
		"npm_config_cache=" + filepath.Join(c, "npm"),
		"npm_config_update_notifier=false",
	}
}

// Build clones the job's repository into its workspace and runs the build
// command there. It returns the commit it built.
func (r *Runtime) Build(ctx context.Context, job rt.Job, logs rt.LogSink) (string, error) {
	commit, _, err := r.build(ctx, job, logs)
	return commit, err
}

// buildTimes splits a build for the benchmark.
type buildTimes struct{ clone, build time.Duration }

func (r *Runtime) build(ctx context.Context, job rt.Job, logs rt.LogSink) (string, buildTimes, error) {
	var times buildTimes
	ws, err := r.workspace(job.DeploymentID)
	if err != nil {
		return "", times, err
	}
	env, err := job.Environ()
	if err != nil {
		return "", times, err
	}
	cmdline, err := buildCommand(job)
	if err != nil {
		return "", times, err
	}
	ctx, end, err := r.builds.Begin(ctx, r.base, job.DeploymentID, r.sup.Running)
	if err != nil {
		return "", times, err
	}
	defer end()

	for _, d := range []string{ws.root, ws.home, ws.tmp} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return "", times, fmt.Errorf("creating the workspace: %w", err)
		}
	}
	out := runlog.New(logs, rt.StreamBuild, runlog.Masker(job))

	start := time.Now()
	commit, err := r.clone(ctx, job, ws, out)
	times.clone = time.Since(start)
	if err != nil {
		return "", times, runlog.MaskErr(out.Mask, err)
	}

	if err := checkOutputDir(ws.src); err != nil {
		return "", times, err
	}

	start = time.Now()
	if cmdline == "" {
		out.System("no build command (" + job.Framework + " preset)")
	} else {
		timeout := cmp.Or(job.Limits.BuildTimeout, r.cfg.BuildTimeout)
		bctx, bcancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("build timed out after %s", timeout))
		out.System("running build command: " + cmdline)
		cmd := exec.Command("/bin/sh", "-c", cmdline)
		cmd.Dir, cmd.Env = ws.src, append(r.baseEnv(ws), env...)
		err := r.runProc(bctx, cmd, out, job.DeploymentID, "build")
		bcancel()
		if err != nil {
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				err = fmt.Errorf("build command failed (%s):\n%s", exit, out.Tail())
			} else {
				err = fmt.Errorf("build command: %w", err)
			}
			return "", times, runlog.MaskErr(out.Mask, err)
		}
		out.System(fmt.Sprintf("build finished in %.1fs", time.Since(start).Seconds()))
	}
	times.build = time.Since(start)

	if gi := job.Limits.StorageGi; gi > 0 {
		size, err := dirSize(ws.root)
		if err != nil {
			return "", times, fmt.Errorf("measuring the workspace: %w", err)
		}
		if limit := int64(gi) << 30; size > limit {
			return "", times, fmt.Errorf("the workspace holds %.2f GiB after the build, more than the plan's %d GiB storage limit",
				float64(size)/(1<<30), gi)
		}
	}
	return commit, times, nil
}

// Route points the slug's host at upstream and returns the public URL.
func (r *Runtime) Route(ctx context.Context, slug, deploymentID, upstream string) (string, error) {
	return r.sup.Route(ctx, slug, deploymentID, upstream)
}

// Unroute removes the slug's route if it still points at deploymentID.
func (r *Runtime) Unroute(ctx context.Context, slug, deploymentID string) error {
	return r.sup.Unroute(ctx, slug, deploymentID)
}

// Running reports whether this runtime holds the app of deploymentID.
func (r *Runtime) Running(deploymentID string) bool { return r.sup.Running(deploymentID) }

// Cleanup stops the deployment's app if it runs (it runs from the workspace),
// cancels its build if one runs, and removes its workspace.
// Reuse copies the built checkout of deployment from into job's workspace (a
// rollback: nothing is cloned or built).
func (r *Runtime) Reuse(ctx context.Context, from string, job rt.Job) error {
	src, err := r.workspace(from)
	if err != nil {
		return err
	}
	dst, err := r.workspace(job.DeploymentID)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(src.src, ".git")); err != nil {
		return rt.ErrBuildGone
	}
	for _, d := range []string{dst.root, dst.home, dst.tmp} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("creating the workspace: %w", err)
		}
	}
	// cp -a keeps modes, times and symlinks as the build left them.
	if out, err := exec.CommandContext(ctx, "cp", "-a", src.src, dst.src).CombinedOutput(); err != nil {
		return fmt.Errorf("copying the build of deployment %s: %v: %s", from, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (r *Runtime) Cleanup(ctx context.Context, deploymentID string) error {
	ws, err := r.workspace(deploymentID)
	if err != nil {
		return err
	}
	if err := r.Stop(ctx, deploymentID); err != nil {
		return err
	}
	unlock := r.builds.CancelAndLock(deploymentID)
	defer unlock()
	if err := removeAll(ws.root); err != nil {
		return fmt.Errorf("removing the workspace of %s: %w", deploymentID, err)
	}
	return nil
}

// Close cancels every build and stops every app, waiting at most until ctx is
// done. The Runtime refuses new work afterwards.
func (r *Runtime) Close(ctx context.Context) error {
	r.builds.Close()
	ids := r.sup.Shut()
	r.cancel()
	errs := lifecycle.StopAll(ctx, ids, r.Stop)
	// Cancelled builds end on their own; wait for their groups to be killed.
	select {
	case <-r.running.zero():
		r.contain.close()
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("process: closing: %w", context.Cause(ctx)))
	}
	return errors.Join(errs...)
}

// runCount counts running process groups; unlike a WaitGroup it may be
// waited on while groups still start.
type runCount struct {
	mu   sync.Mutex
	n    int
	none chan struct{} // closed when n drops to 0
}

func (c *runCount) add() {
	c.mu.Lock()
	if c.n == 0 {
		c.none = make(chan struct{})
	}
	c.n++
	c.mu.Unlock()
}

func (c *runCount) done() {
	c.mu.Lock()
	if c.n--; c.n == 0 {
		close(c.none)
	}
	c.mu.Unlock()
}

// zero is closed once no group runs.
func (c *runCount) zero() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == 0 {
		done := make(chan struct{})
		close(done)
		return done
	}
	return c.none
}

// dirSize is the apparent size of the regular files under root.
func dirSize(root string) (int64, error) {
	var n int64
	err := filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			n += info.Size()
		}
		return nil
	})
	return n, err
}

// removeAll removes path, first making read-only directories (e.g. a module
// cache a build put in the workspace) writable.
func removeAll(path string) error {
	if err := os.RemoveAll(path); err == nil {
		return nil
	}
	_ = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(path)
}
