package db

import (
	"context"
	"database/sql"
	"reflect"
	"strings"
	"sync"

	"github.com/uptrace/bun"
)

// PreparedModel reads one row of the bun model T (every column T maps) by a
// condition, through a Prepared statement when run on a *bun.DB: the hot
// reads by id of a polled route (GET /deployments/{id}/status, GET
// /projects/{id}) without SQLite parsing the statement again. The column
// list comes from T's bun table, so a column added to T is read without
// touching the statement.
//
// A PreparedModel is bound to the first *bun.DB it runs on (see Prepared):
// keep one per service. On anything else (a transaction) it runs the same
// query through bun.
type PreparedModel[T any] struct {
	where string

	mu   sync.Mutex
	stmt *Prepared
}

// NewPreparedModel reads the row of T matching where, a condition with ?
// placeholders for One's arguments (and no other ?).
func NewPreparedModel[T any](where string) *PreparedModel[T] {
	return &PreparedModel[T]{where: where}
}

// One returns the first row of T matching the condition with args, or
// sql.ErrNoRows (as bun's Scan: pass the error through Translate).
func (m *PreparedModel[T]) One(ctx context.Context, idb bun.IDB, args ...any) (*T, error) {
	dest := new(T)
	bdb, ok := idb.(*bun.DB)
	if !ok {
		if err := idb.NewSelect().Model(dest).Where(m.where, args...).Limit(1).Scan(ctx); err != nil {
			return nil, err
		}
		return dest, nil
	}
	rows, err := m.prepared(bdb).Query(ctx, bdb, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return nil, err
		}
		return nil, sql.ErrNoRows
	}
	if err := bdb.ScanRow(ctx, rows, dest); err != nil {
		return nil, err
	}
	return dest, rows.Close()
}

func (m *PreparedModel[T]) prepared(bdb *bun.DB) *Prepared {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stmt == nil {
		t := bdb.Table(reflect.TypeFor[T]())
		cols := make([]string, len(t.Fields))
		for i, f := range t.Fields {
			cols[i] = string(f.SQLName)
		}
		m.stmt = NewPrepared("SELECT " + strings.Join(cols, ", ") + " FROM " + string(t.SQLName) +
			" WHERE " + m.where + " LIMIT 1")
	}
	return m.stmt
}

// Close releases the statement (a later One prepares it again).
func (m *PreparedModel[T]) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stmt == nil {
		return nil
	}
	return m.stmt.Close()
}
