package db_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/uptrace/bun"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

type widget struct {
	bun.BaseModel `bun:"table:widgets"`
	ID            string    `bun:"id,pk,type:varchar(36)"`
	Name          string    `bun:"name,notnull,unique"`
	CreatedAt     time.Time `bun:"created_at,notnull"`
}

var calls sync.Map // migration runs per test key, to prove each runs once

func widgets(key string) db.MigrationSet {
	return db.MigrationSet{Module: "widgets", Migrations: []db.Migration{
		{ID: "0001_widgets", Up: func(ctx context.Context, idb bun.IDB) error {
			n, _ := calls.LoadOrStore(key, new(int64))
			*(n.(*int64))++
			return db.CreateTables((*widget)(nil))(ctx, idb)
		}},
		{ID: "0002_index", Up: db.CreateIndex((*widget)(nil), "widgets_created_idx", false, "created_at")},
	}}
}

func TestTranslateAndMigrate(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, nil, func(t *testing.T, bdb *bun.DB) {
		ctx := context.Background()
		key := t.Name()
		if err := db.Migrate(ctx, bdb, widgets(key)); err != nil {
			t.Fatal(err)
		}
		// Running again is a no-op.
		if err := db.Migrate(ctx, bdb, widgets(key)); err != nil {
			t.Fatal(err)
		}
		n, _ := calls.Load(key)
		if got := *(n.(*int64)); got != 1 {
			t.Fatalf("migration ran %d times", got)
		}
		w := &widget{ID: platform.NewID(), Name: "a", CreatedAt: time.Now().UTC()}
		if _, err := bdb.NewInsert().Model(w).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		_, err := bdb.NewInsert().Model(&widget{ID: platform.NewID(), Name: "a", CreatedAt: time.Now()}).Exec(ctx)
		if err = db.Translate(err); !errors.Is(err, platform.ErrConflict) {
			t.Fatalf("duplicate name: %v", err)
		}
		err = db.Translate(bdb.NewSelect().Model(&widget{}).Where("id = ?", platform.NewID()).Scan(ctx))
		if !errors.Is(err, platform.ErrNotFound) {
			t.Fatalf("missing row: %v", err)
		}
		if db.Translate(nil) != nil {
			t.Fatal("Translate(nil) != nil")
		}
	})
}

// Replicas starting at once on Postgres each run Migrate; every migration must
// apply exactly once.
func TestMigrateConcurrentReplicas(t *testing.T) {
	t.Parallel()
	url := dbtest.PostgresURL(t)
	ctx := context.Background()
	key := t.Name()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bdb, err := db.Open(ctx, db.Options{URL: url})
			if err != nil {
				errs <- err
				return
			}
			defer bdb.Close()
			errs <- db.Migrate(ctx, bdb, widgets(key))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	n, _ := calls.Load(key)
	if got := *(n.(*int64)); got != 1 {
		t.Fatalf("migration ran %d times across replicas", got)
	}
}

func TestOpenRejectsUnknownScheme(t *testing.T) {
	t.Parallel()
	if _, err := db.Open(context.Background(), db.Options{URL: "mysql://x"}); err == nil {
		t.Fatal("expected an error")
	}
}
