package codehost

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/keelson-dev/keelson/codehost/internal/store"
	"github.com/keelson-dev/keelson/platform"
)

// Start runs the webhook worker until ctx ends or Close is called. Deliveries
// stored as pending (including those a restart interrupted) are processed
// first. The worker also re-checks the installation links (RecheckLinks)
// every RecheckInterval/24 of the injected clock. Calling Start twice is an
// error.
func (s *Service) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stop != nil {
		return errors.New("codehost: worker already started")
	}
	ctx, cancel := context.WithCancel(ctx)
	s.stop = cancel
	s.done = make(chan struct{})
	go s.run(ctx)
	return nil
}

// Close stops the worker and waits for the delivery in hand (or ctx).
func (s *Service) Close(ctx context.Context) error {
	s.mu.Lock()
	stop, done := s.stop, s.done
	s.mu.Unlock()
	if stop == nil {
		return nil
	}
	stop()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Service) notify() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Service) run(ctx context.Context) {
	defer close(s.done)
	tick := time.NewTicker(s.d.PollInterval)
	defer tick.Stop()
	statusTick := time.NewTicker(s.d.StatusPollInterval)
	defer statusTick.Stop()
	var nextRecheck time.Time // the links' re-check, on the injected clock
	for {
		if _, err := s.ProcessPending(ctx); err != nil && ctx.Err() == nil {
			s.d.Log.ErrorContext(ctx, "codehost: process deliveries", "err", err)
		}
		if now := s.now(); !now.Before(nextRecheck) {
			if _, err := s.RecheckLinks(ctx); err != nil && ctx.Err() == nil {
				s.d.Log.ErrorContext(ctx, "codehost: re-check installation links", "err", err)
			}
			nextRecheck = now.Add(s.d.RecheckInterval / 24)
		}
		if _, err := s.ReportStatuses(ctx); err != nil && ctx.Err() == nil {
			s.d.Log.ErrorContext(ctx, "codehost: report commit statuses", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-tick.C:
		case <-statusTick.C:
		}
	}
}

// ProcessPending processes every pending delivery, oldest first, and returns
// how many it finished. A delivery whose processing hit a storage or lookup
// error stays pending for the next pass. The worker calls it; hosts without a
// worker may call it themselves.
func (s *Service) ProcessPending(ctx context.Context) (int, error) {
	finished, after := 0, ""
	var errs []error
	for ctx.Err() == nil {
		rows, err := s.store.PendingDeliveries(ctx, after, 20)
		if err != nil {
			return finished, err
		}
		if len(rows) == 0 {
			break
		}
		for _, row := range rows {
			after = row.ID
			if err := s.process(ctx, &row); err != nil {
				errs = append(errs, fmt.Errorf("delivery %s: %w", row.DeliveryID, err))
				continue
			}
			finished++
		}
	}
	return finished, errors.Join(errs...)
}

// process acts on one delivery and marks it processed or failed. It returns
// an error (leaving it pending) only for failures worth retrying.
func (s *Service) process(ctx context.Context, row *store.DeliveryRow) error {
	if row.ProjectID != "" {
		return s.processRepoHook(ctx, row)
	}
	if err := s.configured(); err != nil {
		// Verified by the app's webhook secret, but the app cannot act yet.
		var pe *platform.Error
		missing := "the code-host app is not configured"
		if errors.As(err, &pe) {
			missing = pe.Message
		}
		if row.Event == "ping" {
			return s.store.FinishDelivery(ctx, row.ID, nil, DeliveryProcessed, "pong; "+missing, s.now())
		}
		return s.store.FinishDelivery(ctx, row.ID, nil, DeliveryFailed, missing, s.now())
	}
	ev, err := s.d.Provider.ParseEvent(row.Event, row.Payload)
	if err != nil {
		return s.store.FinishDelivery(ctx, row.ID, nil, DeliveryFailed, "cannot decode the payload: "+err.Error(), s.now())
	}
	var detail string
	switch ev.Kind {
	case EventPing:
		detail = "pong"
	case EventPush:
		if ev.Push == nil {
			return s.store.FinishDelivery(ctx, row.ID, ev, DeliveryFailed, "push payload without push data", s.now())
		}
		detail, err = s.handlePush(ctx, row, ev)
	case EventInstallation:
		detail, err = s.handleInstallation(ctx, ev)
	case EventInstallationRepositories:
		detail = reposChange(ev)
	default:
		detail = "event " + ev.Kind + " is not acted on"
	}
	if err != nil {
		return err
	}
	return s.store.FinishDelivery(ctx, row.ID, ev, DeliveryProcessed, detail, s.now())
}

func (s *Service) handleInstallation(ctx context.Context, ev *Event) (string, error) {
	if ev.Installation == nil || ev.Installation.ID <= 0 {
		return "installation event without an installation", nil
	}
	in := ev.Installation
	status := ""
	switch ev.Action {
	case "created", "unsuspend":
		status = InstallationActive
		if in.Suspended && ev.Action == "created" {
			status = InstallationSuspended
		}
	case "deleted":
		status = InstallationDeleted
	case "suspend":
		status = InstallationSuspended
	default:
		return fmt.Sprintf("installation %d: action %q recorded", in.ID, ev.Action), nil
	}
	if err := s.store.UpsertInstallation(ctx, in, status, s.now()); err != nil {
		return "", err
	}
	d := fmt.Sprintf("installation %d on %s %s: %s", in.ID, strings.ToLower(in.AccountType), in.AccountLogin, status)
	if len(ev.ReposAdded) > 0 {
		d += "; " + reposChange(ev)
	}
	return d, nil
}

func reposChange(ev *Event) string {
	names := func(rs []Repository) string {
		out := make([]string, len(rs))
		for i, r := range rs {
			out[i] = r.FullName
		}
		return strings.Join(out, ", ")
	}
	var parts []string
	if len(ev.ReposAdded) > 0 {
		parts = append(parts, "added: "+names(ev.ReposAdded))
	}
	if len(ev.ReposRemoved) > 0 {
		parts = append(parts, "removed: "+names(ev.ReposRemoved))
	}
	if len(parts) == 0 {
		return "no repositories changed"
	}
	return strings.Join(parts, "; ")
}

// skipMarkers in a head commit message keep a push from deploying.
var skipMarkers = []string{"[skip ci]", "[ci skip]", "[skip deploy]", "[no ci]", "[skip actions]"}

func (s *Service) handlePush(ctx context.Context, row *store.DeliveryRow, ev *Event) (string, error) {
	p := ev.Push
	var urls []string
	for _, u := range []string{p.Repository.HTMLURL, p.Repository.CloneURL} {
		if u != "" {
			urls = append(urls, u)
		}
	}
	repoID := ""
	if p.Repository.ID > 0 {
		repoID = itoa(p.Repository.ID)
	}
	if len(urls) == 0 && repoID == "" {
		return "push without a repository", nil
	}
	projects, err := s.d.Projects.ProjectsForRepository(ctx, urls, repoID)
	if err != nil {
		return "", fmt.Errorf("projects for repository: %w", err)
	}
	if len(projects) == 0 {
		return "no project uses this repository", nil
	}
	return s.deployPush(ctx, &pushDelivery{row: row, push: p, installationID: ev.InstallationID, projects: projects})
}

// decide is the one ladder of what a push does for a project, for app
// deliveries and repository webhooks alike: it sets dec's decision and detail
// when the push deploys nothing, and leaves them empty when it deploys.
// blocked (with its detail why) is the source's own refusal, judged after
// the branch: the app's installation not linked, or a repository webhook's
// push naming no commit; "" when there is none. It returns the pushed branch.
func decide(dec *store.DecisionRow, p *Push, proj RepoProject, blocked, why string) (branch string) {
	branch, isBranch := strings.CutPrefix(p.Ref, "refs/heads/")
	want := proj.AutoDeployBranch
	if want == "" {
		want = p.Repository.DefaultBranch
	}
	switch {
	case !proj.AutoDeploy:
		dec.Decision, dec.Detail = DecisionAutoDeployOff, "autoDeploy is off for this project"
	case p.Deleted:
		dec.Decision, dec.Detail = DecisionBranchDeleted, "the push deleted "+p.Ref
	case !isBranch:
		dec.Decision, dec.Detail = DecisionBranchMismatch, p.Ref+" is not a branch"
	case branch != want:
		dec.Decision, dec.Detail = DecisionBranchMismatch, fmt.Sprintf("pushed to %s; the project deploys %s", branch, want)
	case blocked != "":
		dec.Decision, dec.Detail = blocked, why
	default:
		if m := skipMarker(p.HeadCommitMessage); m != "" {
			dec.Decision, dec.Detail = DecisionSkipMessage, "the head commit message contains "+m
		}
	}
	return branch
}

// settleInterrupted marks failed a decision still "deploying": it was cut off
// between claiming and hearing back from Trigger, and as nobody can know
// whether it deployed, it is never retried.
func (s *Service) settleInterrupted(ctx context.Context, d *store.DecisionRow) error {
	if d.Decision != store.DecisionDeploying {
		return nil
	}
	if err := s.store.UpdateDecision(ctx, d.ID, DecisionFailed, "", "interrupted before the deployment was confirmed"); err != nil {
		return err
	}
	d.Decision = DecisionFailed
	return nil
}

// recordDecision stores a decision that deploys nothing (a redelivery's
// conflict is no error) and returns it.
func (s *Service) recordDecision(ctx context.Context, dec *store.DecisionRow) (string, error) {
	if err := s.store.InsertDecision(ctx, dec); err != nil && !store.IsConflict(err) {
		return "", err
	}
	return dec.Decision, nil
}

// claimAndTrigger claims the delivery and project pair before triggering, so
// neither a restart nor a second worker can deploy it twice, then triggers the
// deployment of commit and records how that went. It returns the decision
// and, when deployed, the deployment's id.
func (s *Service) claimAndTrigger(ctx context.Context, dec *store.DecisionRow, proj RepoProject, branch, commit, reason string) (decision, depID string, err error) {
	pushKey := branch + "@" + commit
	dec.Decision = store.DecisionDeploying
	dec.PushKey = store.Clean(pushKey, 300)
	if err := s.store.InsertDecision(ctx, dec); err != nil {
		if !store.IsConflict(err) {
			return "", "", err
		}
		// Either another worker has this delivery and project, or an earlier
		// push deployed this branch and commit: record the latter.
		dec.Decision, dec.PushKey = DecisionAlreadyDeployed, ""
		dec.Detail = pushKey + " was deployed by an earlier push; it is not deployed again"
		if err := s.store.InsertDecision(ctx, dec); err != nil && !store.IsConflict(err) {
			return "", "", err
		} else if err != nil {
			return DecisionFailed, "", nil // another worker has it
		}
		return DecisionAlreadyDeployed, "", nil
	}
	depID, err = s.d.Deployer.Trigger(ctx, proj.ProjectID, proj.OwnerID, commit, reason)
	decision, detail := DecisionDeployed, "deployment of "+shortSHA(commit)+" started"
	if err != nil {
		decision, detail = classifyTriggerError(err)
		if decision == DecisionFailed {
			s.d.Log.ErrorContext(ctx, "codehost: trigger push deployment", "project_id", proj.ProjectID, "err", err)
		}
		depID = ""
	}
	if err := s.store.UpdateDecision(context.WithoutCancel(ctx), dec.ID, decision, depID, detail); err != nil {
		return "", "", err
	}
	return decision, depID, nil
}

func classifyTriggerError(err error) (decision, detail string) {
	var pe *platform.Error
	switch {
	case errors.As(err, &pe) && (pe.Code == CodeNoRepoAccess || pe.Code == CodeRelink || pe.Code == CodeLinkMemberCannotDeploy):
		return DecisionNoAccess, pe.Message
	case errors.As(err, &pe) && (pe.Status == 403 || errors.Is(err, platform.ErrForbidden)):
		return DecisionQuotaExceeded, pe.Message
	case errors.Is(err, platform.ErrForbidden):
		return DecisionQuotaExceeded, "the project's plan does not allow another deployment"
	case errors.Is(err, platform.ErrNotFound):
		return DecisionFailed, "the project no longer exists"
	case errors.As(err, &pe) && pe.Status >= 400 && pe.Status < 500:
		return DecisionFailed, pe.Message
	}
	return DecisionFailed, "the deployment could not be started"
}

func (s *Service) ownerUsesInstallation(ctx context.Context, ownerID string, installationID int64) (bool, error) {
	if installationID <= 0 {
		return false, nil
	}
	linked, err := s.store.IsLinked(ctx, ownerID, installationID)
	if err != nil || !linked {
		return false, err
	}
	status, err := s.store.InstallationStatus(ctx, installationID)
	if errors.Is(err, platform.ErrNotFound) {
		return false, nil
	}
	return status == InstallationActive, err
}

func skipMarker(msg string) string {
	lower := strings.ToLower(msg)
	for _, m := range skipMarkers {
		if strings.Contains(lower, m) {
			return m
		}
	}
	return ""
}

func shortSHA(sha string) string {
	if len(sha) > 7 {
		return sha[:7]
	}
	return sha
}
