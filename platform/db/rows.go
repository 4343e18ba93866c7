package db

import (
	"context"
	"errors"

	"github.com/keelson-dev/keelson/platform"
	"github.com/uptrace/bun"
)

// DeleteScoped deletes, in one transaction, the row of T with id whose
// column scope holds value (its team, project or owner), and calls then
// with the row as it was, in the same transaction (to record it). A row
// that is not there, or is deleted meanwhile, answers notFound; so does an
// id that is no UUID.
func DeleteScoped[T any](ctx context.Context, idb bun.IDB, id, scope, value string, notFound error,
	then func(ctx context.Context, tx bun.Tx, row *T) error) error {
	if !platform.ValidID(id) {
		return notFound
	}
	return Translate(InTx(ctx, idb, func(ctx context.Context, tx bun.Tx) error {
		row := new(T)
		if err := tx.NewSelect().Model(row).Where("id = ? AND ? = ?", id, bun.Ident(scope), value).Scan(ctx); err != nil {
			if err = Translate(err); errors.Is(err, platform.ErrNotFound) {
				return notFound
			}
			return err
		}
		res, err := tx.NewDelete().Model((*T)(nil)).Where("id = ?", id).Exec(ctx)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return notFound
		}
		return then(ctx, tx, row)
	}))
}

// Cap is a limit on the rows of one scope: at most Max rows of a table
// whose Column holds Value; an insert past it answers Full. Lock is the
// scope's lock key (LockTx).
type Cap struct {
	Lock, Column, Value string
	Max                 int
	Full                error
}

// InsertCapped inserts row unless its table holds c.Max rows of the scope
// already, and calls then (to record it), all in one transaction under the
// scope's lock on Postgres (SQLite's single writer already serialises
// them), so concurrent inserts cannot pass the cap together.
func InsertCapped[T any](ctx context.Context, idb bun.IDB, row *T, c Cap, then func(ctx context.Context, tx bun.Tx) error) error {
	return InTx(ctx, idb, func(ctx context.Context, tx bun.Tx) error {
		if err := LockTx(ctx, tx, c.Lock); err != nil {
			return err
		}
		n, err := tx.NewSelect().Model((*T)(nil)).Where("? = ?", bun.Ident(c.Column), c.Value).Count(ctx)
		if err != nil {
			return err
		}
		if int(n) >= c.Max {
			return c.Full
		}
		if _, err = tx.NewInsert().Model(row).Exec(ctx); err != nil {
			return err
		}
		return then(ctx, tx)
	})
}
