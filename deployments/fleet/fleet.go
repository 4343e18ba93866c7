// Package fleet holds the read-only queries over every deployment that
// serve the machines rather than a project: where each LIVE app runs (the
// ingresses' remote routes), what is placed on each host and not LIVE yet
// (placement), and how many deployments are in each status (metrics). It
// reads the deployments module's table; it writes nothing.
package fleet

import (
	"context"

	"github.com/uptrace/bun"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/platform/db"
)

// Queries runs the fleet's queries on one database (the *bun.DB pool).
type Queries struct{ DB bun.IDB }

// LiveHosts maps each project slug with a LIVE deployment to the host
// queue that runs the newest one (the other ingresses' remote routes).
func (q Queries) LiveHosts(ctx context.Context) (map[string]string, error) {
	var rows []struct {
		Slug string `bun:"project_slug"`
		Host string `bun:"host"`
	}
	err := q.DB.NewSelect().Model((*deployments.Deployment)(nil)).Column("project_slug", "host").
		Where("status = ?", deployments.StatusLive).Where("host <> ''").OrderExpr("created_at ASC, id ASC").Scan(ctx, &rows)
	if err != nil {
		return nil, db.Translate(err)
	}
	out := make(map[string]string, len(rows))
	for _, r := range rows { // oldest first: the newest wins
		out[r.Slug] = r.Host
	}
	return out, nil
}

// PlacedByHost counts, by host queue, the deployments placed on a host
// that are not LIVE yet (building, starting, routing).
func (q Queries) PlacedByHost(ctx context.Context) (map[string]int, error) {
	var rows []struct {
		Host string `bun:"host"`
		N    int    `bun:"n"`
	}
	err := q.DB.NewSelect().Model((*deployments.Deployment)(nil)).Column("host").ColumnExpr("count(*) AS n").
		Where("status IN (?)", bun.In([]deployments.Status{deployments.StatusQueued, deployments.StatusBuilding,
			deployments.StatusProvisioning, deployments.StatusConfiguringDNS})).
		Where("host <> ''").Group("host").Scan(ctx, &rows)
	if err != nil {
		return nil, db.Translate(err)
	}
	out := make(map[string]int, len(rows))
	for _, r := range rows {
		out[r.Host] = r.N
	}
	return out, nil
}

// CountByStatus counts the deployments in each status, in one grouped
// query (deployments_status_idx); a status with none is absent.
func (q Queries) CountByStatus(ctx context.Context) (map[deployments.Status]int64, error) {
	var rows []struct {
		Status deployments.Status `bun:"status"`
		N      int64              `bun:"n"`
	}
	if err := q.DB.NewSelect().Model((*deployments.Deployment)(nil)).Column("status").ColumnExpr("count(*) AS n").
		Group("status").Scan(ctx, &rows); err != nil {
		return nil, db.Translate(err)
	}
	out := make(map[deployments.Status]int64, len(rows))
	for _, r := range rows {
		out[r.Status] = r.N
	}
	return out, nil
}
