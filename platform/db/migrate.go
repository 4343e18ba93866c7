package db

import (
	"context"
	"fmt"
	"time"

	"github.com/keelson-dev/keelson/platform"
	"github.com/uptrace/bun"
)

// Migration and MigrationSet are platform's (the module contract names them).
type (
	Migration    = platform.Migration
	MigrationSet = platform.MigrationSet
)

// Migrator is Migrate over bdb, the platform.Migrator an Assembly runs.
func Migrator(bdb *bun.DB) platform.Migrator {
	return func(ctx context.Context, sets ...MigrationSet) error { return Migrate(ctx, bdb, sets...) }
}

type migrationRecord struct {
	bun.BaseModel `bun:"table:keelson_migrations"`
	Module        string    `bun:"module,pk"`
	ID            string    `bun:"id,pk"`
	AppliedAt     time.Time `bun:"applied_at,notnull"`
}

// Migrate applies the sets' pending migrations in order, each in its own
// transaction, recording them in keelson_migrations. On Postgres it holds an
// advisory lock (per schema) for the whole run, so replicas starting at once
// apply each migration exactly once; on SQLite the single writer serialises them.
func Migrate(ctx context.Context, bdb *bun.DB, sets ...MigrationSet) error {
	conn, err := bdb.Conn(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer conn.Close()
	if IsPostgres(bdb) {
		if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock(hashtext('keelson_migrate:' || current_schema()))"); err != nil {
			return fmt.Errorf("migrate: lock: %w", err)
		}
		defer conn.ExecContext(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock(hashtext('keelson_migrate:' || current_schema()))") //nolint:errcheck
	}
	if _, err := conn.NewCreateTable().Model((*migrationRecord)(nil)).IfNotExists().Exec(ctx); err != nil {
		return fmt.Errorf("migrate: ledger: %w", err)
	}
	for _, set := range sets {
		for _, m := range set.Migrations {
			err := conn.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
				n, err := tx.NewSelect().Model((*migrationRecord)(nil)).
					Where("module = ? AND id = ?", set.Module, m.ID).Count(ctx)
				if err != nil || n > 0 {
					return err
				}
				if err := m.Up(ctx, tx); err != nil {
					return err
				}
				_, err = tx.NewInsert().Model(&migrationRecord{Module: set.Module, ID: m.ID, AppliedAt: time.Now().UTC()}).Exec(ctx)
				return err
			})
			if err != nil {
				return fmt.Errorf("migrate %s/%s: %w", set.Module, m.ID, err)
			}
		}
	}
	return nil
}

// CreateTables is a Migration.Up helper that creates the tables of models
// (IF NOT EXISTS, with their foreign keys as declared in bun tags).
func CreateTables(models ...any) func(ctx context.Context, db bun.IDB) error {
	return func(ctx context.Context, db bun.IDB) error {
		for _, m := range models {
			if _, err := db.NewCreateTable().Model(m).IfNotExists().WithForeignKeys().Exec(ctx); err != nil {
				return err
			}
		}
		return nil
	}
}

// CreateIndex is a Migration.Up helper for one (optionally unique) index.
func CreateIndex(model any, name string, unique bool, columns ...string) func(ctx context.Context, db bun.IDB) error {
	return func(ctx context.Context, db bun.IDB) error {
		q := db.NewCreateIndex().Model(model).Index(name).Column(columns...).IfNotExists()
		if unique {
			q = q.Unique()
		}
		_, err := q.Exec(ctx)
		return err
	}
}

// Steps chains several Up functions into one.
func Steps(steps ...func(ctx context.Context, db bun.IDB) error) func(ctx context.Context, db bun.IDB) error {
	return func(ctx context.Context, db bun.IDB) error {
		for _, s := range steps {
			if err := s(ctx, db); err != nil {
				return err
			}
		}
		return nil
	}
}

// AddColumn is a migration step adding a column unless the table has it: a
// module's first migration creates its tables from today's models, so a
// fresh database has the column already. def is the column's SQL type and
// constraints, the same on SQLite and Postgres.
func AddColumn(table, column, def string) func(ctx context.Context, idb bun.IDB) error {
	return func(ctx context.Context, idb bun.IDB) error {
		var n int
		q := "SELECT count(*) FROM pragma_table_info(?) WHERE name = ?"
		if IsPostgres(idb) {
			q = "SELECT count(*) FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = ? AND column_name = ?"
		}
		if err := idb.NewRaw(q, table, column).Scan(ctx, &n); err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
		_, err := idb.ExecContext(ctx, "ALTER TABLE "+table+" ADD COLUMN "+column+" "+def)
		return err
	}
}
