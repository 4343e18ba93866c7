package deployments

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/keelson-dev/keelson/deployments/metric"
	"github.com/keelson-dev/keelson/deployments/rt"
	"github.com/keelson-dev/keelson/platform"
)

// ErrNotQueued is returned by Activities.Build when the deployment is no longer
// QUEUED (cancelled meanwhile, or claimed by another worker): the engine drops it.
var ErrNotQueued = errors.New("deployments: deployment is no longer queued")

// ActivitiesConfig are the dependencies of Activities.
type ActivitiesConfig struct {
	Store    *Store
	Logs     *Logs
	Runtime  Runtime
	Projects ProjectSource
	Git      GitCredentials // optional: nil clones without credentials
	Logger   *slog.Logger   // optional
	// ReleaseTimeout bounds stopping, unrouting and cleaning up after a
	// deployment ends. Default 30s.
	ReleaseTimeout time.Duration
	// Clock stamps every stored time. Default platform.SystemClock.
	Clock platform.Clock
	// Metrics is told how long each build took. Optional.
	Metrics Metrics
	// Hosts routes the project's custom domains in the DNS step. Optional:
	// nil serves the apps-domain host only.
	Hosts HostRouter
	// KeepBuilds is how many of a project's replaced deployments keep their
	// build (image or workspace) for a rollback, when the Runtime is a
	// Reuser. Default DefaultKeepBuilds; -1 keeps none.
	KeepBuilds int
}

// DefaultKeepBuilds is ActivitiesConfig.KeepBuilds's default.
const DefaultKeepBuilds = 3

// Activities are the bodies of a deployment's steps, the same for every
// engine: each loads the deployment and its project, runs the Runtime's part,
// and records the step's state and log lines in the database. An engine only
// orchestrates them: the embedded engine calls them in order on goroutines; a
// Temporal worker registers them as activities of a workflow whose id is the
// deployment's workflowName.
//
// Every method takes the deployment ID, not a struct, so it can be retried
// anywhere; and every state change is a conditional update, so a retried or
// raced call never moves a deployment backwards.
type Activities struct {
	store    *Store
	logs     *Logs
	rt       Runtime
	projects ProjectSource
	git      GitCredentials
	log      *slog.Logger
	release  time.Duration
	clock    platform.Clock
	metrics  Metrics
	hosts    HostRouter
	keep     int // builds kept per project for rollbacks (0: none)
}

// NewActivities checks cfg and returns the activities.
func NewActivities(cfg ActivitiesConfig) (*Activities, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("deployments: ActivitiesConfig.Store is required")
	case cfg.Logs == nil:
		return nil, errors.New("deployments: ActivitiesConfig.Logs is required")
	case cfg.Runtime == nil:
		return nil, errors.New("deployments: ActivitiesConfig.Runtime is required")
	case cfg.Projects == nil:
		return nil, errors.New("deployments: ActivitiesConfig.Projects is required")
	}
	a := &Activities{store: cfg.Store, logs: cfg.Logs, rt: cfg.Runtime, projects: cfg.Projects,
		git: cfg.Git, log: cfg.Logger, release: cfg.ReleaseTimeout, clock: cfg.Clock, metrics: cfg.Metrics, hosts: cfg.Hosts}
	if a.metrics == nil {
		a.metrics = metric.None{}
	}
	if a.clock == nil {
		a.clock = platform.SystemClock{}
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.release <= 0 {
		a.release = 30 * time.Second
	}
	switch _, reuser := cfg.Runtime.(Reuser); {
	case !reuser || cfg.KeepBuilds < 0:
	case cfg.KeepBuilds == 0:
		a.keep = DefaultKeepBuilds
	default:
		a.keep = cfg.KeepBuilds
	}
	return a, nil
}

func (a *Activities) now() time.Time { return a.clock.Now().UTC().Truncate(time.Microsecond) }

// Build runs the BUILD step of a QUEUED deployment: QUEUED -> BUILDING, clone
// and build, record the commit and the build's duration. It returns
// ErrNotQueued when the deployment is not QUEUED any more.
func (a *Activities) Build(ctx context.Context, id string) error {
	return a.step(ctx, id, StepBuild, StatusQueued, func(ctx context.Context, d *Deployment, job Job, sink *Sink) ([]string, error) {
		if d.RollbackOf != "" {
			return []string{"image"}, a.reuse(ctx, d, job, sink)
		}
		start := a.clock.Now()
		commit, err := a.rt.Build(ctx, job, sink)
		if p, ok := a.rt.(rt.Publisher); ok && err == nil {
			d.Image, err = p.Publish(ctx, job, sink) // any host can then run it
		}
		a.metrics.BuildFinished(metric.Outcome(ctx, err), a.clock.Now().Sub(start))
		if err != nil {
			return nil, err
		}
		cols := []string{"build_duration_ms", "image"}
		if commit != "" {
			d.CommitSHA = commit
			cols = append(cols, "commit_sha")
			sink.Systemf("built commit %s", commit)
		}
		if st := d.Steps.Get(StepBuild).StartedAt; st != nil {
			d.BuildDurationMs = a.now().Sub(*st).Milliseconds()
		}
		return cols, nil
	})
}

// reuse is BUILD of a rollback (or a move off a host): the runtime gives
// the deployment the kept build of d.RollbackOf, here or through its image
// in the registry, and the step is SKIPPED (nothing cloned or built).
func (a *Activities) reuse(ctx context.Context, d *Deployment, job Job, sink *Sink) error {
	r, ok := a.rt.(Reuser)
	from, err := a.store.DeploymentGet(ctx, d.RollbackOf)
	switch {
	case !ok:
		return errors.New("this runtime cannot roll back (it does not keep builds)")
	case err != nil:
		return fmt.Errorf("reading deployment %s to start from: %w", d.RollbackOf, err)
	}
	d.Image, job.Image = from.Image, from.Image
	if err := r.Reuse(ctx, d.RollbackOf, job); errors.Is(err, ErrBuildGone) {
		return fmt.Errorf("the build of deployment %s is no longer kept", d.RollbackOf)
	} else if err != nil {
		return err
	}
	sink.Systemf("the build of deployment %s is used again (%s); nothing cloned or built", d.RollbackOf, cmp.Or(d.Image, "kept on this host"))
	d.Steps.Get(StepBuild).Status = StepSkipped
	return nil
}

// Provision runs the PROVISION step of a built deployment: start the app and
// wait until it answers; record its upstream address.
func (a *Activities) Provision(ctx context.Context, id string) error {
	return a.step(ctx, id, StepProvision, StatusBuilding, func(ctx context.Context, d *Deployment, job Job, sink *Sink) ([]string, error) {
		up, err := a.rt.Start(ctx, job, sink)
		if err != nil {
			return nil, err
		}
		d.Upstream = up
		sink.Systemf("app is answering on %s", up)
		return []string{"upstream"}, nil
	})
}

// ConfigureDNS runs the DNS step of a provisioned deployment: route the
// project's host and its active custom domains to it (one switch: the
// custom domains follow the host's route), mark it LIVE, then stop the
// project's previous LIVE deployment (which ends CANCELLED with supersededBy
// set). The step's log names each hostname and its certificate's state.
func (a *Activities) ConfigureDNS(ctx context.Context, id string) error {
	var live *Deployment
	err := a.step(ctx, id, StepDNS, StatusProvisioning, func(ctx context.Context, d *Deployment, job Job, sink *Sink) ([]string, error) {
		url, err := a.route(ctx, d, d.Upstream, sink)
		if err != nil {
			return nil, err
		}
		d.DeployedURL = url
		d.Status = StatusLive
		d.FinishedAt = a.now()
		live = d
		return []string{"deployed_url", "finished_at"}, nil
	})
	if err != nil {
		return err
	}
	a.logs.End(id)
	return a.Supersede(context.WithoutCancel(ctx), live.ID)
}

// route points the project's custom domains (Hosts) and its apps-domain
// host at upstream, the latter last: that is the switch, and the custom
// domains follow it. It logs each hostname with its certificate's state.
func (a *Activities) route(ctx context.Context, d *Deployment, upstream string, sink *Sink) (string, error) {
	var hosts []HostState
	if a.hosts != nil {
		var err error
		if hosts, err = a.hosts.RouteHosts(ctx, d.ProjectID, d.ProjectSlug); err != nil {
			return "", fmt.Errorf("route the project's custom domains: %w", err)
		}
	}
	url, err := a.rt.Route(ctx, d.ProjectSlug, d.ID, upstream)
	if err != nil {
		return "", err
	}
	for _, h := range hosts {
		sink.Systemf("serving %s (certificate: %s)", h.Hostname, h.Certificate)
	}
	return url, nil
}

// Supersede stops the project's other LIVE deployments, now that the LIVE
// deployment id is routed: each ends CANCELLED with supersededBy = id and
// replacedAt set, its app stopped; its build is kept for a rollback (see
// pruneBuilds) or removed.
func (a *Activities) Supersede(ctx context.Context, id string) error {
	d, err := a.store.DeploymentGet(ctx, id)
	if err != nil || d.Status != StatusLive {
		return err
	}
	olds, err := a.store.DeploymentsWhere(ctx, Filter{ProjectID: d.ProjectID, Statuses: []Status{StatusLive}})
	if err != nil {
		return err
	}
	for _, old := range olds {
		if old.ID == d.ID || old.Status != StatusLive || old.CreatedAt.After(d.CreatedAt) {
			continue
		}
		old.BuildKept = a.keep > 0
		a.releaseResources(ctx, old)
		// Stored before it reads CANCELLED: a client that then deletes it
		// deletes the line too, which would otherwise outlive it.
		if sink, err := a.logs.Sink(ctx, old.ID); err == nil {
			sink.Systemf("replaced by deployment %s; app stopped", d.ID)
			_ = a.logs.Flush(ctx) // cut short by ctx, the line stays queued: only this order is lost
		}
		old.Status, old.SupersededBy, old.ReplacedAt = StatusCancelled, d.ID, a.now()
		if _, err := a.store.DeploymentUpdate(ctx, old, []Status{StatusLive}, "status", "superseded_by", "replaced_at", "build_kept"); err != nil {
			a.log.Error("mark deployment superseded", "deployment", old.ID, "err", err)
		}
	}
	if a.keep > 0 {
		a.pruneBuilds(ctx, d.ProjectID)
	}
	return nil
}

type stepWork func(ctx context.Context, d *Deployment, job Job, sink *Sink) (columns []string, err error)

// step marks step RUNNING (only if the deployment is in status from), runs
// work, and marks the step SUCCEEDED. A failure is returned as is: the engine
// then calls Finish, which records it.
func (a *Activities) step(ctx context.Context, id string, step StepName, from Status, work stepWork) error {
	d, err := a.store.DeploymentGet(ctx, id)
	if err != nil {
		return err
	}
	if d.CancelRequested {
		return context.Canceled
	}
	start := a.now()
	d.Status = statusOf(step)
	d.Steps = d.Steps.clone()
	s := d.Steps.Get(step)
	s.Status, s.StartedAt, s.FinishedAt = StepRunning, &start, nil
	ok, err := a.store.DeploymentUpdate(ctx, d, []Status{from}, "status", "steps")
	if err != nil {
		return err
	}
	if !ok {
		if step == StepBuild {
			return ErrNotQueued
		}
		return fmt.Errorf("deployments: %s cannot start: deployment %s is no longer %s", step, id, from)
	}
	sink, err := a.logs.Sink(ctx, id)
	if err != nil {
		return err
	}
	sink.ResetTail()
	sink.Systemf("%s started", step)
	job, err := a.job(ctx, d, sink)
	if err != nil {
		return err
	}
	cols, err := work(ctx, d, job, sink)
	if err != nil {
		return err
	}
	// The work is done: record it even if a cancel arrives now (a route, once
	// switched, is not switched back by a late cancel).
	ctx = context.WithoutCancel(ctx)
	end := a.now()
	d.Steps = d.Steps.clone()
	s = d.Steps.Get(step)
	verb := "skipped" // the work found nothing to do (a rollback's BUILD)
	if s.Status != StepSkipped {
		s.Status, verb = StepSucceeded, "succeeded"
	}
	s.FinishedAt = &end
	sink.Systemf("%s %s", step, verb)
	if d.Status == StatusLive {
		sink.Systemf("deployment is LIVE at %s", d.DeployedURL)
		// Every line up to LIVE is stored before LIVE is visible, so a stream
		// that reads LIVE from the database has nothing left to wait for.
		if err := a.logs.Flush(ctx); err != nil {
			return err
		}
	}
	ok, err = a.store.DeploymentUpdate(ctx, d, []Status{statusOf(step)}, append(cols, "status", "steps")...)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("deployments: deployment %s changed during %s", id, step)
	}
	return nil
}

// job assembles the Runtime's job from the deployment and its project as it
// is now, and teaches sink the secrets to mask.
func (a *Activities) job(ctx context.Context, d *Deployment, sink *Sink) (Job, error) {
	spec, err := a.projects.ProjectForDeploy(ctx, d.ProjectID)
	if errors.Is(err, platform.ErrNotFound) {
		return Job{}, errors.New("the project no longer exists")
	}
	if err != nil {
		return Job{}, err
	}
	var auth *GitAuth
	if a.git != nil {
		if auth, err = a.git.GitAuthFor(ctx, d.ProjectID, spec.RepoURL); err != nil {
			return Job{}, fmt.Errorf("repository credentials: %w", err)
		}
	}
	secrets := make([]string, 0, len(spec.Env)+1)
	for _, e := range spec.Env {
		if e.Secret {
			secrets = append(secrets, e.Value)
		}
	}
	if auth != nil {
		secrets = append(secrets, auth.Password)
	}
	sink.AddSecrets(secrets...)
	return Job{
		DeploymentID: d.ID, ProjectID: d.ProjectID, ProjectSlug: d.ProjectSlug,
		RepoURL: spec.RepoURL, Branch: spec.Branch, CommitSHA: d.CommitSHA,
		Framework: spec.Framework, BuildCommand: spec.BuildCommand, StartCommand: spec.StartCommand,
		Port: spec.Port, Env: spec.Env, Limits: spec.Limits, GitAuth: auth, Image: d.Image,
	}, nil
}

// maxErrorMessage bounds errorMessage.
const maxErrorMessage = 4 << 10

// Finish ends a deployment whose step returned cause: CANCELLED when its
// cancellation was asked (or cause is context.Canceled), else FAILED with an
// errorMessage naming the step, the error and the last lines of its output.
// The running step becomes FAILED, the pending ones SKIPPED; the app is
// stopped, unrouted and its workspace removed. A terminal deployment is left
// alone, so Finish may be retried.
func (a *Activities) Finish(ctx context.Context, id string, cause error) error {
	d, err := a.store.DeploymentGet(ctx, id)
	if err != nil || d.Status.Terminal() {
		return err
	}
	sink, err := a.logs.Sink(ctx, id)
	if err != nil {
		return err
	}
	step := runningStep(d)
	cancelled := d.CancelRequested || errors.Is(cause, context.Canceled)
	from := d.Status
	d.Steps = endSteps(d.Steps, a.now())
	d.FinishedAt = a.now()
	if cancelled {
		d.Status = StatusCancelled
		if step == "" {
			d.ErrorMessage = "cancelled before it started"
		} else {
			d.ErrorMessage = fmt.Sprintf("cancelled during %s", step)
		}
		sink.Systemf("deployment %s", d.ErrorMessage)
	} else {
		d.Status = StatusFailed
		msg := "deployment failed"
		if step != "" {
			msg = string(step) + " failed"
		}
		if cause != nil {
			msg += ": " + cause.Error()
		}
		msg = sink.Mask(msg)
		sink.Systemf("%s", msg)
		if tail := sink.Tail(); len(tail) > 0 && !strings.Contains(msg, tail[len(tail)-1]) {
			msg += "\n" + strings.Join(tail, "\n")
		}
		if len(msg) > maxErrorMessage {
			msg = "…" + msg[len(msg)-maxErrorMessage:]
		}
		d.ErrorMessage = msg
	}
	a.releaseResources(ctx, d)
	if err := a.logs.Flush(ctx); err != nil {
		return err
	}
	if _, err := a.store.DeploymentUpdate(ctx, d, []Status{from}, "status", "steps", "error_message", "finished_at"); err != nil {
		return err
	}
	a.logs.End(id)
	return nil
}

// Note logs a system line to a deployment's log (an engine telling why a
// QUEUED deployment waits).
func (a *Activities) Note(ctx context.Context, id, msg string) {
	if sink, err := a.logs.Sink(ctx, id); err == nil {
		sink.Log(StreamSystem, msg)
	}
}

// CancelQueued cancels a deployment that has not started (QUEUED -> CANCELLED)
// and reports whether it did.
func (a *Activities) CancelQueued(ctx context.Context, id string) (bool, error) {
	d, err := a.store.DeploymentGet(ctx, id)
	if err != nil || d.Status != StatusQueued {
		return false, err
	}
	d.Status, d.CancelRequested = StatusCancelled, true
	d.Steps = endSteps(d.Steps, a.now())
	d.ErrorMessage = "cancelled before it started"
	d.FinishedAt = a.now()
	ok, err := a.store.DeploymentUpdate(ctx, d, []Status{StatusQueued}, "status", "steps", "error_message", "finished_at", "cancel_requested")
	if err != nil || !ok {
		return false, err
	}
	if sink, err := a.logs.Sink(ctx, id); err == nil {
		sink.Systemf("deployment cancelled before it started")
	}
	a.logs.End(id)
	return true, nil
}

// Recover settles a deployment a previous server left in BUILDING,
// PROVISIONING or CONFIGURING_DNS. The rule: if its cancellation was asked it
// ends CANCELLED; else, if it has run fewer than maxAttempts times, it is
// re-queued from BUILD (workspaces are disposable); else it ends FAILED with
// errorMessage "server restarted during <STEP>". Either way whatever it had
// started is stopped and its workspace removed first.
func (a *Activities) Recover(ctx context.Context, id string, maxAttempts int) error {
	d, err := a.store.DeploymentGet(ctx, id)
	if err != nil || d.Status.Terminal() || d.Status == StatusQueued {
		return err
	}
	sink, err := a.logs.Sink(ctx, id)
	if err != nil {
		return err
	}
	step := runningStep(d)
	if step == "" {
		step = stepOfStatus(d.Status)
	}
	a.releaseResources(ctx, d)
	from := d.Status
	switch {
	case d.CancelRequested:
		d.Status, d.ErrorMessage = StatusCancelled, fmt.Sprintf("cancelled during %s (the server restarted while stopping it)", step)
		d.Steps, d.FinishedAt = endSteps(d.Steps, a.now()), a.now()
		sink.Systemf("deployment %s", d.ErrorMessage)
	case d.Attempt < maxAttempts:
		d.Attempt++
		d.Status, d.Steps = StatusQueued, NewSteps()
		d.Upstream, d.DeployedURL, d.BuildDurationMs, d.ErrorMessage = "", "", 0, ""
		sink.Systemf("server restarted during %s; deployment queued again from BUILD (attempt %d of %d)", step, d.Attempt, maxAttempts)
	default:
		d.Status, d.ErrorMessage = StatusFailed, fmt.Sprintf("server restarted during %s", step)
		d.Steps, d.FinishedAt = endSteps(d.Steps, a.now()), a.now()
		sink.Systemf("deployment failed: %s", d.ErrorMessage)
	}
	if err := a.logs.Flush(ctx); err != nil {
		return err
	}
	_, err = a.store.DeploymentUpdate(ctx, d, []Status{from}, "status", "steps", "attempt", "upstream",
		"deployed_url", "build_duration_ms", "error_message", "finished_at")
	if err == nil && d.Status.Terminal() {
		a.logs.End(id)
	}
	return err
}

// RestartLive starts the app of a LIVE deployment again after a server restart
// and points its route at it. If the app cannot start, the deployment ends
// FAILED saying so (its steps keep their history).
func (a *Activities) RestartLive(ctx context.Context, id string) error {
	d, err := a.store.DeploymentGet(ctx, id)
	if err != nil || d.Status != StatusLive {
		return err
	}
	sink, err := a.logs.Sink(ctx, id)
	if err != nil {
		return err
	}
	sink.ResetTail()
	sink.Systemf("server restarted; starting the app again")
	err = func() error {
		job, err := a.job(ctx, d, sink)
		if err != nil {
			return err
		}
		up, err := a.rt.Start(ctx, job, sink)
		if err != nil {
			return err
		}
		url, err := a.route(ctx, d, up, sink)
		if err != nil {
			return err
		}
		d.Upstream, d.DeployedURL = up, url
		_, err = a.store.DeploymentUpdate(ctx, d, []Status{StatusLive}, "upstream", "deployed_url")
		return err
	}()
	if err == nil {
		sink.Systemf("app is running again at %s", d.DeployedURL)
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err() // shutting down again: try at the next start
	}
	if errors.Is(err, ErrNewerRouted) {
		// Its build stays until the newer deployment's DNS step replaces it.
		d.BuildKept = true
		a.releaseResources(ctx, d)
		// A newer deployment went LIVE meanwhile; its DNS step supersedes this one.
		sink.Systemf("not started again: a newer deployment of the project is live")
		return nil
	}
	a.releaseResources(ctx, d)
	d.Status = StatusFailed
	d.ErrorMessage = sink.Mask("the app did not start again after a server restart: " + err.Error())
	d.FinishedAt = a.now()
	sink.Systemf("%s", d.ErrorMessage)
	if _, uerr := a.store.DeploymentUpdate(ctx, d, []Status{StatusLive}, "status", "error_message", "finished_at"); uerr != nil {
		return uerr
	}
	return err
}

// Release stops the deployment's app, removes its route (if it still points
// at it) and its workspace, unless d.BuildKept (a rollback may use it).
// Idempotent.
func (a *Activities) Release(ctx context.Context, d *Deployment) error {
	// The route first: a request then finds the new deployment (here, or on
	// the host another ingress forwards to), never the app being stopped.
	err := a.rt.Unroute(ctx, d.ProjectSlug, d.ID)
	err = errors.Join(err, a.rt.Stop(ctx, d.ID))
	if d.BuildKept {
		return err
	}
	return errors.Join(err, a.rt.Cleanup(ctx, d.ID))
}

// pruneBuilds removes the builds of the project's replaced deployments past
// the newest a.keep, on this runtime.
func (a *Activities) pruneBuilds(ctx context.Context, projectID string) {
	all, err := a.store.DeploymentsWhere(ctx, Filter{ProjectID: projectID, BuildKept: true})
	if err != nil {
		a.log.Error("list builds to prune", "project", projectID, "err", err)
		return
	}
	kept := 0
	for i := len(all) - 1; i >= 0; i-- { // newest first
		d := all[i]
		if kept++; kept <= a.keep {
			continue
		}
		d.BuildKept = false
		a.releaseResources(ctx, d)
		if _, err := a.store.DeploymentUpdate(ctx, d, []Status{d.Status}, "build_kept"); err != nil {
			a.log.Error("mark build removed", "deployment", d.ID, "err", err)
		}
	}
}

// releaseResources is Release with its own deadline, logging failures: it runs
// on paths that must go on (a failure already being recorded).
func (a *Activities) releaseResources(ctx context.Context, d *Deployment) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.release)
	defer cancel()
	if err := a.Release(ctx, d); err != nil {
		a.log.Error("release deployment resources", "deployment", d.ID, "err", err)
	}
}

// runningStep names the step that is RUNNING ("" if none).
func runningStep(d *Deployment) StepName {
	if s := d.Steps.Running(); s != nil {
		return s.Name
	}
	return ""
}

func stepOfStatus(s Status) StepName {
	switch s {
	case StatusProvisioning:
		return StepProvision
	case StatusConfiguringDNS:
		return StepDNS
	}
	return StepBuild
}

// endSteps: the running step FAILED, pending ones SKIPPED.
func endSteps(steps Steps, at time.Time) Steps {
	steps = steps.clone()
	for i := range steps {
		switch steps[i].Status {
		case StepRunning:
			steps[i].Status, steps[i].FinishedAt = StepFailed, &at
		case StepPending:
			steps[i].Status = StepSkipped
		}
	}
	return steps
}
