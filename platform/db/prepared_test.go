package db_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/uptrace/bun"
)

// A time written by bun reads back equal through a Prepared statement
// (TimeColumn, ScanTime), and TimeArg compares with the stored column, on
// both databases.
func TestPreparedTimesRoundTrip(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, []db.MigrationSet{widgets(t.Name())}, func(t *testing.T, bdb *bun.DB) {
		ctx := context.Background()
		times := []time.Time{
			time.Date(2026, 11, 22, 23, 19, 22, 123456000, time.UTC),
			time.Date(2026, 11, 22, 23, 19, 22, 0, time.UTC),
			time.Date(2026, 11, 22, 23, 19, 22, 500000000, time.FixedZone("x", -7*3600)),
			time.Date(1999, 1, 2, 3, 4, 5, 6000, time.UTC),
		}
		ids := []string{"00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002",
			"00000000-0000-4000-8000-000000000003", "00000000-0000-4000-8000-000000000004"}
		for i, tm := range times {
			if _, err := bdb.NewInsert().Model(&widget{ID: ids[i], Name: ids[i], CreatedAt: tm}).Exec(ctx); err != nil {
				t.Fatal(err)
			}
		}
		get := db.NewPrepared("SELECT " + db.TimeColumn(bdb, "created_at") + " FROM widgets WHERE id = ?")
		defer get.Close()
		for i, want := range times {
			var got time.Time
			if err := get.QueryRow(ctx, bdb, ids[i]).Scan(db.ScanTime(&got)); err != nil {
				t.Fatal(err)
			}
			if !got.Equal(want) {
				t.Errorf("%s: read %v, wrote %v", ids[i], got, want)
			}
		}
		var none time.Time
		if err := get.QueryRow(ctx, bdb, "nope").Scan(db.ScanTime(&none)); !errors.Is(err, sql.ErrNoRows) {
			t.Fatalf("absent row: %v, want sql.ErrNoRows", err)
		}
		// Strictly before times[0] (2026-11-22 23:19:22.123456): the whole second and 1999.
		before := db.NewPrepared("SELECT count(*) FROM widgets WHERE created_at < ?")
		defer before.Close()
		var n int
		if err := before.QueryRow(ctx, bdb, db.TimeArg(bdb, times[0])).Scan(&n); err != nil || n != 2 {
			t.Fatalf("rows before %v: %d, %v; want 2", times[0], n, err)
		}
	})
}

func TestParseStoredTime(t *testing.T) {
	t.Parallel()
	cases := map[string]time.Time{
		"2026-11-22 23:19:22.123456+00:00":        time.Date(2026, 11, 22, 23, 19, 22, 123456000, time.UTC),
		"2026-11-22 23:19:22+00:00":               time.Date(2026, 11, 22, 23, 19, 22, 0, time.UTC),
		"2026-11-22T23:19:22.5-07:00":             time.Date(2026, 11, 23, 6, 19, 22, 500000000, time.UTC),
		"2026-11-22 23:19:22.123456789Z":          time.Date(2026, 11, 22, 23, 19, 22, 123456789, time.UTC),
		"2026-11-22 23:19:22":                     time.Date(2026, 11, 22, 23, 19, 22, 0, time.UTC), // SQLite's CURRENT_TIMESTAMP
		"2026-11-22 23:19:22.25 +0000 UTC":        time.Date(2026, 11, 22, 23, 19, 22, 250000000, time.UTC),
		"2026-11-22 23:19:22.25 +0000 UTC m=+1.5": time.Date(2026, 11, 22, 23, 19, 22, 250000000, time.UTC),
		"2026-11-22": time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC),
	}
	for in, want := range cases {
		got, err := db.ParseStoredTime(in)
		if err != nil || !got.Equal(want) {
			t.Errorf("ParseStoredTime(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "yesterday", "2026-02-31 00:00:00+00:00", "2026-11-22 24:00:00+00:00",
		"2026-11-22 23:19:22.+00:00", "2026-11-22 23:19:22+0000x"} {
		if got, err := db.ParseStoredTime(bad); err == nil {
			t.Errorf("ParseStoredTime(%q) = %v, want an error", bad, got)
		}
	}
}

func BenchmarkParseStoredTime(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := db.ParseStoredTime("2026-11-22 23:19:22.123456+00:00"); err != nil {
			b.Fatal(err)
		}
	}
}

// ExecTx and QueryRowTx run in a transaction, on SQLite (whose one
// connection the transaction holds) the statement Prepare prepared before
// it; a rollback undoes their writes. Unprepared, they fail on SQLite
// instead of waiting for the connection.
func TestPreparedInTx(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, []db.MigrationSet{widgets(t.Name())}, func(t *testing.T, bdb *bun.DB) {
		ctx := context.Background()
		ins := db.NewPrepared("INSERT INTO widgets (id, name, created_at) VALUES (?, ?, ?)")
		count := db.NewPrepared("SELECT count(*) FROM widgets WHERE name LIKE ?")
		defer ins.Close()
		defer count.Close()
		if !db.IsPostgres(bdb) {
			err := db.InTx(ctx, bdb, func(ctx context.Context, tx bun.Tx) error {
				_, err := ins.ExecTx(ctx, bdb, tx, "00000000-0000-4000-8000-000000000009", "x", db.TimeArg(bdb, time.Now()))
				return err
			})
			if err == nil {
				t.Fatal("ExecTx before Prepare: no error")
			}
		}
		for _, st := range []*db.Prepared{ins, count} {
			if err := st.Prepare(ctx, bdb); err != nil {
				t.Fatal(err)
			}
		}
		insert := func(id string, rollback bool) {
			err := db.InTx(ctx, bdb, func(ctx context.Context, tx bun.Tx) error {
				if _, err := ins.ExecTx(ctx, bdb, tx, id, "tx-"+id, db.TimeArg(bdb, time.Now())); err != nil {
					return err
				}
				var n int
				if err := count.QueryRowTx(ctx, bdb, tx, "tx-%").Scan(&n); err != nil {
					return err
				}
				if n == 0 {
					t.Error("the transaction does not see its own insert")
				}
				if rollback {
					return errors.New("roll back")
				}
				return nil
			})
			if (err != nil) != rollback {
				t.Fatalf("insert %s (rollback %v): %v", id, rollback, err)
			}
		}
		insert("00000000-0000-4000-8000-000000000010", false)
		insert("00000000-0000-4000-8000-000000000011", true)
		insert("00000000-0000-4000-8000-000000000012", false)
		var n int
		if err := count.QueryRow(ctx, bdb, "tx-%").Scan(&n); err != nil || n != 2 {
			t.Fatalf("rows after two commits and a rollback: %d, %v; want 2", n, err)
		}
	})
}

// A PreparedModel reads every column of its model, the same row on a
// *bun.DB (prepared) and in a transaction (through bun); an absent row is
// sql.ErrNoRows; after Close it prepares again; on both databases.
func TestPreparedModel(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, []db.MigrationSet{widgets(t.Name())}, func(t *testing.T, bdb *bun.DB) {
		ctx := context.Background()
		want := widget{ID: "00000000-0000-4000-8000-000000000021", Name: "pm",
			CreatedAt: time.Date(2026, 11, 25, 7, 0, 0, 123456000, time.UTC)}
		if _, err := bdb.NewInsert().Model(&want).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		byName := db.NewPreparedModel[widget]("name = ? AND id <> ''")
		defer byName.Close()
		check := func(how string, idb bun.IDB) {
			got, err := byName.One(ctx, idb, "pm")
			if err != nil || got.ID != want.ID || got.Name != want.Name || !got.CreatedAt.Equal(want.CreatedAt) {
				t.Fatalf("%s: %+v, %v; want %+v", how, got, err, want)
			}
			if got, err := byName.One(ctx, idb, "nope"); !errors.Is(err, sql.ErrNoRows) {
				t.Fatalf("%s: absent row: %+v, %v; want sql.ErrNoRows", how, got, err)
			}
		}
		check("prepared", bdb)
		check("prepared again", bdb)
		if err := byName.Close(); err != nil {
			t.Fatal(err)
		}
		check("after Close", bdb)
		if err := db.InTx(ctx, bdb, func(ctx context.Context, tx bun.Tx) error { check("in a transaction", tx); return nil }); err != nil {
			t.Fatal(err)
		}
	})
}
