package logstream

import (
	"context"
	"log/slog"
	"time"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// Retention deletes logs at once and then every hour until Stop: the logs of
// deployments that ended FAILED or CANCELLED more than Keep ago (LIVE
// deployments keep theirs: their app still logs), then those over the
// account log budget (EnforceBudgets). SQLite's freed pages go back to the
// file system.
type Retention struct {
	SQL RetentionStore
	Hub *Hub
	// Keep is how long ended deployments' logs are kept; negative: forever.
	Keep  time.Duration
	Clock platform.Clock
	Log   *slog.Logger

	stop func() // nil: not running
}

// RetentionStore is what Retention needs of the log storage (logsql.SQL).
type RetentionStore interface {
	// LogDeleteFinished deletes the logs of deployments that ended FAILED or
	// CANCELLED before before, and answers how many lines went.
	LogDeleteFinished(ctx context.Context, before time.Time) (int64, error)
	// LogOwnersOver answers the owners whose stored logs are over budget.
	LogOwnersOver(ctx context.Context, budget int64) ([]string, error)
	DB() bun.IDB
}

// retentionInterval is how often expired logs are looked for.
const retentionInterval = time.Hour

// Purge deletes the expired logs once and reclaims their space; it returns
// how many lines went. It does nothing when Keep is negative.
func (r *Retention) Purge(ctx context.Context) (int64, error) {
	if r.Keep < 0 {
		return 0, nil
	}
	n, err := r.SQL.LogDeleteFinished(ctx, r.Clock.Now().Add(-r.Keep))
	if err != nil || n == 0 {
		return n, err
	}
	return n, db.ReclaimSpace(ctx, r.SQL.DB())
}

// EnforceBudgets brings every account whose logs are over the account
// budget within it and returns how many deployments' logs were deleted.
func (r *Retention) EnforceBudgets(ctx context.Context) (int, error) {
	budget := r.Hub.Budget()
	if budget < 0 {
		return 0, nil
	}
	owners, err := r.SQL.LogOwnersOver(ctx, budget)
	if err != nil {
		return 0, err
	}
	return r.Hub.PruneOwners(ctx, owners)
}

// Start runs Purge and EnforceBudgets now and hourly until Stop.
func (r *Retention) Start() {
	if r.Keep < 0 && r.Hub.Budget() < 0 {
		return
	}
	loop := platform.Every(context.Background(), retentionInterval, true, nil, func(ctx context.Context) {
		if _, err := r.Purge(ctx); err != nil && ctx.Err() == nil {
			r.Log.Warn("delete expired deployment logs", "err", err)
		}
		if _, err := r.EnforceBudgets(ctx); err != nil && ctx.Err() == nil {
			r.Log.Warn("delete deployment logs over the account budget", "err", err)
		}
	})
	r.stop = loop.Stop
}

// Stop ends the purges (waiting for one under way to stop).
func (r *Retention) Stop() {
	if r.stop != nil {
		r.stop()
		r.stop = nil
	}
}
