package db_test

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/uptrace/bun"
)

// Paging through a table with ReadPage visits every row once, in the
// keyset's order both ways, ties on the time broken by the id, and the last
// page has no next cursor; a cursor passes through its string form.
func TestReadPageKeyset(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, nil, func(t *testing.T, bdb *bun.DB) {
		ctx := context.Background()
		if err := db.Migrate(ctx, bdb, widgets(t.Name())); err != nil {
			t.Fatal(err)
		}
		base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		var rows []*widget
		for i, at := range []int{0, 1, 1, 1, 2} { // three rows share a time
			rows = append(rows, &widget{ID: platform.NewID(), Name: string(rune('a' + i)), CreatedAt: base.Add(time.Duration(at) * time.Second)})
		}
		if _, err := bdb.NewInsert().Model(&rows).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		oldest := func(a, b *widget) int {
			return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
		}
		for _, asc := range []bool{false, true} {
			want := slices.SortedFunc(slices.Values(rows), oldest)
			if !asc {
				slices.Reverse(want)
			}
			k := db.Keyset{Time: "created_at", ID: "id", Ascending: asc}
			var got []string
			cursor := ""
			for pages := 0; pages == 0 || cursor != ""; pages++ {
				if pages > len(rows) {
					t.Fatalf("ascending %v: paging does not end", asc)
				}
				after, err := platform.DecodeCursor(cursor)
				if err != nil {
					t.Fatal(err)
				}
				page, next, err := db.ReadPage(ctx, bdb.NewSelect().Model((*widget)(nil)), k, after, 2,
					func(w widget) platform.Cursor { return platform.Cursor{Time: w.CreatedAt, ID: w.ID} })
				if err != nil {
					t.Fatal(err)
				}
				if len(page) > 2 {
					t.Fatalf("a page of %d rows, want at most 2", len(page))
				}
				for _, w := range page {
					got = append(got, w.Name)
				}
				cursor = next
			}
			var names []string
			for _, w := range want {
				names = append(names, w.Name)
			}
			if !slices.Equal(got, names) {
				t.Errorf("ascending %v: paged %v, want %v", asc, got, names)
			}
		}
	})
}
