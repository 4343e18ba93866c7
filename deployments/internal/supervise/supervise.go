// Package supervise is the part of running an app that every runtime takes
// alike, written once: launch, wait until it answers HTTP, supervise it
// (restart it when it exits on its own, with backoff, until too many crashes
// within a window, both on the injected clock), move its route when a restart
// moved it, and drain and stop it; plus Route and Unroute.
//
// A runtime (deployments/process, deployments/container) offers the
// primitives only: a Launcher per deployment that launches an Instance, which
// can be waited on and stopped, and releases what the app held.
package supervise

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/keelson-dev/keelson/deployments/ingress"
	"github.com/keelson-dev/keelson/deployments/internal/lifecycle"
	"github.com/keelson-dev/keelson/deployments/internal/runlog"
	"github.com/keelson-dev/keelson/deployments/rt"
	"github.com/keelson-dev/keelson/platform"
)

// Launcher is one deployment's app as the runtime runs it.
type Launcher interface {
	// Launch starts an instance of the app: the first one (restart false,
	// ctx is Start's), or another after the last one exited. It logs what is
	// particular to the runtime. An error with a non-nil instance is logged
	// and that instance's exit counts as the next crash.
	Launch(ctx context.Context, restart bool) (Instance, error)
	// Release frees what the app holds (its port, its container, its
	// contexts) once no instance of it runs and none will. Idempotent.
	Release(ctx context.Context) error
}

// Instance is one launched run of an app.
type Instance interface {
	// Upstream is host:port where it answers HTTP.
	Upstream() string
	// Port is the port named when it does not answer in time.
	Port() int
	// Exited is closed when it no longer runs.
	Exited() <-chan struct{}
	// Exit is how it ended, once Exited is closed.
	Exit() Exit
	// Stop ends it within grace; a no-op when the Launcher's Release does.
	Stop(ctx context.Context, grace time.Duration)
}

// ListenerChecker is an Instance whose port is shared with every other
// process of the machine (the process runtime's loopback ports): whatever
// answers HTTP there may be another process that bound the port first. An
// answer counts as the app's only once CheckListener confirms it. A runtime
// whose apps have a network of their own (a container's namespace) needs
// no such check.
type ListenerChecker interface {
	Instance
	// CheckListener returns nil when every socket that accepts connections
	// on Upstream is the instance's own; an error wrapping
	// ErrForeignListener when another process holds one; any other error
	// when it cannot tell (the app is not counted as answering then).
	CheckListener() error
}

// ErrForeignListener is CheckListener's answer when a process that is not
// the app's listens on its port. A start then launches the app once more, on
// another port, as on Exit.PortTaken.
var ErrForeignListener = errors.New("another process listens on the app's port")

// Served is an Instance served by the server itself (the static preset): it
// answers from the start and is never restarted. Serving is its log line.
type Served interface {
	Instance
	Serving() string
}

// Exit is how an instance ended.
type Exit struct {
	Text  string // in "the app exited (Text)": "exit status 1"
	Line  string // the log line when a running app ended, if not "the app exited (Text)"
	Err   error  // watching it failed: a start fails with this error
	Attrs []any  // more attributes of the operator's warning
	// PortTaken: another process listens on its port now that it ended (it
	// bound the port between the pick and the app's listen). A start then
	// launches once more, as a restart, which picks another port.
	PortTaken bool
}

// Config configures a Supervisor.
type Config struct {
	Name    string // "process", "container": the prefix of operator messages
	Ingress *ingress.Router
	Logger  *slog.Logger
	// Clock is the time of the crash window and of the backoff. A clock with
	// an After(time.Duration) <-chan time.Time method also times the backoff
	// (a test's fake clock); otherwise the backoff waits on a wall-clock timer.
	Clock platform.Clock
	rt.Supervision
	// GaveUp is the verb of "the app <GaveUp> N times within W; not restarting it".
	GaveUp string
	// Relaunched is the log line after a restart, "" for none; moved says
	// whether its upstream changed (the route followed).
	Relaunched func(upstream string, moved bool) string
}

// Supervisor runs the apps of one runtime. Safe for concurrent use.
type Supervisor struct {
	cfg    Config
	health *http.Client

	mu     sync.Mutex
	closed bool
	apps   map[string]*app // deploymentID -> starting or running app
}

// New returns a Supervisor.
func New(cfg Config) *Supervisor {
	if cfg.Clock == nil {
		cfg.Clock = platform.SystemClock{}
	}
	if cfg.Relaunched == nil {
		cfg.Relaunched = func(string, bool) string { return "" }
	}
	return &Supervisor{cfg: cfg, apps: map[string]*app{}, health: &http.Client{
		// No keep-alive: no connection (or goroutine) outlives a probe.
		Transport:     &http.Transport{Proxy: nil, DisableKeepAlives: true},
		Timeout:       5 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// app is one deployment's app and its supervisor.
type app struct {
	s   *Supervisor
	id  string
	out *runlog.Output
	l   Launcher

	ready  chan struct{} // closed once it answered HTTP
	stopCh chan struct{} // closed by Stop
	done   chan struct{} // closed when nothing of it runs any more and nobody will restart it

	mu       sync.Mutex
	slug     string
	upstream string
	inst     Instance
	stopping bool
}

// Start launches the app of job with the Launcher newLauncher makes (its
// output goes to out), waits until it answers HTTP and returns its upstream;
// the app is then supervised until Stop. Starting an app that already runs
// returns its upstream.
func (s *Supervisor) Start(ctx context.Context, job rt.Job, logs rt.LogSink, newLauncher func(out *runlog.Output) Launcher) (string, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return "", errors.New("runtime is shut down")
	}
	if a := s.apps[job.DeploymentID]; a != nil {
		s.mu.Unlock()
		switch restart, err := lifecycle.Await(ctx, job.DeploymentID, a.ready, a.done); {
		case err != nil:
			return "", err
		case restart: // given up after crashes: what it held goes, a new app starts
			_ = a.l.Release(ctx) // best effort, as a new start cleans up too
			s.forget(a)
			return s.Start(ctx, job, logs, newLauncher)
		}
		return a.getUpstream(), nil
	}
	a := &app{
		s: s, id: job.DeploymentID, slug: job.ProjectSlug,
		out:   runlog.New(logs, rt.StreamApp, runlog.Masker(job)),
		ready: make(chan struct{}), stopCh: make(chan struct{}), done: make(chan struct{}),
	}
	a.l = newLauncher(a.out)
	s.apps[a.id] = a
	s.mu.Unlock()
	return a.start(ctx)
}

func (a *app) start(ctx context.Context) (string, error) {
	inst, err := a.launch(ctx, false)
	if served, ok := inst.(Served); ok && err == nil {
		a.out.System(served.Serving())
		close(a.ready)
		go func() {
			<-inst.Exited()
			close(a.done)
		}()
		return inst.Upstream(), nil
	}
	if err == nil {
		err = a.waitHealthy(ctx, inst)
	}
	if err != nil && (errors.Is(err, ErrForeignListener) || exitedOnTakenPort(inst)) {
		a.out.System(fmt.Sprintf("port %d was taken by another process; starting the app on another port", inst.Port()))
		inst.Stop(ctx, a.s.cfg.StopGrace) // it may still run (waiting to listen on the taken port)
		if inst, err = a.launch(ctx, true); err == nil {
			err = a.waitHealthy(ctx, inst)
		}
	}
	if err != nil {
		return "", a.fail(ctx, inst, err)
	}
	a.out.System("app answers HTTP on " + inst.Upstream())
	close(a.ready)
	go a.supervise(inst)
	return inst.Upstream(), nil
}

// launch launches an instance and adopts it.
func (a *app) launch(ctx context.Context, restart bool) (Instance, error) {
	inst, err := a.l.Launch(ctx, restart)
	if err == nil {
		err = a.adopt(inst, true)
	}
	return inst, err
}

// exitedOnTakenPort reports whether inst ended because another process holds
// its port (see Exit.PortTaken).
func exitedOnTakenPort(inst Instance) bool {
	if inst == nil {
		return false
	}
	select {
	case <-inst.Exited():
		return inst.Exit().PortTaken
	default:
		return false
	}
}

// adopt makes inst the app's running instance (Stop stops it from then on),
// and with withUpstream its upstream the app's, unless the app is stopping.
func (a *app) adopt(inst Instance, withUpstream bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopping {
		return errors.New("the app was stopped while starting")
	}
	a.inst = inst
	if withUpstream {
		a.upstream = inst.Upstream()
	}
	return nil
}

// fail ends a start that failed: nothing of the app is left, and err
// (masked) is logged and returned.
func (a *app) fail(ctx context.Context, inst Instance, err error) error {
	ctx = context.WithoutCancel(ctx)
	if inst != nil {
		inst.Stop(ctx, a.s.cfg.StopGrace)
	}
	_ = a.l.Release(ctx) // best effort: the start's error is what counts
	a.s.forget(a)
	close(a.done)
	err = runlog.MaskErr(a.out.Mask, err)
	a.out.System(err.Error())
	return err
}

func (a *app) getUpstream() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.upstream
}

func (a *app) getSlug() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.slug
}

func (a *app) isStopping() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stopping
}

// Running reports whether the app of deploymentID is starting or running.
func (s *Supervisor) Running(deploymentID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.apps[deploymentID] != nil
}

// forget drops a from the table of apps, if it is still there.
func (s *Supervisor) forget(a *app) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.apps[a.id] == a {
		delete(s.apps, a.id)
	}
}
