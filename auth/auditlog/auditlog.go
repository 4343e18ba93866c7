// Package auditlog keeps the audit log: one row for every change a person
// or an API token made (who, with which token, from which address, what, on
// which resource, when, and a summary without secret values), written by
// the modules through platform/audit in the transaction of the change, and
// read by GET /teams/{id}/audit-log (a team's admins and owners) and GET
// /auth/audit-log (the caller's own actions, and the changes to their
// personal projects).
//
// Decisions:
//   - A row names the account its resource belongs to (a team, or a user),
//     so a project moved to another team keeps its history where it was
//     made: the old team keeps the rows of before, the new one gets those
//     after.
//   - Rows are kept for Deps.Retention (default 365 days): Start deletes
//     older ones at once and then hourly until Close.
//   - Changes nobody made (a push deploying, a purge) are not recorded.
//
// It reads team roles through Deps.Teams only; it is not the place where
// modules decide what to record.
package auditlog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/audit"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// Teams tells a user's role in a team ("" when not a member).
type Teams interface {
	MemberRole(ctx context.Context, teamID, userID string) (platform.MemberRole, error)
}

// Deps are what the module needs from its host.
type Deps struct {
	// DB holds the audit_events table (Migrations). Required.
	DB *bun.DB
	// Auth authenticates the routes. Required.
	Auth platform.Authenticator
	// Teams authorises the team audit log (audit:read). Required.
	Teams Teams
	// Retention is how long rows are kept. Default DefaultRetention;
	// negative: forever.
	Retention time.Duration
	// PruneEvery is how often Start's loop deletes expired rows. Default 1 hour.
	PruneEvery time.Duration
	// Clock stamps rows and measures their age. Default platform.SystemClock.
	Clock platform.Clock
	// Log gets the module's messages. Default: discarded.
	Log *slog.Logger
}

// DefaultRetention is Deps.Retention's default: a year.
const DefaultRetention = 365 * 24 * time.Hour

// Service is the audit-log module; it is the audit.Recorder of the others.
type Service struct {
	d Deps

	prune platform.LoopSlot // the prune loop, between Start and Close
}

var (
	_ platform.Module = (*Service)(nil)
	_ audit.Recorder  = (*Service)(nil)
)

// New checks d and builds the service.
func New(d Deps) (*Service, error) {
	var errs platform.Problems
	errs.Require("Deps.DB", d.DB != nil)
	errs.Require("Deps.Auth", d.Auth != nil)
	errs.Require("Deps.Teams", d.Teams != nil)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("auditlog: %w", err)
	}
	d.Retention = cmp.Or(d.Retention, DefaultRetention)
	d.PruneEvery = cmp.Or(d.PruneEvery, time.Hour)
	platform.Defaults(&d.Clock, &d.Log)
	return &Service{d: d}, nil
}

// eventRow is one audit row.
type eventRow struct {
	bun.BaseModel `bun:"table:audit_events"`
	ID            string    `bun:"id,pk,type:varchar(36)"`
	At            time.Time `bun:"at,notnull"`
	ActorID       string    `bun:"actor_id,notnull,type:varchar(36)"`
	TokenID       string    `bun:"token_id,notnull,type:varchar(36)"`
	Addr          string    `bun:"addr,notnull,type:varchar(64)"`
	Action        string    `bun:"action,notnull,type:varchar(64)"`
	ResourceType  string    `bun:"resource_type,notnull,type:varchar(32)"`
	ResourceID    string    `bun:"resource_id,notnull"`
	OwnerID       string    `bun:"owner_id,notnull,type:varchar(36)"`
	ProjectID     string    `bun:"project_id,notnull,type:varchar(36)"`
	Summary       string    `bun:"summary,notnull"`
}

// Migrations are the module's table, for the host to run.
func Migrations() db.MigrationSet {
	return db.MigrationSet{Module: "auditlog", Migrations: []db.Migration{{
		ID: "0001_audit_events",
		Up: db.Steps(
			db.CreateTables((*eventRow)(nil)),
			db.CreateIndex((*eventRow)(nil), "audit_events_owner_idx", false, "owner_id", "at", "id"),
			db.CreateIndex((*eventRow)(nil), "audit_events_actor_idx", false, "actor_id", "at", "id"),
			db.CreateIndex((*eventRow)(nil), "audit_events_at_idx", false, "at"),
		),
	}}}
}

// Migrations returns the module's table, for platform.Module.
func (s *Service) Migrations() db.MigrationSet { return Migrations() }

// Summaries are cut to this many bytes (at a rune boundary).
const maxSummary = 500

// Record writes e in idb (the change's transaction) for the caller in ctx.
// A change nobody made (no principal, no e.ActorID) records nothing.
func (s *Service) Record(ctx context.Context, idb bun.IDB, e audit.Entry) error {
	return Recorder{Clock: s.d.Clock}.Record(ctx, idb, e)
}

// Recorder writes audit rows without the service: it needs nothing but the
// caller's transaction, so the modules built before this one (auth, API
// tokens, plans, teams, whose roles the service's routes read) record
// through it. Rows it writes are the service's rows.
type Recorder struct {
	// Clock stamps rows. Default platform.SystemClock.
	Clock platform.Clock
}

var _ audit.Recorder = Recorder{}

// Record writes e in idb, as Service.Record does.
func (r Recorder) Record(ctx context.Context, idb bun.IDB, e audit.Entry) error {
	actor, token := audit.Actor(ctx, e)
	if actor == "" {
		return nil
	}
	clock := r.Clock
	if clock == nil {
		clock = platform.SystemClock{}
	}
	row := &eventRow{ID: platform.NewID(), At: clock.Now().UTC().Truncate(time.Microsecond), ActorID: actor, TokenID: token,
		Addr: cut(platform.ClientAddr(ctx), 64), Action: e.Action, ResourceType: e.ResourceType, ResourceID: e.ResourceID,
		OwnerID: e.OwnerID, ProjectID: e.ProjectID, Summary: cut(e.Summary, maxSummary)}
	if _, err := idb.NewInsert().Model(row).Exec(ctx); err != nil {
		return fmt.Errorf("auditlog: record %s: %w", e.Action, db.Translate(err))
	}
	return nil
}

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xc0 == 0x80 { // not inside a UTF-8 sequence
		n--
	}
	return s[:n]
}

// Prune deletes the rows older than Deps.Retention and returns how many
// went; nothing when Retention is negative.
func (s *Service) Prune(ctx context.Context) (int64, error) {
	if s.d.Retention < 0 {
		return 0, nil
	}
	res, err := s.d.DB.NewDelete().Model((*eventRow)(nil)).Where("at < ?", s.d.Clock.Now().Add(-s.d.Retention)).Exec(ctx)
	if err != nil {
		return 0, fmt.Errorf("auditlog: prune: %w", db.Translate(err))
	}
	n, _ := res.RowsAffected()
	return n, nil
}

// Start prunes at once and then every Deps.PruneEvery until Close. The loop
// holds no context of the caller's: Close alone ends it.
func (s *Service) Start(context.Context) error {
	if s.d.Retention < 0 {
		return nil
	}
	s.prune.Start(func() *platform.Loop {
		return platform.Every(context.Background(), s.d.PruneEvery, true, nil, func(ctx context.Context) {
			if n, err := s.Prune(ctx); err != nil && ctx.Err() == nil {
				s.d.Log.Warn("delete expired audit rows", "err", err)
			} else if n > 0 {
				s.d.Log.Info("deleted expired audit rows", "rows", n)
			}
		})
	})
	return nil
}

// Close ends the prune loop, waiting for a pass under way. Safe when never
// started, and twice.
func (s *Service) Close(context.Context) error {
	s.prune.Stop()
	return nil
}
