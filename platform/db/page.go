package db

import (
	"context"

	"github.com/keelson-dev/keelson/platform"
	"github.com/uptrace/bun"
)

// Keyset is the order of a keyset-paged list: a time column, ties broken by
// an id column, newest first unless Ascending. A platform.Cursor holds a
// row's place in it (the time and id of the last row of a page).
type Keyset struct {
	Time, ID  string // column expressions as SQL names them: "created_at", "t.id"
	Ascending bool
}

// After is the condition for the rows past a cursor in k's order, with three
// placeholders: the cursor's time, its time again and its id.
func (k Keyset) After() string {
	op := "<"
	if k.Ascending {
		op = ">"
	}
	return "(" + k.Time + " " + op + " ? OR (" + k.Time + " = ? AND " + k.ID + " " + op + " ?))"
}

// OrderBy is the ORDER BY list of k.
func (k Keyset) OrderBy() string {
	dir := " DESC"
	if k.Ascending {
		dir = " ASC"
	}
	return k.Time + dir + ", " + k.ID + dir
}

// Page narrows q to at most limit rows past after (from the first row when
// after is nil), in k's order.
func (k Keyset) Page(q *bun.SelectQuery, after *platform.Cursor, limit int) *bun.SelectQuery {
	if after != nil {
		q = q.Where(k.After(), after.Time, after.Time, after.ID)
	}
	return q.OrderExpr(k.OrderBy()).Limit(int64(limit))
}

// ReadPage reads the page of size rows of q past after in k's order, and the
// next page's cursor, at of the last row kept ("" on the last page). It reads
// one row more than size to know whether a next page follows. q names the
// table (Model((*T)(nil)) or TableExpr) and its filters; the rows are
// scanned into a []T. A query error is returned as the driver gave it.
func ReadPage[T any](ctx context.Context, q *bun.SelectQuery, k Keyset, after *platform.Cursor, size int,
	at func(last T) platform.Cursor) ([]T, string, error) {
	var rows []T
	if err := k.Page(q, after, size+1).Scan(ctx, &rows); err != nil {
		return nil, "", err
	}
	rows, next := platform.TrimPage(rows, size, at)
	return rows, next, nil
}
