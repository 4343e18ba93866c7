package deployments

import (
	"context"

	"github.com/keelson-dev/keelson/deployments/internal/pagecache"
	"github.com/keelson-dev/keelson/deployments/internal/usage"
	"github.com/keelson-dev/keelson/deployments/logstream/logsql"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// Migrations returns the deployments module's schema, for db.Migrate.
func Migrations() db.MigrationSet {
	return db.MigrationSet{
		Module: "deployments",
		Migrations: []db.Migration{{
			ID: "0001_init",
			Up: db.Steps(
				db.CreateTables((*Deployment)(nil), (*LogLine)(nil), (*usage.Row)(nil)),
				db.CreateIndex((*Deployment)(nil), "deployments_owner_created_idx", false, "owner_id", "created_at", "id"),
				db.CreateIndex((*Deployment)(nil), "deployments_project_created_idx", false, "project_id", "created_at", "id"),
				db.CreateIndex((*Deployment)(nil), "deployments_status_idx", false, "status"),
				db.CreateIndex((*LogLine)(nil), "deployment_logs_ts_idx", false, "deployment_id", "ts"),
				db.CreateIndex((*usage.Row)(nil), "deployment_usage_owner_idx", false, "owner_id", "month"),
			),
		}, {
			// The Temporal engine's per-owner build slots (BuildSlot).
			ID: "0002_build_slots",
			Up: db.Steps(
				db.CreateTables((*BuildSlot)(nil)),
				db.CreateIndex((*BuildSlot)(nil), "deployment_build_slots_owner_idx", false, "owner_id"),
			),
		}, {
			// Each deployment's stored log bytes, for the account log budget
			// (deployments/logstream/budget.go), counted once from the lines already stored.
			ID: "0003_log_bytes",
			Up: db.Steps(
				db.AddColumn("deployments", "log_bytes", "BIGINT NOT NULL DEFAULT 0"),
				func(ctx context.Context, idb bun.IDB) error {
					_, err := idb.NewUpdate().Model((*Deployment)(nil)).
						Set("log_bytes = COALESCE((SELECT SUM(" + logsql.MessageBytes(idb) + ") FROM deployment_logs AS l WHERE l.deployment_id = ?TableAlias.id), 0)").
						Where("TRUE").Exec(ctx)
					return err
				},
			),
		}, {
			// The build slots become the whole queue (waiters too) with each
			// request's share: the fair-share rules across workers (slots.go).
			// Rows from before are holders.
			ID: "0004_build_slot_queue",
			Up: db.Steps(
				db.AddColumn("deployment_build_slots", "granted", "BOOLEAN NOT NULL DEFAULT TRUE"),
				db.AddColumn("deployment_build_slots", "share_max", "INTEGER NOT NULL DEFAULT 1"),
				db.AddColumn("deployment_build_slots", "priority", "BOOLEAN NOT NULL DEFAULT FALSE"),
				db.AddColumn("deployment_build_slots", "free", "BOOLEAN NOT NULL DEFAULT FALSE"),
			),
		}, {
			// Where each app runs, so a worker started again restarts its own
			// LIVE apps (Deployment.Host).
			ID: "0005_host",
			Up: db.AddColumn("deployments", "host", "VARCHAR(255) NOT NULL DEFAULT ''"),
		}, {
			// Rollbacks: the build a deployment runs again, and which replaced
			// deployments keep theirs.
			ID: "0006_rollback",
			Up: db.Steps(
				db.AddColumn("deployments", "rollback_of", "VARCHAR(36) NOT NULL DEFAULT ''"),
				db.AddColumn("deployments", "build_kept", "BOOLEAN NOT NULL DEFAULT FALSE"),
			),
		}, {
			// The image pushed to the registry, by digest (Deployment.Image).
			ID: "0007_image",
			Up: db.AddColumn("deployments", "image", "VARCHAR(512) NOT NULL DEFAULT ''"),
		}, {
			// What each app may use, for placement by memory and CPU (Deployment.MemoryMi).
			ID: "0008_needs",
			Up: db.Steps(db.AddColumn("deployments", "memory_mi", "INTEGER NOT NULL DEFAULT 0"),
				db.AddColumn("deployments", "cpu_m", "INTEGER NOT NULL DEFAULT 0")),
		}, {
			// Postgres: tell every replica's list cache (internal/pagecache).
			ID: "0009_list_notify",
			Up: pagecache.Triggers,
		}},
	}
}
