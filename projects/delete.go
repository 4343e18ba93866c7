package projects

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// DeleteStatus is the deletion state of a project.
type DeleteStatus struct {
	ID           string `json:"id" doc:"Project id"`
	Status       string `json:"status" enum:"ACTIVE,DELETING,DELETED,FAILED" doc:"Deletion state"`
	ErrorMessage string `json:"errorMessage,omitempty" doc:"Why the last teardown failed (status FAILED)"`
}

// Delete starts (or retries, after FAILED) the deletion of project id as
// user (admin): it marks it DELETING and tears it down in the background.
func (s *Service) Delete(ctx context.Context, user, id string) (*DeleteStatus, error) {
	row, _, err := s.get(ctx, s.d.DB, user, id, false, platform.ProjectsDelete)
	if err != nil {
		return nil, err
	}
	owner := row.OwnerID
	now := s.now()
	if row.Status == StatusActive || row.Status == StatusFailed {
		var n int64
		err := db.InTx(ctx, s.d.DB, func(ctx context.Context, tx bun.Tx) error {
			res, err := tx.NewUpdate().Model((*projectRow)(nil)).
				Set("status = ?", StatusDeleting).Set("error_message = ''").
				Set("teardown_at = ?", now).Set("updated_at = ?", now).
				Where("id = ? AND status IN (?, ?)", id, StatusActive, StatusFailed).Exec(ctx)
			if n, _ = res.RowsAffected(); err != nil || n == 0 {
				return err
			}
			return s.record(ctx, tx, row, "project.delete", "deleted "+strconv.Quote(row.Name))
		})
		s.changed(owner)
		if err != nil {
			return nil, wrap("delete", err)
		}
		if n > 0 {
			s.d.Logger.InfoContext(ctx, "project deletion started", "project_id", id, "owner_id", owner, "retry", row.Status == StatusFailed)
			s.startTeardown(id, owner)
			return &DeleteStatus{ID: id, Status: StatusDeleting}, nil
		}
		// Someone else moved it on; answer what it is now.
		if row, _, err = s.get(ctx, s.d.DB, user, id, true, platform.ProjectsDelete); err != nil {
			return nil, err
		}
	}
	if row.Status == StatusDeleting {
		s.resumeIfAbandoned(row)
	}
	if row.Status == StatusDeleted {
		return nil, notFound()
	}
	return &DeleteStatus{ID: id, Status: StatusDeleting}, nil
}

// GetDeleteStatus answers the deletion state of project id as user may
// read it, DELETED included. It first resumes a teardown whose runner vanished.
func (s *Service) GetDeleteStatus(ctx context.Context, user, id string) (*DeleteStatus, error) {
	row, _, err := s.get(ctx, s.d.DB, user, id, true, platform.ProjectsRead)
	if err != nil {
		return nil, err
	}
	if row.Status == StatusDeleting {
		s.resumeIfAbandoned(row)
	}
	st := &DeleteStatus{ID: row.ID, Status: row.Status}
	if row.Status == StatusFailed {
		st.ErrorMessage = row.ErrorMessage
	}
	return st, nil
}

// resumeIfAbandoned restarts the teardown of a DELETING project when no
// runner can still be working on it: none here, and the attempt began longer
// ago than one attempt may last (another replica's runner died).
func (s *Service) resumeIfAbandoned(row *projectRow) {
	s.mu.Lock()
	running := s.inflight[row.ID]
	s.mu.Unlock()
	if running {
		return
	}
	if row.TeardownAt.IsZero() || s.now().Sub(row.TeardownAt) > s.d.TeardownTimeout+time.Minute {
		s.startTeardown(row.ID, row.OwnerID)
	}
}

// startTeardown runs the teardown of owner's project id in the background
// unless one runs already or the service is closing.
func (s *Service) startTeardown(id, owner string) {
	s.mu.Lock()
	if s.closed || s.inflight[id] {
		s.mu.Unlock()
		return
	}
	s.inflight[id] = true
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		defer func() {
			s.mu.Lock()
			delete(s.inflight, id)
			s.mu.Unlock()
		}()
		s.runTeardown(id, owner)
	}()
}

// runTeardown tears owner's project id down and records the outcome, then
// invalidates owner's cached lists (its first write, the claim, changes
// nothing a list shows; the outcome does).
func (s *Service) runTeardown(id, owner string) {
	log := s.d.Logger.With("project_id", id)
	defer s.changed(owner)
	// Claim the attempt: a new lease time tells other replicas it is alive.
	if _, err := s.d.DB.NewUpdate().Model((*projectRow)(nil)).Set("teardown_at = ?", s.now()).
		Where("id = ? AND status = ?", id, StatusDeleting).Exec(s.base); err != nil {
		log.Error("project teardown: claim", "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(s.base, s.d.TeardownTimeout)
	err := s.callTeardown(ctx, id)
	cancel()

	// Record the outcome even if the service is closing: the teardown ran.
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(s.base), 30*time.Second)
	defer wcancel()
	now := s.now()
	switch {
	case err == nil:
		err = db.InTx(wctx, s.d.DB, func(ctx context.Context, tx bun.Tx) error {
			res, err := tx.NewUpdate().Model((*projectRow)(nil)).
				Set("status = ?", StatusDeleted).Set("deleted_at = ?", now).Set("updated_at = ?", now).
				// Nothing secret outlives the project.
				Set("env_vars = '[]'").Set("webhook_secret = ''").Set("error_message = ''").
				Where("id = ? AND status = ?", id, StatusDeleting).Exec(ctx)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n == 1 {
				// The slot is free again, in the same transaction.
				return giveBackSlot(ctx, tx, id)
			}
			return nil
		})
		if err != nil {
			log.Error("project teardown: record DELETED", "err", err)
			return
		}
		log.Info("project deleted")
	case s.base.Err() != nil || errors.Is(err, context.Canceled):
		// Shutting down (ours or the teardown's): leave it DELETING; Start resumes it.
		log.Info("project teardown interrupted by shutdown; will resume", "err", err)
	default:
		msg := "teardown failed: " + err.Error()
		if errors.Is(err, context.DeadlineExceeded) {
			msg = fmt.Sprintf("teardown did not finish within %s", s.d.TeardownTimeout)
		}
		if len(msg) > 1000 {
			msg = msg[:1000]
		}
		log.Error("project teardown failed", "err", err)
		if _, err := s.d.DB.NewUpdate().Model((*projectRow)(nil)).
			Set("status = ?", StatusFailed).Set("error_message = ?", msg).Set("updated_at = ?", now).
			Where("id = ? AND status = ?", id, StatusDeleting).Exec(wctx); err != nil {
			log.Error("project teardown: record FAILED", "err", err)
		}
	}
}

// callTeardown turns a panic of the teardown into an error, so a project is
// never left DELETING with no runner and no reason.
func (s *Service) callTeardown(ctx context.Context, id string) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("teardown panicked: %v", p)
		}
	}()
	return s.events.Deleted.Publish(ctx, Deleted{ProjectID: id})
}

// SchemaName methods name these types in the OpenAPI document (platform.SchemaNamer).
func (DeleteStatus) SchemaName() string { return "ProjectDeleteStatus" }
