package codehost

import (
	"context"

	"github.com/keelson-dev/keelson/codehost/internal/store"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// Migrations are the tables of this module, for the host to run.
func Migrations() db.MigrationSet {
	return db.MigrationSet{Module: "codehost", Migrations: []db.Migration{{
		ID: "0001_init",
		Up: db.Steps(
			db.CreateTables((*store.InstallationRow)(nil), (*store.LinkRow)(nil), (*store.UsedStateRow)(nil),
				(*store.DeliveryRow)(nil), (*store.DecisionRow)(nil)),
			db.CreateIndex((*store.LinkRow)(nil), "codehost_links_user_installation", true, "user_id", "installation_id"),
			db.CreateIndex((*store.LinkRow)(nil), "codehost_links_installation", false, "installation_id"),
			db.CreateIndex((*store.UsedStateRow)(nil), "codehost_used_states_expires", false, "expires_at"),
			db.CreateIndex((*store.DeliveryRow)(nil), "codehost_deliveries_delivery_id", true, "delivery_id"),
			db.CreateIndex((*store.DeliveryRow)(nil), "codehost_deliveries_status", false, "status", "id"),
			db.CreateIndex((*store.DeliveryRow)(nil), "codehost_deliveries_installation", false, "installation_id", "id"),
			db.CreateIndex((*store.DecisionRow)(nil), "codehost_decisions_delivery_project", true, "delivery_row_id", "project_id"),
			db.CreateIndex((*store.DecisionRow)(nil), "codehost_decisions_owner", false, "owner_id", "delivery_row_id"),
		),
	}, {
		// Repository webhooks: a delivery row per authenticated project, so
		// de-duplication is per (delivery id, project); app rows keep "".
		ID: "0002_repository_webhooks",
		Up: db.Steps(
			db.AddColumn("codehost_deliveries", "source", "VARCHAR(16) NOT NULL DEFAULT 'app'"),
			db.AddColumn("codehost_deliveries", "project_id", "VARCHAR(36) NOT NULL DEFAULT ''"),
			db.AddColumn("codehost_deliveries", "owner_id", "VARCHAR(36) NOT NULL DEFAULT ''"),
			execStep("DROP INDEX IF EXISTS codehost_deliveries_delivery_id"),
			db.CreateIndex((*store.DeliveryRow)(nil), "codehost_deliveries_delivery_project", true, "delivery_id", "project_id"),
			db.CreateTables((*statusRow)(nil)),
			db.CreateIndex((*statusRow)(nil), "codehost_commit_statuses_open", false, "done", "id"),
		),
	}, {
		// Links made before the provider was asked (issue 14) may have been
		// hijacked: an installation id in a callback was taken at its word.
		// They are dropped; their users link again through GET /codehost/connect.
		ID: "0003_drop_unverified_links",
		Up: func(ctx context.Context, idb bun.IDB) error {
			_, err := idb.NewDelete().Model((*store.LinkRow)(nil)).Where("1 = 1").Exec(ctx)
			return err
		},
	}, {
		// A push deploys a (branch, commit) of a project once, whatever its
		// delivery id: a captured signed push replayed under a fresh id
		// deploys nothing (issue 23).
		ID: "0004_push_dedupe",
		Up: db.Steps(
			db.AddColumn("codehost_decisions", "push_key", "VARCHAR(300) NOT NULL DEFAULT ''"),
			execStep("CREATE UNIQUE INDEX IF NOT EXISTS codehost_decisions_push ON codehost_decisions (project_id, push_key) WHERE push_key <> ''"),
		),
	}, {
		// A link reaches what its user may access, checked with their own
		// token when used and at least daily (issue 23): when each link was
		// last checked, and what its user could access then.
		ID: "0005_link_checks",
		Up: db.Steps(
			func(ctx context.Context, idb bun.IDB) error {
				typ := "TIMESTAMP"
				if db.IsPostgres(idb) {
					typ = "TIMESTAMPTZ"
				}
				return db.AddColumn("codehost_links", "checked_at", typ)(ctx, idb)
			},
			db.CreateIndex((*store.LinkRow)(nil), "codehost_links_checked", false, "checked_at"),
			db.CreateTables((*store.ViewRow)(nil)),
			db.CreateIndex((*store.ViewRow)(nil), "codehost_user_repositories_name", false, "user_id", "installation_id", "full_name"),
		),
	}}}
}

func execStep(stmt string) func(ctx context.Context, idb bun.IDB) error {
	return func(ctx context.Context, idb bun.IDB) error {
		_, err := idb.ExecContext(ctx, stmt)
		return err
	}
}
