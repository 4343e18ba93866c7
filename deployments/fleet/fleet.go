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
	"github.com/keelson-dev/keelson/deployments/hosts"
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

// LoadByHost gives, by host queue, what each host holds: its deployments
// LIVE or placed and not LIVE yet (queued on it, building, starting,
// routing), and the sum of their memory and CPU (Deployment.MemoryMi,
// CPUm), in one grouped query (the hosts register's Deps.Load).
func (q Queries) LoadByHost(ctx context.Context) (map[string]hosts.Load, error) {
	var rows []struct {
		Host string `bun:"host"`
		N    int    `bun:"n"`
		Mem  int64  `bun:"mem"`
		CPU  int64  `bun:"cpu"`
	}
	err := q.DB.NewSelect().Model((*deployments.Deployment)(nil)).Column("host").ColumnExpr("count(*) AS n").
		ColumnExpr("COALESCE(SUM(memory_mi), 0) AS mem").ColumnExpr("COALESCE(SUM(cpu_m), 0) AS cpu").
		Where("status IN (?)", bun.In([]deployments.Status{deployments.StatusQueued, deployments.StatusBuilding,
			deployments.StatusProvisioning, deployments.StatusConfiguringDNS, deployments.StatusLive})).
		Where("host <> ''").Group("host").Scan(ctx, &rows)
	if err != nil {
		return nil, db.Translate(err)
	}
	out := make(map[string]hosts.Load, len(rows))
	for _, r := range rows {
		out[r.Host] = hosts.Load{Apps: r.N, MemoryMi: r.Mem, CPUm: r.CPU}
	}
	return out, nil
}

// CountLive counts the LIVE deployments on host queue (its heartbeat's
// app count), in one COUNT query.
func (q Queries) CountLive(ctx context.Context, queue string) (int, error) {
	n, err := q.DB.NewSelect().Model((*deployments.Deployment)(nil)).
		Where("status = ?", deployments.StatusLive).Where("host = ?", queue).Count(ctx)
	return int(n), db.Translate(err)
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
