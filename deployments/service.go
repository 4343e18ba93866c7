package deployments

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/keelson-dev/keelson/deployments/internal/opt"
	"github.com/keelson-dev/keelson/deployments/internal/pagecache"
	"github.com/keelson-dev/keelson/deployments/internal/usage"
	"github.com/keelson-dev/keelson/deployments/logstream"
	"github.com/keelson-dev/keelson/platform"
)

// Service is the deployments module's behaviour, used by its routes and, through
// Trigger, TeardownProject and DeploymentsThisMonth, by other modules.
type Service struct {
	d         Deps
	store     *Store
	lists     *pagecache.Cache            // GET /deployments?projectId=' pages
	finished  *pagecache.Rows[Deployment] // the status route's terminal rows, kept with lists
	logs      *Logs
	acts      *Activities
	engine    Engine
	projects  ProjectSource
	clock     platform.Clock
	log       *slog.Logger
	cancelTO  time.Duration
	retention *logstream.Retention // the hourly log purges Start begins
	streams   *logstream.Streams   // the log streams (SSE)
}

// TriggerParams ask for a deployment of a project.
type TriggerParams struct {
	ProjectID string
	// OwnerID is the caller; the project must be theirs (else ErrNotFound).
	// Internal callers that already resolved the project (a verified webhook)
	// may leave it empty to act as the project's owner.
	OwnerID string
	// CommitSHA pins the commit to build; empty builds the branch's head.
	CommitSHA string
	// Reason says why, e.g. "manual", "push to main", "redeploy of <id>". Default "manual".
	Reason string
	// RollbackOf runs the build of this earlier deployment again (Rollback).
	RollbackOf string
	from       *Deployment // RollbackOf's row (Rollback): a build in no registry runs again on its host only
	// Action names the deployment in the audit log. Default "deployment.create".
	Action string
}

var commitRE = regexp.MustCompile(`^[0-9a-f]{7,64}$`)

// Trigger queues a deployment of the project and starts its workflow. Errors:
// 404 unknown project (or not the owner's), 400 bad commit, 403 when the
// plan's monthly maxDeployments is reached, 503 when the engine is down.
func (s *Service) Trigger(ctx context.Context, p TriggerParams) (*Deployment, error) {
	if !platform.ValidID(p.ProjectID) {
		return nil, platform.NotFound("project not found")
	}
	if p.CommitSHA != "" && !commitRE.MatchString(p.CommitSHA) {
		return nil, platform.Invalid("commitSha: must be a lowercase hex commit id of 7 to 64 characters")
	}
	spec, err := s.projects.ProjectForDeploy(ctx, p.ProjectID)
	if errors.Is(err, platform.ErrNotFound) {
		return nil, platform.NotFound("project not found")
	}
	if err != nil {
		return nil, err
	}
	if err := s.authorize(ctx, p.OwnerID, p.ProjectID, spec.OwnerID, platform.DeploymentsWrite); err != nil {
		return nil, err
	}
	if ra, ok := s.d.Git.(RepoAccess); ok && spec.RepoURL != "" {
		if err := ra.CheckRepoAccess(ctx, p.ProjectID, spec.RepoURL); err != nil {
			return nil, err
		}
	}
	if f := p.from; f != nil && f.Image == "" && f.Host != "" && spec.PinnedHost != "" && spec.PinnedQueue != f.Host {
		return nil, platform.Conflict(fmt.Sprintf("the build of deployment %s is kept only on the host that made it, and the project is pinned to host %s: deploy the project to build it there", f.ID, spec.PinnedHost))
	}
	reason := cmp.Or(p.Reason, "manual")
	reason = reason[:min(len(reason), 200)]
	at := s.clock.Now().UTC().Truncate(time.Microsecond)
	id := platform.NewID()
	d := &Deployment{
		ID: id, ProjectID: p.ProjectID, OwnerID: spec.OwnerID, ProjectSlug: spec.Slug,
		Status: StatusQueued, Steps: NewSteps(), CommitSHA: p.CommitSHA, Reason: reason,
		Region: spec.Region, WorkflowName: "deploy-" + id, Attempt: 1, CreatedAt: at, UpdatedAt: at,
		RollbackOf: p.RollbackOf, audit: cmp.Or(p.Action, "deployment.create"),
		MemoryMi: spec.Limits.MemoryMi, CPUm: spec.Limits.CPUMillis,
	}
	used, err := s.store.DeploymentInsert(ctx, d, spec.MaxDeploymentsPerMonth)
	if errors.Is(err, usage.ErrQuota) {
		msg := fmt.Sprintf("maxDeployments quota reached: %d of %d deployments this month", used, spec.MaxDeploymentsPerMonth)
		if spec.PlanName != "" {
			msg += " on plan " + spec.PlanName
		}
		return nil, platform.Forbidden(msg).WithCode("QUOTA_EXCEEDED")
	}
	if err != nil {
		return nil, err
	}
	if sink, err := s.logs.Sink(ctx, id); err == nil {
		sink.Systemf("deployment queued (%s)", reason)
	}
	name, err := s.engine.StartWorkflow(ctx, d)
	if err != nil {
		s.log.Error("start deployment workflow", "deployment", id, "err", err)
		_ = s.acts.Finish(context.WithoutCancel(ctx), id, errors.New("the deployment engine could not start the workflow"))
		return nil, platform.Unavailable("the deployment engine is unavailable; try again later")
	}
	if name != "" && name != d.WorkflowName {
		d.WorkflowName = name
		if _, err := s.store.DeploymentUpdate(ctx, d, nil, "workflow_name"); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// authorize lets userID act on projectID with perm: through Deps.Access
// when set, else when userID is the project's owner account. An empty
// userID is an internal caller that already resolved the project.
func (s *Service) authorize(ctx context.Context, userID, projectID, ownerID string, perm platform.Permission) error {
	switch {
	case userID == "":
		return nil
	case s.d.Access != nil:
		return s.d.Access.Authorize(ctx, userID, projectID, perm)
	case userID != ownerID:
		return platform.NotFound("project not found")
	}
	return nil
}

// projectReadable reports whether userID may read projectID's deployments.
func (s *Service) projectReadable(ctx context.Context, userID, projectID string) error {
	if s.d.Access != nil && userID != "" { // one query, no secrets opened
		return s.d.Access.Authorize(ctx, userID, projectID, platform.DeploymentsRead)
	}
	spec, err := s.projects.ProjectForDeploy(ctx, projectID)
	if err != nil {
		return err
	}
	return s.authorize(ctx, userID, projectID, spec.OwnerID, platform.DeploymentsRead)
}

// Get returns deployment id as userID may read it (ErrNotFound if absent or
// not theirs to see).
func (s *Service) Get(ctx context.Context, userID, id string) (*Deployment, error) {
	return s.getFor(ctx, userID, id, platform.DeploymentsRead, s.store.DeploymentGet)
}

// getFor returns deployment id, read by read, when userID's role on its project holds perm.
func (s *Service) getFor(ctx context.Context, userID, id string, perm platform.Permission, read func(context.Context, string) (*Deployment, error)) (*Deployment, error) {
	if !platform.ValidID(id) {
		return nil, platform.NotFound("deployment not found")
	}
	d, err := read(ctx, id)
	if err == nil {
		err = s.authorize(ctx, userID, d.ProjectID, d.OwnerID, perm)
	}
	if errors.Is(err, platform.ErrNotFound) {
		return nil, platform.NotFound("deployment not found")
	}
	return d, err
}

// ListParams select a page of the deployments a user may read, newest first.
type ListParams struct {
	OwnerID   string // the caller
	ProjectID string // optional filter
	Page      platform.PageParams
}

// List returns a page of deployments and the cursor of the next page ("" at the end).
func (s *Service) List(ctx context.Context, p ListParams) ([]*Deployment, string, error) {
	cur, owners, err := s.listScope(ctx, p)
	if err != nil {
		return nil, "", err
	}
	ds, err := s.store.DeploymentList(ctx, DeploymentListParams{OwnerIDs: owners, ProjectID: p.ProjectID, After: cur, Limit: p.Page.Size() + 1})
	if err != nil {
		return nil, "", err
	}
	ds, next := platform.TrimPage(ds, p.Page.Size(), cursorOf)
	return ds, next, nil
}

func cursorOf(d *Deployment) platform.Cursor { return platform.Cursor{Time: d.CreatedAt, ID: d.ID} }

// listScope decodes p's cursor and decides, per request, what the caller may
// list: a project they cannot read is a 404; the accounts whose deployments they see.
func (s *Service) listScope(ctx context.Context, p ListParams) (*platform.Cursor, []string, error) {
	cur, err := platform.DecodeCursor(p.Page.Cursor)
	if err != nil {
		return nil, nil, err
	}
	if p.ProjectID != "" {
		// Filtering by someone else's (or no) project is a 404, like every
		// other route that names a project the caller cannot see.
		if err := s.projectReadable(ctx, p.OwnerID, p.ProjectID); errors.Is(err, platform.ErrNotFound) {
			return nil, nil, platform.NotFound("project not found")
		} else if err != nil {
			return nil, nil, err
		}
	}
	owners := []string{p.OwnerID}
	if s.d.Access != nil {
		if owners, err = s.d.Access.Accounts(ctx, p.OwnerID); err != nil {
			return nil, nil, err
		}
	}
	return cur, owners, nil
}

// Status returns the deployment's state, synced from the engine (SPEC 3.1)
// while it is not terminal (then it is final, and kept in memory exactly
// like the list pages: docs/BEHAVIOUR.md). The caller's role is asked each time.
func (s *Service) Status(ctx context.Context, ownerID, id string) (*Deployment, error) {
	d, err := s.getFor(ctx, ownerID, id, platform.DeploymentsRead, s.finished.Read)
	if err != nil || d.Status.Terminal() {
		return d, err
	}
	return s.sync(ctx, d)
}

func (s *Service) sync(ctx context.Context, d *Deployment) (*Deployment, error) {
	st, err := s.engine.Sync(ctx, d)
	if err != nil {
		// The stored state is still the best answer; the next call syncs again.
		s.log.Warn("sync deployment from engine", "deployment", d.ID, "err", err)
		return d, nil
	}
	cur := StateOf(d)
	if st.Status == "" || sameState(cur, st) {
		return d, nil
	}
	from := d.Status
	d.Status, d.Steps, d.DeployedURL, d.ErrorMessage = st.Status, st.Steps, st.DeployedURL, st.ErrorMessage
	d.BuildDurationMs, d.FinishedAt = st.BuildDuration.Milliseconds(), st.FinishedAt
	if st.CommitSHA != "" {
		d.CommitSHA = st.CommitSHA
	}
	if _, err := s.store.DeploymentUpdate(ctx, d, []Status{from}, "status", "steps", "deployed_url",
		"error_message", "build_duration_ms", "finished_at", "commit_sha"); err != nil {
		return nil, err
	}
	return d, nil
}

func sameState(a, b *State) bool {
	if a.Status != b.Status || a.DeployedURL != b.DeployedURL || a.ErrorMessage != b.ErrorMessage ||
		a.BuildDuration != b.BuildDuration || (b.CommitSHA != "" && a.CommitSHA != b.CommitSHA) ||
		!a.FinishedAt.Equal(b.FinishedAt) || len(a.Steps) != len(b.Steps) {
		return false
	}
	for i := range a.Steps {
		x, y := a.Steps[i], b.Steps[i]
		if x.Name != y.Name || x.Status != y.Status || !opt.EqualTime(x.StartedAt, y.StartedAt) || !opt.EqualTime(x.FinishedAt, y.FinishedAt) {
			return false
		}
	}
	return true
}

// Cancel stops the owner's non-terminal deployment and returns it as it ended
// (409 if it already ended).
func (s *Service) Cancel(ctx context.Context, ownerID, id string) (*Deployment, error) {
	d, err := s.getFor(ctx, ownerID, id, platform.DeploymentsWrite, s.store.DeploymentGet)
	if err != nil {
		return nil, err
	}
	if d.Status.Terminal() {
		return nil, platform.Conflict(fmt.Sprintf("deployment is already %s", d.Status))
	}
	if err := s.cancel(ctx, d, "deployment.cancel"); err != nil {
		return nil, err
	}
	return s.store.DeploymentGet(ctx, id)
}

// cancel stops d, with its audit row of action ("" for none).
func (s *Service) cancel(ctx context.Context, d *Deployment, action string) error {
	ctx, cancel := context.WithTimeout(ctx, s.cancelTO)
	defer cancel()
	if err := s.store.requestCancel(ctx, d, action); err != nil {
		return err
	}
	return s.engine.Cancel(ctx, d)
}

// Redeploy queues a new deployment of the same project and commit as id.
func (s *Service) Redeploy(ctx context.Context, ownerID, id string) (*Deployment, error) {
	d, err := s.getFor(ctx, ownerID, id, platform.DeploymentsWrite, s.store.DeploymentGet)
	if err != nil {
		return nil, err
	}
	return s.Trigger(ctx, TriggerParams{ProjectID: d.ProjectID, OwnerID: ownerID, CommitSHA: d.CommitSHA, Reason: "redeploy of " + id,
		Action: "deployment.redeploy"})
}

// Rollback starts a new deployment of the project from the kept build of the
// owner's replaced deployment id: no clone and no build, then the usual
// PROVISION and DNS. Errors: 404 unknown (or not the owner's), 409 when the
// deployment was never replaced or its build is no longer kept, or the
// runtime cannot reuse builds.
func (s *Service) Rollback(ctx context.Context, ownerID, id string) (*Deployment, error) {
	d, err := s.getFor(ctx, ownerID, id, platform.DeploymentsWrite, s.store.DeploymentGet)
	if err != nil {
		return nil, err
	}
	switch {
	case d.Status == StatusLive:
		return nil, platform.Conflict(fmt.Sprintf("deployment %s is live: there is nothing to roll back to", id))
	case d.SupersededBy == "":
		return nil, platform.Conflict(fmt.Sprintf("deployment %s never went live and was replaced: only a replaced deployment can be rolled back to", id))
	case !d.BuildKept:
		return nil, platform.Conflict(fmt.Sprintf("the build of deployment %s is no longer kept: a project keeps the builds of its last %d replaced deployments", id, s.acts.keep))
	}
	if _, ok := s.acts.rt.(Reuser); !ok {
		return nil, platform.Conflict("this server's runtime cannot roll back (it does not keep builds)")
	}
	return s.Trigger(ctx, TriggerParams{ProjectID: d.ProjectID, OwnerID: ownerID, CommitSHA: d.CommitSHA,
		Reason: "rollback to " + id, RollbackOf: id, from: d, Action: "deployment.rollback"})
}

// Delete removes the owner's deployment: cancels it if it runs, stops its app,
// removes its route if the route still points at it, its workspace, its logs
// and its record.
func (s *Service) Delete(ctx context.Context, ownerID, id string) error {
	d, err := s.getFor(ctx, ownerID, id, platform.DeploymentsDelete, s.store.DeploymentGet)
	if err != nil {
		return err
	}
	return s.remove(ctx, d, "deployment.delete")
}

// remove deletes d, with its audit row of action ("" for none).
func (s *Service) remove(ctx context.Context, d *Deployment, action string) error {
	d.BuildKept = false // deleted: its build goes too
	if !d.Status.Terminal() {
		if err := s.cancel(ctx, d, ""); err != nil {
			return err
		}
	}
	if err := s.acts.Release(ctx, d); err != nil {
		return err
	}
	if err := s.logs.Flush(ctx); err != nil {
		return err
	}
	if err := s.store.deleteDeployment(ctx, d, action); err != nil {
		return err
	}
	s.logs.Forget(d.ID)
	return nil
}

// TeardownProject removes every deployment of a project being deleted: cancels
// the running ones, stops apps, removes routes, workspaces, logs, records and
// monthly counts. Idempotent: a second call finds nothing left to do.
func (s *Service) TeardownProject(ctx context.Context, projectID string) error {
	ds, err := s.store.DeploymentsWhere(ctx, Filter{ProjectID: projectID})
	if err != nil {
		return err
	}
	var errs []error
	// Newest first: queued deployments are cancelled before the running one
	// ends and could let the next of them start.
	for i := len(ds) - 1; i >= 0; i-- {
		if err := s.remove(ctx, ds[i], ""); err != nil {
			errs = append(errs, fmt.Errorf("deployment %s: %w", ds[i].ID, err))
		}
	}
	if len(errs) == 0 {
		if pc, ok := s.acts.rt.(ProjectCleaner); ok {
			errs = append(errs, pc.CleanupProject(ctx, projectID))
		}
		errs = append(errs, s.store.UsageDeleteProject(ctx, projectID))
	}
	return errors.Join(errs...)
}

// DeploymentsThisMonth returns, per project of ownerID, how many deployments it
// started this calendar month (UTC). Deleting deployments does not lower it.
func (s *Service) DeploymentsThisMonth(ctx context.Context, ownerID string) (map[string]int, error) {
	return s.store.UsageByOwner(ctx, ownerID, usage.Month(s.clock.Now()))
}

// Logs returns the service's log hub (for engines and tests).
func (s *Service) Logs() *Logs { return s.logs }

// LogLines returns up to limit stored log lines of the owner's deployment
// after the cursor afterSeq, in order (the stream route's backlog, unstreamed).
func (s *Service) LogLines(ctx context.Context, ownerID, id string, afterSeq int64, limit int) ([]LogLine, error) {
	if _, err := s.Get(ctx, ownerID, id); err != nil {
		return nil, err
	}
	return s.store.LogList(ctx, LogListParams{DeploymentID: id, AfterSeq: afterSeq, Limit: limit})
}

// ProjectOwnerChanged moves a project's deployments and monthly counts to
// its new owner account (a project moved to or from a team): they are
// listed, counted against the log budget and given build slots as the new
// owner's.
func (s *Service) ProjectOwnerChanged(ctx context.Context, projectID, ownerID string) error {
	return s.store.ProjectOwnerSet(ctx, projectID, ownerID)
}
