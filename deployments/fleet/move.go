package fleet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/hosts"
	"github.com/keelson-dev/keelson/platform/db"
)

// movePrefix is in the reason of every deployment a move started: how a
// failed move is told from other failed deployments.
const movePrefix = ": moving deployment "

// Mover moves the apps off a host (down, or drained).
type Mover struct {
	Deployments *deployments.Service
	// Store reads the host's LIVE deployments and the projects' ones under
	// way (the store the engine got, deployments.EngineDeps.Store).
	Store interface {
		DeploymentsWhere(ctx context.Context, f deployments.Filter) ([]*deployments.Deployment, error)
	}
	// PinnedHost, when set, gives the host id a project is pinned to ("" for
	// none): an app pinned to the host it leaves is not moved.
	PinnedHost func(ctx context.Context, projectID string) (string, error)
}

// MoveOffHost deploys each LIVE deployment of host h again on another host
// (a host down, or drained), each log saying why (why) and how: from its
// image in the registry, with no clone and no build (a rollback to it,
// placed anywhere); or, when its image went to no registry, by building the
// same commit again. A project with a deployment under way already is left
// to it; one pinned to h stays, its log saying so.
func (m Mover) MoveOffHost(ctx context.Context, h *hosts.Host, why string) error {
	svc, store, queue := m.Deployments, m.Store, h.Queue
	note := func(id, msg string) {
		if sink, err := svc.Logs().Sink(ctx, id); err == nil {
			sink.Log(deployments.StreamSystem, msg)
		}
	}
	lives, err := store.DeploymentsWhere(ctx, deployments.Filter{Statuses: []deployments.Status{deployments.StatusLive}, Host: queue})
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range lives {
		busy, err := store.DeploymentsWhere(ctx, deployments.Filter{ProjectID: d.ProjectID, Statuses: deployments.Statuses()[:4]}) // not ended, not LIVE
		if err != nil || len(busy) > 0 {
			if errs = append(errs, err); err == nil {
				note(d.ID, fmt.Sprintf("%s; deployment %s of the project is under way and replaces this one", why, busy[0].ID))
			}
			continue
		}
		if pinned, err := m.pinned(ctx, d.ProjectID, h.ID); err != nil || pinned {
			if errs = append(errs, err); err == nil {
				note(d.ID, fmt.Sprintf("%s; the project is pinned to host %s, so its app is not moved: it is back when the host is (unpin the project and deploy it to move it)", why, h.ID))
			}
			continue
		}
		p, how := deployments.TriggerParams{ProjectID: d.ProjectID, CommitSHA: d.CommitSHA, RollbackOf: d.ID,
			Reason: why + movePrefix + d.ID}, "starts from its image "+d.Image+" (nothing built again)"
		if d.Image == "" {
			p.RollbackOf, how = "", "builds commit "+d.CommitSHA+" again (its image is in no registry)"
		}
		next, err := svc.Trigger(ctx, p)
		if err != nil {
			note(d.ID, fmt.Sprintf("%s; moving the app failed: %s", why, err))
			errs = append(errs, fmt.Errorf("deployment %s: %w", d.ID, err))
			continue
		}
		note(d.ID, fmt.Sprintf("%s; deployment %s %s on another host", why, next.ID, how))
	}
	return errors.Join(append(errs, svc.Logs().Flush(ctx))...)
}

// pinned reports whether project is pinned to host id.
func (m Mover) pinned(ctx context.Context, project, id string) (bool, error) {
	if m.PinnedHost == nil {
		return false, nil
	}
	pin, err := m.PinnedHost(ctx, project)
	return pin == id, err
}

// MoveRetry bounds the moves of a down host's apps tried again after they
// failed (a registry away when the host died: PROVISION could not pull).
type MoveRetry struct {
	Tries int           // moves of one app per outage, the first included; default 5
	After time.Duration // wait after the first failure, doubled after each; default 5s
}

// MoveDue reports whether a move off host queue, down since since (its
// last heartbeat), is due again at now: a project that still has a LIVE
// deployment on that host and whose newest deployment is a move that
// FAILED, fewer than r.Tries times since, the last at least r.After ×
// 2^(failures-1) ago. It says which, for the log. One query.
func (q Queries) MoveDue(ctx context.Context, queue string, since, now time.Time, r MoveRetry) (due bool, why string, err error) {
	tries, after := max(r.Tries, 1), r.After
	if r.Tries == 0 {
		tries = 5
	}
	if after <= 0 {
		after = 5 * time.Second
	}
	var rows []struct {
		ProjectID string             `bun:"project_id"`
		Status    deployments.Status `bun:"status"`
		Reason    string             `bun:"reason"`
		UpdatedAt time.Time          `bun:"updated_at"`
	}
	live := q.DB.NewSelect().Model((*deployments.Deployment)(nil)).Column("project_id").
		Where("status = ?", deployments.StatusLive).Where("host = ?", queue)
	err = q.DB.NewSelect().Model((*deployments.Deployment)(nil)).Column("project_id", "status", "reason", "updated_at").
		Where("project_id IN (?)", live).Where("created_at > ?", since).OrderExpr("created_at ASC, id ASC").Scan(ctx, &rows)
	if err != nil {
		return false, "", db.Translate(err)
	}
	type state struct {
		failed int
		last   time.Time
		newest deployments.Status
		move   bool
	}
	by := map[string]*state{}
	var order []string
	for _, r := range rows { // oldest first
		st := by[r.ProjectID]
		if st == nil {
			st = &state{}
			by[r.ProjectID] = st
			order = append(order, r.ProjectID)
		}
		st.newest, st.move = r.Status, strings.Contains(r.Reason, movePrefix)
		if st.move && r.Status == deployments.StatusFailed {
			st.failed++
			st.last = r.UpdatedAt
		}
	}
	for _, id := range order {
		st := by[id]
		if st.move && st.newest == deployments.StatusFailed && st.failed < tries && !now.Before(st.last.Add(after<<(st.failed-1))) {
			return true, fmt.Sprintf("the move of project %s failed %d of %d times", id, st.failed, tries), nil
		}
	}
	return false, "", nil
}
