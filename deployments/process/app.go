package process

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/keelson-dev/keelson/deployments/internal/runlog"
	"github.com/keelson-dev/keelson/deployments/internal/supervise"
	"github.com/keelson-dev/keelson/deployments/rt"
	"github.com/keelson-dev/keelson/platform/httpx"
)

// launcher is one deployment's app as a process (or, for the static preset,
// an in-process file server) on a loopback port.
type launcher struct {
	r       *Runtime
	id      string
	dir     string   // working directory (the checkout)
	env     []string // everything but PORT
	cmdline string   // "" for the in-process static server
	static  bool
	out     *runlog.Output
	port    int // the port it was last given; launches are never concurrent
}

// Start starts the built app with PORT set, waits until it answers HTTP and
// returns its upstream address. Starting a deployment that already runs
// returns its upstream.
func (r *Runtime) Start(ctx context.Context, job rt.Job, logs rt.LogSink) (string, error) {
	ws, err := r.workspace(job.DeploymentID)
	if err != nil {
		return "", err
	}
	env, err := job.Environ()
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
	return r.sup.Start(ctx, job, logs, func(out *runlog.Output) supervise.Launcher {
		return &launcher{r: r, id: job.DeploymentID, dir: ws.src, env: append(r.baseEnv(ws), env...),
			cmdline: cmdline, static: static, out: out}
	})
}

// Launch picks a port for the first launch, and another for a restart when
// the app's port was taken meanwhile; then it starts the app's command (or
// serves the static site) on it.
func (l *launcher) Launch(_ context.Context, restart bool) (supervise.Instance, error) {
	r := l.r
	r.mu.Lock()
	var err error
	switch {
	case !restart:
		l.port, err = r.pickPortLocked(l.id)
	case !r.portFree(l.port):
		if np, err := r.pickPortLocked(l.id); err == nil {
			delete(r.ports, l.port)
			l.port = np
		}
	}
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if l.static {
		return l.serveStatic()
	}
	if !restart {
		l.out.System(fmt.Sprintf("starting app: %s (PORT=%d)", l.cmdline, l.port))
	}
	cmd := exec.Command("/bin/sh", "-c", l.cmdline)
	cmd.Dir = l.dir
	cmd.Env = append(slices.Clip(l.env), "PORT="+strconv.Itoa(l.port))
	p, err := r.startProc(cmd, l.out, l.id, "app")
	if err != nil {
		return nil, fmt.Errorf("starting the app: %w", err)
	}
	return &instance{p: p, port: l.port}, nil
}

func (l *launcher) upstream() string { return "127.0.0.1:" + strconv.Itoa(l.port) }

// Release gives the app's port back.
func (l *launcher) Release(context.Context) error {
	l.r.mu.Lock()
	defer l.r.mu.Unlock()
	if l.r.ports[l.port] == l.id {
		delete(l.r.ports, l.port)
	}
	return nil
}

// repick gives the app's port back and takes another free one.
func (l *launcher) repick() error {
	l.r.mu.Lock()
	defer l.r.mu.Unlock()
	if l.r.ports[l.port] == l.id {
		delete(l.r.ports, l.port)
	}
	port, err := l.r.pickPortLocked(l.id)
	if err != nil {
		return err
	}
	l.port = port
	return nil
}

// instance is one run of the app's command.
type instance struct {
	p    *proc
	port int
}

func (i *instance) Upstream() string        { return "127.0.0.1:" + strconv.Itoa(i.port) }
func (i *instance) Port() int               { return i.port }
func (i *instance) Exited() <-chan struct{} { return i.p.exited }

// Exit is how the app ended. Its process group is gone by now, so whoever
// listens on its port is another process.
func (i *instance) Exit() supervise.Exit {
	return supervise.Exit{Text: exitText(i.p.err), PortTaken: !portFree(i.port)}
}

// CheckListener confirms that the sockets listening on its port are held by
// processes of the app (see ownListener), not by another process that bound
// the port first.
func (i *instance) CheckListener() error { return ownListener(i.port, i.p.g) }

var _ supervise.ListenerChecker = (*instance)(nil)

// Stop sends SIGTERM to its process group, and SIGKILL after grace.
func (i *instance) Stop(_ context.Context, grace time.Duration) { i.p.terminate(grace) }

// serveStatic serves the checkout (or its dist/public/build) in-process. The
// checkout is opened as an os.Root and the served directory is opened inside
// it, so neither the choice of directory (a repository's `dist -> /`) nor any
// file served (a symlink to the data dir) can leave the checkout.
func (l *launcher) serveStatic() (supervise.Instance, error) {
	root, dir, err := openStaticRoot(l.dir)
	if err != nil {
		return nil, fmt.Errorf("static site: %w", err)
	}
	ln, err := net.Listen("tcp", l.upstream())
	for try := 0; err != nil && errors.Is(err, syscall.EADDRINUSE) && try < 3; try++ {
		// Another process took the port since it was picked: pick again.
		if perr := l.repick(); perr != nil {
			break
		}
		ln, err = net.Listen("tcp", l.upstream())
	}
	if err != nil {
		root.Close()
		return nil, fmt.Errorf("static site: %w", err)
	}
	s := &staticSite{srv: &http.Server{Handler: staticHandler(root), ReadHeaderTimeout: 10 * time.Second},
		port: l.port, dir: dir, ended: make(chan struct{})}
	go func() {
		defer close(s.ended)
		defer root.Close()
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

// staticSite is the static preset's in-process server.
type staticSite struct {
	srv   *http.Server
	port  int
	dir   string
	ended chan struct{}
}

func (s *staticSite) Upstream() string        { return "127.0.0.1:" + strconv.Itoa(s.port) }
func (s *staticSite) Port() int               { return s.port }
func (s *staticSite) Exited() <-chan struct{} { return s.ended }
func (s *staticSite) Exit() supervise.Exit    { return supervise.Exit{Text: "the server ended"} }
func (s *staticSite) Serving() string {
	return fmt.Sprintf("serving %s in-process on %s", s.dir, s.Upstream())
}

// Stop shuts the server down, waiting up to grace for requests in flight.
func (s *staticSite) Stop(ctx context.Context, grace time.Duration) {
	sctx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	if err := s.srv.Shutdown(sctx); err != nil {
		s.srv.Close()
	}
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
	_, err := r.sup.Stop(ctx, deploymentID)
	return err
}

// pickPortLocked finds a free loopback port no other app of ours holds. Caller
// holds r.mu. The app binds the port only later, so the port is taken from
// below the kernel's ephemeral range when there is room (appPorts): the
// ports the kernel hands to other listeners and outgoing connections
// meanwhile (":0", Docker's published ports) cannot take it in between.
func (r *Runtime) pickPortLocked(id string) (int, error) {
	if lo, hi := appPorts(); lo > 0 {
		for range 64 {
			port := lo + rand.IntN(hi-lo+1)
			if _, taken := r.ports[port]; !taken && portFree(port) {
				r.ports[port] = id
				return port, nil
			}
		}
	}
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

// appPorts is the range apps' ports are picked from: the 8,192 ports just
// below the kernel's ephemeral range (ip_local_port_range, 32768-60999 by
// default on Linux), or 0, 0 when that range leaves no room below it (or
// cannot be read): then ports come from the kernel as before.
var appPorts = sync.OnceValues(func() (lo, hi int) {
	eph, ok := httpx.EphemeralPortsStart()
	if !ok || eph-8192 < 10000 {
		return 0, 0
	}
	return eph - 8192, eph - 1
})

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
