// Package usage counts the deployments started per project and calendar
// month (UTC), in a table of its own so deleting deployments does not give
// quota back. It is not the quota's policy: the plan's maxDeployments is
// deployments.Trigger's.
package usage

import (
	"context"
	"errors"
	"time"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// Row is one project's count of one month.
type Row struct {
	bun.BaseModel `bun:"table:deployment_usage"`

	ProjectID string `bun:"project_id,pk,type:varchar(36)"`
	Month     string `bun:"month,pk,type:varchar(7)"` // 2006-01
	OwnerID   string `bun:"owner_id,notnull,type:varchar(36)"`
	Count     int    `bun:"count,notnull"`
}

// ErrQuota is Take's answer when the month's quota is used up.
var ErrQuota = errors.New("deployment quota reached")

// Month is the usage bucket of t: its calendar month in UTC.
func Month(t time.Time) string { return t.UTC().Format("2006-01") }

// Take counts one more deployment of projectID (of ownerID) in month, in tx,
// which must serialise the project's takes (a lock). When maxPerMonth > 0
// and the project already started that many, nothing is counted and it
// returns ErrQuota with used = the count.
func Take(ctx context.Context, tx bun.IDB, projectID, ownerID, month string, maxPerMonth int) (used int, _ error) {
	u := Row{ProjectID: projectID, Month: month}
	err := tx.NewSelect().Model(&u).WherePK().Scan(ctx)
	exists := err == nil
	if err != nil && !errors.Is(db.Translate(err), platform.ErrNotFound) {
		return 0, err
	}
	if maxPerMonth > 0 && u.Count >= maxPerMonth {
		return u.Count, ErrQuota
	}
	used = u.Count
	u.OwnerID, u.Count = ownerID, used+1
	if exists {
		_, err = tx.NewUpdate().Model(&u).Column("count", "owner_id").WherePK().Exec(ctx)
	} else {
		_, err = tx.NewInsert().Model(&u).Exec(ctx)
	}
	return used, err
}

// ByOwner returns, per project of ownerID, how many deployments it started in month.
func ByOwner(ctx context.Context, idb bun.IDB, ownerID, month string) (map[string]int, error) {
	var rows []Row
	if err := idb.NewSelect().Model(&rows).Where("owner_id = ? AND month = ?", ownerID, month).Scan(ctx); err != nil {
		return nil, db.Translate(err)
	}
	out := make(map[string]int, len(rows))
	for _, r := range rows {
		out[r.ProjectID] = r.Count
	}
	return out, nil
}

// DeleteProject forgets the counts of a deleted project.
func DeleteProject(ctx context.Context, idb bun.IDB, projectID string) error {
	_, err := idb.NewDelete().Model((*Row)(nil)).Where("project_id = ?", projectID).Exec(ctx)
	return db.Translate(err)
}
