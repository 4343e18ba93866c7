// Package db opens Keelson's database (SQLite by default, Postgres at scale)
// through bun, runs the migrations modules contribute, and translates driver
// errors into platform sentinels at the store edge. It holds no tables itself
// beyond the migration ledger.
package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/keelson-dev/keelson/platform"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/dialect/sqlitedialect"
	"github.com/uptrace/bun/driver/pgdriver"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Options say which database to open.
type Options struct {
	// URL is postgres://..., sqlite:///path/file.db or sqlite://relative.db.
	// Empty means the SQLite file keelson.db in DataDir.
	URL string
	// DataDir holds the default SQLite file. Default ./data.
	DataDir string
}

// Open opens and pings the database named by o. SQLite runs in WAL mode with a
// busy timeout, foreign keys on and a single connection (one writer, no
// SQLITE_BUSY between our own goroutines). Callers must never use the pool from
// inside a transaction on it: with one connection that would wait forever.
func Open(ctx context.Context, o Options) (*bun.DB, error) {
	u := o.URL
	if u == "" {
		dir := o.DataDir
		if dir == "" {
			dir = "./data"
		}
		u = "sqlite://" + filepath.Join(dir, "keelson.db")
	}
	var (
		bdb *bun.DB
		err error
	)
	switch {
	case strings.HasPrefix(u, "postgres://"), strings.HasPrefix(u, "postgresql://"):
		bdb, err = openPostgres(u)
	case strings.HasPrefix(u, "sqlite:"):
		bdb, err = openSQLite(u)
	default:
		return nil, fmt.Errorf("database URL must start with postgres:// or sqlite://")
	}
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := pingRetry(pctx, bdb); err != nil {
		bdb.Close()
		return nil, fmt.Errorf("database unreachable: %w", err)
	}
	if !IsPostgres(bdb) {
		if err := incrementalVacuum(ctx, bdb); err != nil {
			bdb.Close()
			return nil, fmt.Errorf("sqlite: enable incremental vacuum: %w", err)
		}
	}
	return bdb, nil
}

// incrementalVacuum puts a SQLite database in auto_vacuum=INCREMENTAL mode,
// so ReclaimSpace can give deleted rows' pages back to the file system. A
// database created in another mode is rewritten once (VACUUM), which takes
// a while on a large file; new databases take no time.
func incrementalVacuum(ctx context.Context, bdb *bun.DB) error {
	var mode int
	if err := bdb.QueryRowContext(ctx, "PRAGMA auto_vacuum").Scan(&mode); err != nil {
		return err
	}
	if mode == 2 { // INCREMENTAL
		return nil
	}
	if _, err := bdb.ExecContext(ctx, "PRAGMA auto_vacuum = INCREMENTAL"); err != nil {
		return err
	}
	_, err := bdb.ExecContext(ctx, "VACUUM")
	return err
}

// ReclaimSpace returns the free pages of a SQLite database to the file
// system (after large deletions, e.g. expired logs). Postgres reuses freed
// space by itself (autovacuum): nothing to do there.
func ReclaimSpace(ctx context.Context, idb bun.IDB) error {
	if IsPostgres(idb) {
		return nil
	}
	_, err := idb.ExecContext(ctx, "PRAGMA incremental_vacuum")
	return err
}

func pingRetry(ctx context.Context, bdb *bun.DB) error {
	for {
		err := bdb.PingContext(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(300 * time.Millisecond):
		}
	}
}

func openPostgres(dsn string) (*bun.DB, error) {
	if _, err := url.Parse(dsn); err != nil {
		return nil, fmt.Errorf("database URL is not a valid URL")
	}
	sqldb := sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN(dsn)))
	sqldb.SetMaxOpenConns(20)
	sqldb.SetMaxIdleConns(10)
	sqldb.SetConnMaxIdleTime(5 * time.Minute)
	return bun.NewDB(sqldb, pgdialect.New()), nil
}

func openSQLite(u string) (*bun.DB, error) {
	path := strings.TrimPrefix(strings.TrimPrefix(u, "sqlite://"), "sqlite:")
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	if path == "" {
		return nil, fmt.Errorf("sqlite URL has no file path")
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("create database directory: %w", err)
		}
	}
	dsn := "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)" +
		"&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)&_txlock=immediate"
	sqldb, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	sqldb.SetMaxOpenConns(1)
	sqldb.SetMaxIdleConns(1)
	sqldb.SetConnMaxLifetime(0)
	sqldb.SetConnMaxIdleTime(0)
	return bun.NewDB(sqldb, sqlitedialect.New()), nil
}

// IsPostgres reports whether idb talks to Postgres.
func IsPostgres(idb bun.IDB) bool { return idb.Dialect().Name() == dialect.PG }

// Translate maps driver errors to platform sentinels: no rows is ErrNotFound,
// unique and foreign-key violations are ErrConflict, bytes the database cannot
// store (NUL on Postgres, bad encoding) are ErrInvalid. Others pass through.
// The driver's text stays in the chain for logs; HTTPError never sends it.
func Translate(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: %w", platform.ErrNotFound, err)
	}
	var pe pgdriver.Error
	if errors.As(err, &pe) {
		switch code := pe.Field('C'); {
		case code == "23505", code == "23503", code == "40001", code == "40P01":
			return fmt.Errorf("%w: %w", platform.ErrConflict, err)
		case code == "22021", code == "22P05", code == "54000", strings.HasPrefix(code, "22"):
			return fmt.Errorf("%w: %w", platform.ErrInvalid, err)
		case code == "23514", code == "23502":
			return fmt.Errorf("%w: %w", platform.ErrInvalid, err)
		}
		return err
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() {
		case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY, sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
			return fmt.Errorf("%w: %w", platform.ErrConflict, err)
		case sqlite3.SQLITE_CONSTRAINT_CHECK, sqlite3.SQLITE_CONSTRAINT_NOTNULL:
			return fmt.Errorf("%w: %w", platform.ErrInvalid, err)
		}
	}
	return err
}

// InTx runs fn in a transaction on idb (which may itself be a transaction, in
// which case fn simply runs in it).
func InTx(ctx context.Context, idb bun.IDB, fn func(ctx context.Context, tx bun.Tx) error) error {
	return idb.RunInTx(ctx, nil, fn)
}

// LockTx serialises the transactions that take key until each commits or
// rolls back, for a check and a write that must not interleave: on Postgres a
// transaction-scoped advisory lock (pg_advisory_xact_lock of the key's hash);
// SQLite's single writer serialises them already.
func LockTx(ctx context.Context, tx bun.Tx, key string) error {
	if !IsPostgres(tx) {
		return nil
	}
	_, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock(hashtext(?))", key)
	return err
}

// ExecPostgres runs query on idb when it is Postgres; on SQLite it does nothing.
func ExecPostgres(ctx context.Context, idb bun.IDB, query string) error {
	if !IsPostgres(idb) {
		return nil
	}
	_, err := idb.ExecContext(ctx, query)
	return err
}
