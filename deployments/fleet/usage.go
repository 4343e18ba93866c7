package fleet

import (
	"cmp"
	"context"

	"github.com/keelson-dev/keelson/deployments/logstream"
	"github.com/keelson-dev/keelson/deployments/logstream/logsql"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// Usage answers GET /usage's deployment figures from the database alone,
// with no service: projects, built before the deployments module (which
// reads projects to deploy them), asks it. Its answers are the service's
// (deployments.Service's DeploymentsThisMonth and LogUsage).
type Usage struct {
	DB bun.IDB
	// AccountBudget is deployments.Deps.Logs.AccountBudget: the same
	// default (0: logstream.DefaultAccountLogBudget), negative for none.
	AccountBudget int64
	// Clock tells the month. Default platform.SystemClock.
	Clock platform.Clock
}

// DeploymentsThisMonth returns, per project of ownerID, how many
// deployments it started this calendar month (UTC).
func (u Usage) DeploymentsThisMonth(ctx context.Context, ownerID string) (map[string]int, error) {
	month := cmp.Or[platform.Clock](u.Clock, platform.SystemClock{}).Now().UTC().Format("2006-01")
	var rows []struct {
		ProjectID string `bun:"project_id"`
		Count     int    `bun:"count"`
	}
	err := u.DB.NewSelect().Table("deployment_usage").Column("project_id", "count").
		Where("owner_id = ? AND month = ?", ownerID, month).Scan(ctx, &rows)
	if err != nil {
		return nil, db.Translate(err)
	}
	out := make(map[string]int, len(rows))
	for _, r := range rows {
		out[r.ProjectID] = r.Count
	}
	return out, nil
}

// LogUsage returns the size of the owner's stored log messages and the
// account log budget (0: none).
func (u Usage) LogUsage(ctx context.Context, owner string) (used, budget int64, err error) {
	used, err = logsql.NewSQL(u.DB, platform.SystemClock{}).LogBytesOwned(ctx, owner)
	return used, max(cmp.Or(u.AccountBudget, logstream.DefaultAccountLogBudget), 0), err
}
