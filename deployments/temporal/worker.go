package temporal

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/keelson-dev/keelson/deployments"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// WorkerConfig are the dependencies of a worker.
type WorkerConfig struct {
	// Activities are the step bodies, built over the worker's real Runtime
	// (the same one passed to NewWorker). Required.
	Activities *deployments.Activities
	// Store is the deployments store (the same database as the API's). Required.
	Store  WorkerStore
	Logger *slog.Logger
	// Options are passed to the SDK's worker (concurrency, identity, ...).
	Options worker.Options
	// HostID names this host: its own task queue is <taskQueue>/worker/<HostID>.
	// Give a stable one (platform.StoredID in the data dir) so a worker started
	// again after a crash takes back its queue, and with it the release of
	// the apps it ran, and starts its LIVE apps again (Start). Default: a new
	// id per process (the apps of a crashed worker then stay down).
	HostID string
	// PerUser caps one owner's deployments running at once, across every
	// worker, when Shares is nil or fails. Default 2.
	PerUser int
	// Shares gives each owner's share, priority and FREE tier (from their
	// plan); optional: without it, or when it fails, an owner gets PerUser
	// and counts as FREE.
	Shares deployments.Shares
	// BuildSlots is how many deployments build at once across every worker
	// (from BUILD until LIVE or ended); FreeSlots how many of them owners on
	// a FREE plan hold together (default and at most BuildSlots-1). Every
	// worker of a task queue must be given the same. Default 4.
	BuildSlots, FreeSlots int
	// Placer chooses the host each deployment builds and runs on (the hosts
	// register); optional: without it any worker takes each build.
	Placer Placer
	// SlotLease is how long a build slot counts as held before the worker
	// that finds its owner at the cap asks Temporal whether the holder's
	// workflow still runs (a terminated one never released it). Default 1m.
	SlotLease time.Duration
}

// Placer chooses the host a new deployment builds and runs on.
type Placer interface {
	Place(ctx context.Context, deploymentID string) (Placement, error)
}

// Placement is a Placer's answer: the host's task queue ("" for any
// worker) and the reason, for the deployment's log; Refused when no host
// can take it: the deployment fails with Reason.
type Placement struct {
	Queue, Reason string
	Refused       bool
	// Pinned: the project is pinned to the host; if that host does not take
	// the build, the deployment fails instead of going to any worker.
	Pinned bool
}

// WorkerStore is what a worker reads and writes of the deployments directly
// (a *deployments.Store); everything else goes through Activities.
type WorkerStore interface {
	DeploymentGet(ctx context.Context, id string) (*deployments.Deployment, error)
	DeploymentRequestCancel(ctx context.Context, id string) error
	DeploymentsWhere(ctx context.Context, f deployments.Filter) ([]*deployments.Deployment, error)
	DeploymentSetHost(ctx context.Context, id, host string) error
	BuildSlotAcquire(ctx context.Context, req deployments.SlotRequest, policy deployments.SlotPolicy) (deployments.SlotAnswer, error)
	BuildSlotRenew(ctx context.Context, id string, until time.Time) error
	BuildSlotRelease(ctx context.Context, id string, policy deployments.SlotPolicy, lease time.Duration) error
}

// Worker runs deployment workflows and their activities. It polls two task
// queues: the shared one (workflows, BUILD, bookkeeping) and its own, where a
// deployment's PROVISION, DNS and release run once it built there (the
// workspace and the app are local to the worker that built them).
type Worker struct {
	shared, host worker.Worker
	newShared    func() worker.Worker // a shared-queue worker, again after a cordon

	mu        sync.Mutex // guards shared, started, cordoned
	started   bool
	cordoned  bool
	hostQueue string
	a         *activities
	log       *slog.Logger

	stop     context.CancelFunc // ends restartLive
	restarts sync.WaitGroup
}

// NewWorker returns a worker for taskQueue that runs steps with rt. Start it
// with Start (or Run) and stop it with Stop.
func NewWorker(c client.Client, taskQueue string, rt deployments.Runtime, cfg WorkerConfig) (*Worker, error) {
	switch {
	case c == nil:
		return nil, errors.New("temporal: NewWorker: client is required")
	case taskQueue == "":
		return nil, errors.New("temporal: NewWorker: task queue is required")
	case rt == nil:
		return nil, errors.New("temporal: NewWorker: runtime is required")
	case cfg.Activities == nil:
		return nil, errors.New("temporal: WorkerConfig.Activities is required")
	case cfg.Store == nil:
		return nil, errors.New("temporal: WorkerConfig.Store is required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	hostID := cfg.HostID
	if hostID == "" {
		host, _ := os.Hostname()
		hostID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), uuid.NewString()[:8])
	}
	hostQueue := taskQueue + "/worker/" + hostID
	a := &activities{acts: cfg.Activities, store: cfg.Store, rt: rt, client: c, hostQueue: hostQueue, log: log,
		perUser: cmp.Or(cfg.PerUser, 2), shares: cfg.Shares, lease: cmp.Or(cfg.SlotLease, time.Minute), placer: cfg.Placer,
		slots: deployments.SlotPolicy{Slots: cmp.Or(cfg.BuildSlots, 4), FreeSlots: cfg.FreeSlots}}

	reg := func(w worker.Worker, fn any, name string) {
		w.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
	}
	newShared := func() worker.Worker {
		shared := worker.New(c, taskQueue, cfg.Options)
		shared.RegisterWorkflowWithOptions(Workflow, workflow.RegisterOptions{Name: WorkflowType})
		reg(shared, a.build, activityBuild)
		reg(shared, a.finish, activityFinish)
		reg(shared, a.release, activityRelease)
		reg(shared, a.signalRelease, activitySignalRelease)
		// Run as local activities by the workflow worker (see waitForSlot).
		reg(shared, a.acquireSlot, activityAcquireSlot)
		reg(shared, a.releaseSlot, activityReleaseSlot)
		reg(shared, a.place, activityPlace)
		return shared
	}

	hostOpts := cfg.Options
	hostOpts.DisableWorkflowWorker = true
	own := worker.New(c, hostQueue, hostOpts)
	reg(own, a.build, activityBuild) // a rollback's, pinned to the host that kept the build
	reg(own, a.provision, activityProvision)
	reg(own, a.configureDNS, activityConfigureDNS)
	reg(own, a.finish, activityFinish)
	reg(own, a.release, activityRelease)
	return &Worker{shared: newShared(), newShared: newShared, host: own, hostQueue: hostQueue, a: a, log: log, stop: func() {}}, nil
}

// Cordon stops (true) or starts again (false) polling the shared task
// queue: a cordoned host takes no new deployment (no BUILD, so no
// PROVISION or DNS follows it here) and runs no workflow code, while its own
// queue still serves the apps it runs (their release, a replaced
// deployment's stop). Deployments wait QUEUED while every host is
// cordoned. Before Start it sets the state Start begins in.
func (w *Worker) Cordon(cordoned bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cordoned == cordoned {
		return nil
	}
	if !w.started { // Start begins in that state
		w.cordoned = cordoned
		return nil
	}
	if cordoned {
		w.shared.Stop()
		w.cordoned = true
		w.log.Info("temporal: host cordoned: no longer taking deployments", "host_queue", w.hostQueue)
		return nil
	}
	shared := w.newShared()
	if err := shared.Start(); err != nil {
		return fmt.Errorf("temporal: uncordon: %w", err)
	}
	w.shared, w.cordoned = shared, false
	w.log.Info("temporal: host uncordoned: taking deployments again", "host_queue", w.hostQueue)
	return nil
}

// HostQueue is the worker's own task queue.
func (w *Worker) HostQueue() string { return w.hostQueue }

// Start starts polling; it returns once both pollers run. In the
// background it starts again the apps of the LIVE deployments this host ran
// (see HostID).
func (w *Worker) Start() error {
	if err := w.host.Start(); err != nil {
		return fmt.Errorf("temporal: start worker: %w", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.cordoned { // cordoned: Cordon(false) starts a new one
		if err := w.shared.Start(); err != nil {
			w.host.Stop()
			return fmt.Errorf("temporal: start worker: %w", err)
		}
	}
	w.started = true
	ctx, cancel := context.WithCancel(context.Background())
	w.stop = cancel
	w.restarts.Add(1)
	go func() {
		defer w.restarts.Done()
		w.restartLive(ctx)
	}()
	return nil
}

// restartLive starts again the app of every LIVE deployment recorded on this
// host, oldest first: a worker killed with -9 took its apps (or their routes,
// with its ingress) along. A deployment replaced meanwhile keeps its place
// (the ingress routes only forward, see deployments.ErrNewerRouted).
func (w *Worker) restartLive(ctx context.Context) {
	lives, err := w.a.store.DeploymentsWhere(ctx, deployments.Filter{Statuses: []deployments.Status{deployments.StatusLive}, Host: w.hostQueue})
	if err != nil {
		if ctx.Err() == nil {
			w.log.Error("temporal: list live deployments to start again", "err", err)
		}
		return
	}
	for _, d := range lives {
		if err := w.a.acts.RestartLive(ctx, d.ID); err != nil && ctx.Err() == nil {
			w.log.Error("temporal: start a live deployment again", "deployment", d.ID, "err", err)
		}
	}
}

// Stop stops polling and waits for running activities (up to the SDK's
// WorkerStopTimeout; then their contexts are cancelled), and for the
// restarts Start began.
func (w *Worker) Stop() {
	w.stop()
	w.restarts.Wait()
	w.mu.Lock()
	if !w.cordoned {
		w.shared.Stop()
	}
	w.started = false
	w.mu.Unlock()
	w.host.Stop()
}

// Run starts the worker and stops it when ctx ends.
func (w *Worker) Run(ctx context.Context) error {
	if err := w.Start(); err != nil {
		return err
	}
	<-ctx.Done()
	w.Stop()
	return nil
}
