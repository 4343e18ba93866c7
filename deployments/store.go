package deployments

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/keelson-dev/keelson/deployments/internal/usage"
	"github.com/keelson-dev/keelson/deployments/logstream/logsql"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/audit"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// Store reads and writes the deployments module's tables. Every error it
// returns has passed through db.Translate (platform.ErrNotFound, ErrConflict...).
// All methods are safe for concurrent use; none holds a transaction open while
// calling out.
type Store struct {
	db    bun.IDB
	clock platform.Clock // stamps updated_at; deployments.New sets its Deps.Clock
	audit audit.Recorder // Deps.Audit: records changes a person asked for
	// The log lines' SQL (Log* methods): deployment_logs and each
	// deployment's log_bytes.
	*logsql.SQL
	byID *db.PreparedModel[Deployment] // DeploymentGet's statement (the status route's read)
	// changed is told the project of every write a list page shows (all but
	// host's and log_bytes'), before the write answers ("": any project).
	changed func(projectID string)
}

// NewStore returns a Store over idb (usually the *bun.DB pool) that stamps
// times with the system clock. Its writes tell no Service's list cache in
// process (a Service's own Store does; on Postgres the trigger tells all).
func NewStore(idb bun.IDB) *Store { return newStore(idb, platform.SystemClock{}) }

func newStore(idb bun.IDB, clock platform.Clock) *Store {
	return &Store{db: idb, clock: clock, SQL: logsql.NewSQL(idb, clock, string(StatusFailed), string(StatusCancelled)),
		byID: db.NewPreparedModel[Deployment]("id = ?"), changed: func(string) {}}
}

// DeploymentInsert stores d and counts it against its project's deployments of
// d.CreatedAt's calendar month (UTC). When maxPerMonth > 0 and the project has
// already started that many this month, nothing is stored and usage.ErrQuota is
// returned with used = the count. Check and insert are atomic: on Postgres an
// advisory transaction lock per project serialises concurrent triggers; SQLite
// has a single writer.
func (s *Store) DeploymentInsert(ctx context.Context, d *Deployment, maxPerMonth int) (used int, err error) {
	defer s.changed(d.ProjectID)
	err = s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if err := db.LockTx(ctx, tx, "deployments:"+d.ProjectID); err != nil {
			return err
		}
		if used, err = usage.Take(ctx, tx, d.ProjectID, d.OwnerID, usage.Month(d.CreatedAt), maxPerMonth); err != nil {
			return err
		}
		if _, err := tx.NewInsert().Model(d).Exec(ctx); err != nil {
			return err
		}
		return s.record(ctx, tx, d, d.audit)
	})
	if errors.Is(err, usage.ErrQuota) {
		return used, err
	}
	return used, db.Translate(err)
}

// DeploymentGet returns the deployment id, or platform.ErrNotFound.
func (s *Store) DeploymentGet(ctx context.Context, id string) (*Deployment, error) {
	d, err := s.byID.One(ctx, s.db, id)
	return d, db.Translate(err)
}

// DeploymentStatuses answers the status of each of ids that exists (one query).
func (s *Store) DeploymentStatuses(ctx context.Context, ids []string) (map[string]Status, error) {
	var rows []struct {
		ID     string `bun:"id"`
		Status Status `bun:"status"`
	}
	if len(ids) == 0 {
		return map[string]Status{}, nil
	}
	if err := s.db.NewSelect().Model((*Deployment)(nil)).Column("id", "status").
		Where("id IN (?)", bun.In(ids)).Scan(ctx, &rows); err != nil {
		return nil, db.Translate(err)
	}
	out := make(map[string]Status, len(rows))
	for _, r := range rows {
		out[r.ID] = r.Status
	}
	return out, nil
}

// DeploymentsEnded answers, for each of ids that exists, whether it is
// terminal (logstream.Store: a stream's end, the writer's end check).
func (s *Store) DeploymentsEnded(ctx context.Context, ids []string) (map[string]bool, error) {
	st, err := s.DeploymentStatuses(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(st))
	for id, status := range st {
		out[id] = status.Terminal()
	}
	return out, nil
}

// DeploymentListParams select a page of deployments, newest first.
type DeploymentListParams struct {
	// OwnerIDs are the owner accounts; required unless ProjectID is set,
	// then nil reads the project's deployments of any owner.
	OwnerIDs  []string
	ProjectID string // optional filter
	After     *platform.Cursor
	Limit     int
}

// DeploymentList returns a page of the owners' deployments, newest first.
func (s *Store) DeploymentList(ctx context.Context, p DeploymentListParams) ([]*Deployment, error) {
	var out []*Deployment
	q := s.db.NewSelect().Model(&out)
	if p.OwnerIDs != nil || p.ProjectID == "" {
		q = q.Where("owner_id IN (?)", bun.In(p.OwnerIDs))
	}
	if p.ProjectID != "" {
		q = q.Where("project_id = ?", p.ProjectID)
	}
	if err := (db.Keyset{Time: "created_at", ID: "id"}).Page(q, p.After, p.Limit).Scan(ctx); err != nil {
		return nil, db.Translate(err)
	}
	return out, nil
}

// Filter picks deployments for DeploymentsWhere; a zero field matches all.
type Filter struct {
	ProjectID string
	Statuses  []Status
	Host      string // the host queue that ran PROVISION
	BuildKept bool   // only those whose build is kept for a rollback
}

// DeploymentsWhere returns the deployments f picks, oldest first.
func (s *Store) DeploymentsWhere(ctx context.Context, f Filter) ([]*Deployment, error) {
	var out []*Deployment
	q := s.db.NewSelect().Model(&out)
	if f.ProjectID != "" {
		q = q.Where("project_id = ?", f.ProjectID)
	}
	if len(f.Statuses) > 0 {
		q = q.Where("status IN (?)", bun.In(f.Statuses))
	}
	if f.Host != "" {
		q = q.Where("host = ?", f.Host)
	}
	if f.BuildKept {
		q = q.Where("build_kept = ?", true)
	}
	err := q.OrderExpr("created_at ASC, id ASC").Scan(ctx)
	return out, db.Translate(err)
}

// DeploymentSetHost records the host (worker) that runs the deployment's app
// (no page shows it: nothing is told).
func (s *Store) DeploymentSetHost(ctx context.Context, id, host string) error {
	_, err := s.db.NewUpdate().Model((*Deployment)(nil)).Set("host = ?", host).Where("id = ?", id).Exec(ctx)
	return db.Translate(err)
}

// DeploymentUpdate writes columns of d (and updated_at) to its row. With from
// non-empty it only updates a row whose status is one of from, and reports
// whether it did (false, nil: the row moved on or is gone).
func (s *Store) DeploymentUpdate(ctx context.Context, d *Deployment, from []Status, columns ...string) (bool, error) {
	d.UpdatedAt = s.now()
	defer s.changed(d.ProjectID)
	q := s.db.NewUpdate().Model(d).Column(append(columns, "updated_at")...).Where("id = ?", d.ID)
	if len(from) > 0 {
		q = q.Where("status IN (?)", bun.In(from))
	}
	res, err := q.Exec(ctx)
	if err != nil {
		return false, db.Translate(err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, db.Translate(err)
	}
	return n > 0, nil
}

// DeploymentRequestCancel records that the deployment's cancellation was asked,
// so a restart does not resume it.
func (s *Store) DeploymentRequestCancel(ctx context.Context, id string) error {
	return s.requestCancel(ctx, &Deployment{ID: id}, "")
}

// requestCancel is DeploymentRequestCancel with d's audit row of action ("": none).
func (s *Store) requestCancel(ctx context.Context, d *Deployment, action string) error {
	defer s.changed(d.ProjectID)
	return db.Translate(s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		_, err := tx.NewUpdate().Model((*Deployment)(nil)).Set("cancel_requested = ?", true).
			Set("updated_at = ?", s.now()).Where("id = ?", d.ID).Exec(ctx)
		if err != nil {
			return err
		}
		return s.record(ctx, tx, d, action)
	}))
}

// DeploymentDelete removes the deployment, its log lines and its build slot. Deleting an absent one is not an error.
func (s *Store) DeploymentDelete(ctx context.Context, id string) error {
	return s.deleteDeployment(ctx, &Deployment{ID: id}, "")
}

// deleteDeployment is DeploymentDelete with d's audit row of action ("": none).
func (s *Store) deleteDeployment(ctx context.Context, d *Deployment, action string) error {
	defer s.changed(d.ProjectID)
	return db.Translate(s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		for _, m := range []any{(*LogLine)(nil), (*BuildSlot)(nil)} {
			if _, err := tx.NewDelete().Model(m).Where("deployment_id = ?", d.ID).Exec(ctx); err != nil {
				return err
			}
		}
		if _, err := tx.NewDelete().Model((*Deployment)(nil)).Where("id = ?", d.ID).Exec(ctx); err != nil {
			return err
		}
		return s.record(ctx, tx, d, action)
	}))
}

// record writes d's audit row of action ("": none) in tx.
func (s *Store) record(ctx context.Context, tx bun.IDB, d *Deployment, action string) error {
	if action == "" {
		return nil
	}
	return audit.Record(ctx, s.audit, tx, audit.Entry{Action: action, ResourceType: "deployment", ResourceID: d.ID,
		OwnerID: d.OwnerID, ProjectID: d.ProjectID, Summary: d.Reason})
}

// UsageDeleteProject forgets the monthly counts of a deleted project.
func (s *Store) UsageDeleteProject(ctx context.Context, projectID string) error {
	return usage.DeleteProject(ctx, s.db, projectID)
}

// UsageByOwner returns, per project of ownerID, how many deployments it started in month (2006-01).
func (s *Store) UsageByOwner(ctx context.Context, ownerID, month string) (map[string]int, error) {
	return usage.ByOwner(ctx, s.db, ownerID, month)
}

// now is the store's timestamp: UTC, microsecond precision so values survive a
// Postgres round trip unchanged (keyset cursors compare them exactly).
func (s *Store) now() time.Time { return s.clock.Now().UTC().Truncate(time.Microsecond) }

// errorf wraps err with a message for logs (never sent to clients).
func errorf(format string, a ...any) error { return fmt.Errorf("deployments: "+format, a...) }

// ProjectOwnerSet records ownerID as the owner of the project's deployments and usage rows.
func (s *Store) ProjectOwnerSet(ctx context.Context, projectID, ownerID string) error {
	defer s.changed(projectID)
	return db.Translate(s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		for _, m := range []any{(*Deployment)(nil), (*usage.Row)(nil)} {
			if _, err := tx.NewUpdate().Model(m).Set("owner_id = ?", ownerID).Where("project_id = ?", projectID).Exec(ctx); err != nil {
				return err
			}
		}
		return nil
	}))
}
