package deployments

import (
	"cmp"
	"context"

	"github.com/keelson-dev/keelson/deployments/logstream"
	"github.com/keelson-dev/keelson/platform"
	"github.com/uptrace/bun"
)

// Usage answers GET /usage's deployment figures from the database alone,
// with no service: projects, built before this module (which reads projects
// to deploy them), asks it. Its answers are the service's
// (DeploymentsThisMonth, LogUsage).
type Usage struct {
	DB bun.IDB
	// AccountBudget is Deps.Logs.AccountBudget: the same default (0:
	// logstream.DefaultAccountLogBudget) and negative for none.
	AccountBudget int64
	// Clock tells the month. Default platform.SystemClock.
	Clock platform.Clock
}

// DeploymentsThisMonth is Service.DeploymentsThisMonth.
func (u Usage) DeploymentsThisMonth(ctx context.Context, ownerID string) (map[string]int, error) {
	clock := cmp.Or[platform.Clock](u.Clock, platform.SystemClock{})
	return newStore(u.DB, clock).UsageByOwner(ctx, ownerID, monthOf(clock.Now()))
}

// LogUsage is Service.LogUsage.
func (u Usage) LogUsage(ctx context.Context, owner string) (used, budget int64, err error) {
	used, err = newStore(u.DB, platform.SystemClock{}).LogBytesOwned(ctx, owner)
	return used, max(cmp.Or(u.AccountBudget, logstream.DefaultAccountLogBudget), 0), err
}
