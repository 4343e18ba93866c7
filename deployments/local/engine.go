// Package local is the embedded deployments engine: it runs deployments'
// workflows on goroutines of the server process, with all state in the
// database, so it needs nothing but the database to run and survives a
// restart. It orchestrates only; the steps are deployments.Activities, which
// call the Runtime (deployments/process by default).
//
// Scheduling: a worker loop picks QUEUED deployments oldest first. A project
// runs one deployment at a time, in creation order (its later deployments wait
// QUEUED); different projects run concurrently up to Config.MaxConcurrent.
// The loop wakes on every trigger and finished run, and also polls.
//
// Fairness (deployments.SlotPolicy, the Temporal engine's rules too): one
// owner runs at most their share of deployments at once (Config.Shares,
// plan-driven; Config.PerUser by default); owners on a FREE plan together
// hold at most Config.FreeSlots of the MaxConcurrent slots (all but one by
// default), so FREE builds cannot hold every slot; a free slot goes to a
// priority owner first, then to the owner with the fewest deployments
// running, then to the oldest, so another owner's waiting build is taken
// before an owner's extra ones. A deployment that waits says why in its
// log: its owner's share is in use, the FREE builds hold their part, or its
// position for a free slot.
//
// Replaced deployments: when a deployment goes LIVE (routed), the project's
// previous LIVE deployment is stopped and ends CANCELLED with supersededBy set
// to the new deployment and replacedAt to the time; only the current
// deployment of a project is LIVE. (SPEC's statuses are fixed, so there is no
// SUPERSEDED status.)
//
// Restart rule (Start): a deployment a previous process left in BUILDING,
// PROVISIONING or CONFIGURING_DNS is queued again from BUILD (attempt 2) if it
// has run fewer than Config.MaxAttempts times (default 2: one resume), else
// ends FAILED with errorMessage "server restarted during <STEP>"; one whose
// cancellation was asked ends CANCELLED. Whatever it had started is stopped
// and its workspace removed first. QUEUED deployments simply stay queued.
// Then every project's LIVE deployment has its app started again and routed
// (apps are processes of the server and die with it); if there are several
// LIVE deployments of a project (the server died between routing a new one
// and stopping the old), the newest wins and the others are superseded.
//
// One process per database: two servers running this engine on one database
// would each restart the LIVE apps. Use the Temporal engine to scale out.
package local

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/keelson-dev/keelson/deployments"
)

// Config configures the engine.
type Config struct {
	Store      Store
	Activities *deployments.Activities
	Logger     *slog.Logger // optional
	// MaxConcurrent caps deployments (and app restarts) running at once. Default 4.
	MaxConcurrent int
	// PollInterval is how often the queue is read even without a wake-up. Default 2s.
	PollInterval time.Duration
	// MaxAttempts is how many runs a deployment gets when restarts interrupt it. Default 2.
	MaxAttempts int
	// FreeSlots is how many of the MaxConcurrent slots deployments of owners
	// on a FREE plan may hold together. Default (and at most) MaxConcurrent-1;
	// with one slot, that slot.
	FreeSlots int
	// PerUser caps one owner's deployments running at once when Shares is
	// nil or fails. Default 2.
	PerUser int
	// Shares gives each owner's share, priority and FREE tier (from their
	// plan); optional: without it, or when it fails, an owner gets PerUser
	// and counts as FREE.
	Shares deployments.Shares
}

// Store is what the engine reads of the deployments (a *deployments.Store).
type Store interface {
	DeploymentGet(ctx context.Context, id string) (*deployments.Deployment, error)
	DeploymentsWhere(ctx context.Context, f deployments.Filter) ([]*deployments.Deployment, error)
}

// Engine is the embedded deployments.Engine.
type Engine struct {
	store Store
	acts  *deployments.Activities
	log   *slog.Logger
	max   int
	slots deployments.SlotPolicy
	poll  time.Duration
	tries int

	ctx   context.Context // cancelled by Close
	stop  context.CancelFunc
	wake  chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	state int             // idle, started, closed
	ready bool            // recovery done: a non-terminal deployment not running here is orphaned
	runs  map[string]*run // by deployment ID
	per   int
	sh    deployments.Shares
	noted map[string]string         // what a waiting deployment's log last said about its wait
	busy  map[string]bool           // projects with a run
	depth int                       // QUEUED deployments left waiting by the last scheduling pass
	lives []*deployments.Deployment // LIVE apps to start again
}

const (
	idle = iota
	started
	closed
)

type run struct {
	owner  string // "" for an app restart (not a build)
	free   bool   // a build of an owner on a FREE plan
	cancel context.CancelFunc
	done   chan struct{}
}

var _ deployments.Engine = (*Engine)(nil)

// New checks cfg and returns an engine; call Start to run it and Close to stop it.
func New(cfg Config) (*Engine, error) {
	if cfg.Store == nil || cfg.Activities == nil {
		return nil, errors.New("local: Config.Store and Config.Activities are required")
	}
	ctx, stop := context.WithCancel(context.Background())
	e := &Engine{
		store: cfg.Store, acts: cfg.Activities, log: cfg.Logger,
		max: cmp.Or(cfg.MaxConcurrent, 4), poll: cmp.Or(cfg.PollInterval, 2*time.Second), tries: cmp.Or(cfg.MaxAttempts, 2),
		ctx: ctx, stop: stop, wake: make(chan struct{}, 1),
		runs: map[string]*run{}, busy: map[string]bool{}, noted: map[string]string{},
		per: cmp.Or(cfg.PerUser, 2), sh: cfg.Shares,
	}
	e.slots = deployments.SlotPolicy{Slots: e.max, FreeSlots: cfg.FreeSlots}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	return e, nil
}

// Start settles what a previous process left behind (see the package doc),
// then starts the worker loop. It returns an error if the database cannot be
// read; the engine is then not running.
func (e *Engine) Start(ctx context.Context) error {
	e.mu.Lock()
	if e.state != idle {
		e.mu.Unlock()
		return errors.New("local: engine already started or closed")
	}
	e.state = started
	e.mu.Unlock()

	interrupted, err := e.store.DeploymentsWhere(ctx, deployments.Filter{Statuses: []deployments.Status{deployments.StatusBuilding,
		deployments.StatusProvisioning, deployments.StatusConfiguringDNS}})
	if err != nil {
		return err
	}
	for _, d := range interrupted {
		if err := e.acts.Recover(ctx, d.ID, e.tries); err != nil {
			return err
		}
	}
	lives, err := e.store.DeploymentsWhere(ctx, deployments.Filter{Statuses: []deployments.Status{deployments.StatusLive}})
	if err != nil {
		return err
	}
	newest := map[string]*deployments.Deployment{}
	for _, d := range lives { // oldest first: the last one of a project wins
		newest[d.ProjectID] = d
	}
	for _, d := range newest {
		if err := e.acts.Supersede(ctx, d.ID); err != nil {
			return err
		}
	}
	e.mu.Lock()
	for _, d := range lives {
		if newest[d.ProjectID] == d {
			e.lives = append(e.lives, d)
		}
	}
	e.ready = true
	e.mu.Unlock()
	e.wg.Add(1)
	go e.loop()
	return nil
}

// Close stops the worker loop and the running deployments (their contexts are
// cancelled; the runtime kills their processes) and waits for them. A
// deployment interrupted this way is settled by the next Start.
func (e *Engine) Close() error {
	e.mu.Lock()
	e.state = closed
	e.mu.Unlock()
	e.stop()
	e.wg.Wait()
	return nil
}

// StartWorkflow wakes the worker loop: d is already stored QUEUED, which is
// all the local engine's workflow needs. Its workflow name is d.WorkflowName.
func (e *Engine) StartWorkflow(_ context.Context, d *deployments.Deployment) (string, error) {
	e.poke()
	return d.WorkflowName, nil
}

// Sync returns the stored state, which the activities keep current. A
// deployment found mid-workflow but running nowhere in this process (its run
// ended without recording an outcome) is ended FAILED, so none stays
// non-terminal forever.
func (e *Engine) Sync(ctx context.Context, d *deployments.Deployment) (*deployments.State, error) {
	cur, err := e.store.DeploymentGet(ctx, d.ID)
	if err != nil {
		return nil, err
	}
	if !cur.Status.Terminal() && cur.Status != deployments.StatusQueued && e.orphaned(cur.ID) {
		if err := e.acts.Finish(ctx, cur.ID, errors.New("the deployment's workflow stopped unexpectedly")); err != nil {
			return nil, err
		}
		if cur, err = e.store.DeploymentGet(ctx, d.ID); err != nil {
			return nil, err
		}
	}
	return deployments.StateOf(cur), nil
}

func (e *Engine) orphaned(id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, running := e.runs[id]
	return e.ready && e.state == started && !running
}

// Cancel cancels a queued deployment at once, or a running one's step
// context, and waits until it has ended (or ctx ends).
func (e *Engine) Cancel(ctx context.Context, d *deployments.Deployment) error {
	r := e.running(d.ID)
	if r == nil {
		ok, err := e.acts.CancelQueued(ctx, d.ID)
		if ok {
			e.poke() // a pass recounts QueueDepth (and may start what waited behind it)
		}
		if err != nil || ok {
			return err
		}
		// Not queued any more: it may have just been picked up.
		if r = e.running(d.ID); r == nil {
			return nil
		}
	}
	r.cancel()
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (e *Engine) running(id string) *run {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.runs[id]
}

func (e *Engine) poke() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

func (e *Engine) loop() {
	defer e.wg.Done()
	t := time.NewTicker(e.poll)
	defer t.Stop()
	for {
		e.schedule()
		select {
		case <-e.ctx.Done():
			return
		case <-e.wake:
		case <-t.C:
		}
	}
}

// schedule launches what may run now: app restarts first, then, by the
// fair-share rules (deployments.SlotPolicy), the oldest QUEUED deployment of
// each idle project, up to the global cap; the others say why they wait.
func (e *Engine) schedule() {
	queued, err := e.store.DeploymentsWhere(e.ctx, deployments.Filter{Statuses: []deployments.Status{deployments.StatusQueued}})
	if err != nil {
		if e.ctx.Err() == nil {
			e.log.Error("read queued deployments", "err", err)
		}
		return
	}
	shares := e.shares(queued)
	notes := map[string]string{}
	defer func() {
		for id, msg := range notes {
			e.acts.Note(e.ctx, id, msg)
		}
	}()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.state != started {
		return
	}
	waiting := e.restartLives() // projects whose turn is taken
	use := deployments.SlotUse{Busy: len(e.runs), Owners: map[string]int{}}
	for _, r := range e.runs {
		if r.owner != "" {
			use.Owners[r.owner]++
			if r.free {
				use.Free++
			}
		}
	}
	var cands []*deployments.Deployment
	var ws []deployments.SlotWaiter
	for _, d := range queued {
		if !waiting[d.ProjectID] && !e.busy[d.ProjectID] {
			cands = append(cands, d)
			ws = append(ws, deployments.SlotWaiter{ID: d.ID, Owner: d.OwnerID, Share: shares[d.OwnerID]})
		}
		waiting[d.ProjectID] = true
	}
	start, why := e.slots.Assign(&use, ws)
	launched := map[string]bool{}
	for _, i := range start {
		launched[cands[i].ID] = true
		e.launch(cands[i], cands[i].OwnerID, ws[i].Share.Free, e.deploy)
	}
	for i, d := range cands {
		if launched[d.ID] {
			continue
		}
		if msg := why(i).Note(e.slots); e.noted[d.ID] != msg {
			e.noted[d.ID], notes[d.ID] = msg, msg
		}
	}
	e.depth = 0
	inQueue := map[string]bool{}
	for _, d := range queued {
		inQueue[d.ID] = true
		if e.runs[d.ID] == nil {
			e.depth++
		}
	}
	for id := range e.noted {
		if !inQueue[id] || launched[id] {
			delete(e.noted, id)
		}
	}
}

// restartLives launches the app restarts Start left, as slots allow, and
// returns their projects (a queued deployment of theirs waits its turn).
// Called with mu held.
func (e *Engine) restartLives() map[string]bool {
	projects := map[string]bool{}
	rest := e.lives[:0]
	for _, d := range e.lives {
		projects[d.ProjectID] = true
		if e.busy[d.ProjectID] || len(e.runs) >= e.max {
			rest = append(rest, d)
			continue
		}
		e.launch(d, "", false, func(ctx context.Context, id string) {
			if err := e.acts.RestartLive(ctx, id); err != nil && ctx.Err() == nil {
				e.log.Error("restart live deployment", "deployment", id, "err", err)
			}
		})
	}
	e.lives = rest
	return projects
}

// QueueDepth is how many QUEUED deployments wait for a turn (their project's,
// their owner's share or a free slot), as of the last scheduling pass: at
// most Config.PollInterval old, and fresh after every trigger, cancel of a
// queued deployment and finished run (each wakes a pass, which runs
// asynchronously: a reader right after one may see the count before it).
func (e *Engine) QueueDepth() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.depth
}

// shares reads the share of each owner with a queued deployment (outside mu:
// it may read the database). Without Shares, or when it fails, an owner
// gets the default share, counted as FREE.
func (e *Engine) shares(queued []*deployments.Deployment) map[string]deployments.Share {
	out := map[string]deployments.Share{}
	for _, d := range queued {
		if _, ok := out[d.OwnerID]; ok {
			continue
		}
		sh := deployments.DefaultShare(e.per)
		if e.sh != nil {
			if got, err := e.sh.BuildShare(e.ctx, d.OwnerID); err == nil {
				sh = got
			} else if e.ctx.Err() == nil {
				e.log.Warn("read build share; using the default", "owner", d.OwnerID, "err", err)
			}
		}
		out[d.OwnerID] = sh
	}
	return out
}

// launch runs fn for d on a goroutine holding d's project (and, for a build,
// one of owner's slots, counted as FREE when free). Called with mu held.
func (e *Engine) launch(d *deployments.Deployment, owner string, free bool, fn func(ctx context.Context, id string)) {
	ctx, cancel := context.WithCancel(e.ctx)
	r := &run{owner: owner, free: free, cancel: cancel, done: make(chan struct{})}
	e.runs[d.ID], e.busy[d.ProjectID] = r, true
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		defer cancel()
		fn(ctx, d.ID)
		e.mu.Lock()
		delete(e.runs, d.ID)
		delete(e.busy, d.ProjectID)
		e.mu.Unlock()
		close(r.done)
		e.poke()
	}()
}

// deploy runs the workflow: BUILD, PROVISION, DNS; on an error, Finish records
// FAILED or CANCELLED, unless the engine is closing (then the next Start settles it).
func (e *Engine) deploy(ctx context.Context, id string) {
	for i, step := range []func(context.Context, string) error{e.acts.Build, e.acts.Provision, e.acts.ConfigureDNS} {
		err := ctx.Err()
		if err == nil {
			err = step(ctx, id)
		}
		if err == nil {
			continue
		}
		if i == 0 && errors.Is(err, deployments.ErrNotQueued) {
			return // cancelled while queued
		}
		if e.ctx.Err() != nil {
			e.log.Info("deployment interrupted by shutdown; the next start settles it", "deployment", id)
			return
		}
		if ferr := e.acts.Finish(context.WithoutCancel(ctx), id, err); ferr != nil {
			e.log.Error("record deployment failure", "deployment", id, "err", ferr, "cause", err)
		}
		return
	}
}
