package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/keelson-dev/keelson/deployments/internal/lifecycle"
	"github.com/keelson-dev/keelson/deployments/internal/runlog"
	"github.com/keelson-dev/keelson/deployments/rt"
)

// app is one deployment's running app and its supervisor.
type app struct {
	r       *Runtime
	id      string
	dir     string   // working directory (the checkout)
	env     []string // everything but PORT
	cmdline string   // "" for the in-process static server
	out     *runlog.Output

	ready  chan struct{} // closed once it answered HTTP
	stopCh chan struct{} // closed by Stop
	done   chan struct{} // closed when nothing of it runs any more and nobody will restart it

	mu       sync.Mutex
	slug     string
	port     int
	proc     *proc
	static   *http.Server
	stopping bool
}

func (a *app) upstream() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return "127.0.0.1:" + strconv.Itoa(a.port)
}

func (a *app) setSlug(slug string) {
	a.mu.Lock()
	a.slug = slug
	a.mu.Unlock()
}

// Start starts the built app with PORT set, waits until it answers HTTP and
// returns its upstream address. Starting a deployment that already runs
// returns its upstream.
func (r *Runtime) Start(ctx context.Context, job rt.Job, logs rt.LogSink) (string, error) {
	ws, err := r.workspace(job.DeploymentID)
	if err != nil {
		return "", err
	}
	env, err := jobEnv(job)
	if err != nil {
		return "", err
	}
	cmdline, static, err := startCommand(job)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(ws.src, ".git")); err != nil {
		return "", fmt.Errorf("deployment %s has not been built (no workspace)", job.DeploymentID)
	}
	if err := checkOutputDir(ws.src); err != nil {
		return "", err
	}

	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return "", errors.New("runtime is shut down")
	}
	if a := r.apps[job.DeploymentID]; a != nil {
		r.mu.Unlock()
		switch restart, err := lifecycle.Await(ctx, job.DeploymentID, a.ready, a.done); {
		case err != nil:
			return "", err
		case restart:
			r.forget(a)
			return r.Start(ctx, job, logs)
		}
		return a.upstream(), nil
	}
	port, err := r.pickPortLocked(job.DeploymentID)
	if err != nil {
		r.mu.Unlock()
		return "", err
	}
	a := &app{
		r: r, id: job.DeploymentID, dir: ws.src, env: append(r.baseEnv(ws), env...), cmdline: cmdline,
		out:   runlog.New(logs, rt.StreamApp, runlog.Masker(job)),
		ready: make(chan struct{}), stopCh: make(chan struct{}), done: make(chan struct{}),
		slug: job.ProjectSlug, port: port,
	}
	r.apps[a.id] = a
	r.mu.Unlock()

	if static {
		return a.startStatic()
	}
	a.out.System(fmt.Sprintf("starting app: %s (PORT=%d)", cmdline, port))
	var p *proc
	a.mu.Lock()
	if a.stopping {
		err = errors.New("the app was stopped while starting")
	} else {
		p, err = a.spawnLocked(port)
	}
	a.mu.Unlock()
	if err == nil {
		err = a.waitHealthy(ctx, p)
	}
	if err != nil {
		if p != nil {
			p.terminate(r.cfg.StopGrace)
		}
		r.forget(a)
		close(a.done)
		err = runlog.MaskErr(a.out.Mask, err)
		a.out.System(err.Error())
		return "", err
	}
	a.out.System("app answers HTTP on " + a.upstream())
	close(a.ready)
	go a.supervise(p)
	return a.upstream(), nil
}

// spawnLocked starts the app's command on port. Caller holds a.mu.
func (a *app) spawnLocked(port int) (*proc, error) {
	cmd := exec.Command("/bin/sh", "-c", a.cmdline)
	cmd.Dir = a.dir
	cmd.Env = append(slices.Clip(a.env), "PORT="+strconv.Itoa(port))
	p, err := a.r.startProc(cmd, a.out, a.id, "app")
	if err != nil {
		return nil, fmt.Errorf("starting the app: %w", err)
	}
	a.proc, a.port = p, port
	return p, nil
}

// waitHealthy polls http://127.0.0.1:PORT/ until the app answers anything.
func (a *app) waitHealthy(ctx context.Context, p *proc) error {
	client := a.r.health
	timeout := a.r.cfg.HealthTimeout
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	url := "http://" + a.upstream() + "/"
	interval := 10 * time.Millisecond
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if res, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
			res.Body.Close()
			return nil
		}
		t := time.NewTimer(interval)
		select {
		case <-p.exited:
			t.Stop()
			return fmt.Errorf("the app exited before answering HTTP (%s); last output:\n%s", exitText(p.err), p.out.Tail())
		case <-a.stopCh:
			t.Stop()
			return errors.New("the app was stopped while starting")
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-deadline.C:
			t.Stop()
			return fmt.Errorf("the app did not answer HTTP on port %d within %s; last output:\n%s",
				a.port, timeout, p.out.Tail())
		case <-t.C:
		}
		interval = min(2*interval, 250*time.Millisecond)
	}
}

// supervise restarts the app when it exits on its own, with backoff, until
// Stop or too many crashes.
func (a *app) supervise(p *proc) {
	defer close(a.done)
	cfg := a.r.cfg
	var crashes []time.Time
	for {
		if p != nil {
			select {
			case <-a.stopCh:
				return
			case <-p.exited:
			}
			a.mu.Lock()
			stopping := a.stopping
			a.mu.Unlock()
			if stopping {
				return
			}
			a.out.System(fmt.Sprintf("the app exited (%s)", exitText(p.err)))
		}
		now := time.Now()
		crashes = slices.DeleteFunc(crashes, func(t time.Time) bool { return now.Sub(t) > cfg.RestartWindow })
		crashes = append(crashes, now)
		if len(crashes) > cfg.MaxRestarts {
			a.out.System(fmt.Sprintf("the app crashed %d times within %s; not restarting it", len(crashes), cfg.RestartWindow))
			cfg.Logger.Error("process: app keeps crashing, gave up restarting it", "deployment", a.id, "crashes", len(crashes))
			// Stopped for good: its host no longer leads to a port it freed.
			a.mu.Lock()
			slug := a.slug
			a.mu.Unlock()
			if cfg.Ingress.Remove(slug, a.id) {
				a.out.System("its route is removed")
			}
			return
		}
		delay := min(cfg.RestartBackoff<<(len(crashes)-1), 30*time.Second)
		a.out.System(fmt.Sprintf("restarting the app in %s", delay))
		cfg.Logger.Warn("process: app exited, restarting", "deployment", a.id, "in", delay)
		t := time.NewTimer(delay)
		select {
		case <-a.stopCh:
			t.Stop()
			return
		case <-t.C:
		}

		a.mu.Lock()
		if a.stopping {
			a.mu.Unlock()
			return
		}
		port, moved := a.port, false
		if !a.r.portFree(port) {
			a.r.mu.Lock()
			np, err := a.r.pickPortLocked(a.id)
			if err == nil {
				delete(a.r.ports, port)
				port, moved = np, true
			}
			a.r.mu.Unlock()
		}
		np, err := a.spawnLocked(port)
		slug := a.slug
		a.mu.Unlock()
		if err != nil {
			a.out.System(err.Error())
			p = nil
			continue
		}
		p = np
		if moved {
			a.out.System("the app now listens on " + a.upstream())
			if _, err := cfg.Ingress.Update(slug, a.id, a.upstream()); err != nil {
				cfg.Logger.Error("process: rerouting a restarted app", "deployment", a.id, "err", err)
			}
		}
	}
}

// startStatic serves the checkout (or its dist/public/build) in-process. The
// checkout is opened as an os.Root and the served directory is opened inside
// it, so neither the choice of directory (a repository's `dist -> /`) nor any
// file served (a symlink to the data dir) can leave the checkout.
func (a *app) startStatic() (string, error) {
	fail := func(err error) (string, error) {
		a.r.forget(a)
		close(a.done)
		a.out.System(err.Error())
		return "", err
	}
	root, dir, err := openStaticRoot(a.dir)
	if err != nil {
		return fail(fmt.Errorf("static site: %w", err))
	}
	l, err := net.Listen("tcp", a.upstream())
	if err != nil {
		root.Close()
		return fail(fmt.Errorf("static site: %w", err))
	}
	srv := &http.Server{Handler: staticHandler(root), ReadHeaderTimeout: 10 * time.Second}
	a.mu.Lock()
	stopping := a.stopping
	if !stopping {
		a.static = srv
	}
	a.mu.Unlock()
	if stopping {
		l.Close()
		root.Close()
		return fail(errors.New("the app was stopped while starting"))
	}
	go func() {
		defer close(a.done)
		defer root.Close()
		_ = srv.Serve(l)
	}()
	a.out.System(fmt.Sprintf("serving %s in-process on %s", dir, a.upstream()))
	close(a.ready)
	return a.upstream(), nil
}

// openStaticRoot opens the first of dist/, public/, build/ that is a directory
// inside the checkout, else the checkout itself, and names it for the log. A
// candidate that is a symlink resolving outside the checkout is refused, not
// skipped: the repository asked for it, so the deployment fails and says why.
func openStaticRoot(checkout string) (*os.Root, string, error) {
	top, err := os.OpenRoot(checkout)
	if err != nil {
		return nil, "", err
	}
	for _, sub := range []string{"dist", "public", "build"} {
		fi, err := top.Lstat(sub)
		if err != nil {
			continue
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			// Follow it only inside the checkout.
			if fi, err = top.Stat(sub); err != nil {
				top.Close()
				return nil, "", fmt.Errorf("%s/ is a symlink that leaves the checkout or leads nowhere; it is not served", sub)
			}
		}
		if !fi.IsDir() {
			continue
		}
		root, err := top.OpenRoot(sub)
		top.Close()
		if err != nil {
			return nil, "", fmt.Errorf("opening %s/: %w", sub, err)
		}
		return root, sub + "/", nil
	}
	return top, "the checkout", nil
}

// staticHandler serves root, never a dot-segment (.git, .env).
func staticHandler(root *os.Root) http.Handler {
	files := http.FileServerFS(root.FS())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, seg := range strings.Split(r.URL.Path, "/") {
			if strings.HasPrefix(seg, ".") {
				http.NotFound(w, r)
				return
			}
		}
		files.ServeHTTP(w, r)
	})
}

// Stop stops the deployment's app: it waits (up to StopGrace) for requests the
// ingress still has in flight to it, sends SIGTERM to its process group, and
// SIGKILL after StopGrace. Stopping an app that does not run is a no-op.
func (r *Runtime) Stop(ctx context.Context, deploymentID string) error {
	r.mu.Lock()
	a := r.apps[deploymentID]
	r.mu.Unlock()
	if a == nil {
		return nil
	}
	a.mu.Lock()
	if !a.stopping {
		a.stopping = true
		close(a.stopCh)
	}
	p, static := a.proc, a.static
	a.mu.Unlock()

	grace := r.cfg.StopGrace
	dctx, cancel := context.WithTimeout(ctx, grace)
	_ = r.cfg.Ingress.Drain(dctx, deploymentID)
	cancel()
	if p != nil {
		p.terminate(grace)
	}
	if static != nil {
		sctx, cancel := context.WithTimeout(ctx, grace)
		if err := static.Shutdown(sctx); err != nil {
			static.Close()
		}
		cancel()
	}
	select {
	case <-a.done:
	case <-ctx.Done():
		return fmt.Errorf("stopping deployment %s: %w", deploymentID, context.Cause(ctx))
	}
	r.forget(a)
	return nil
}

// forget drops a from the table of running apps (if it is still there) and
// releases its port.
func (r *Runtime) forget(a *app) {
	a.mu.Lock()
	port := a.port
	a.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.apps[a.id] == a {
		delete(r.apps, a.id)
	}
	if r.ports[port] == a.id {
		delete(r.ports, port)
	}
}

// pickPortLocked finds a free loopback port no other app of ours holds. Caller
// holds r.mu.
func (r *Runtime) pickPortLocked(id string) (int, error) {
	for range 32 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("finding a free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if _, taken := r.ports[port]; !taken {
			r.ports[port] = id
			return port, nil
		}
	}
	return 0, errors.New("finding a free port: every port tried is taken")
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.String()
	}
	return err.Error()
}
