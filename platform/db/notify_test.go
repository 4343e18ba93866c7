package db_test

import (
	"context"
	"strings"
	"testing"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/uptrace/bun/driver/pgdriver"
)

// A NotifyFunctionIgnoring trigger names the row's column on every insert,
// delete and update but one that changed only ignored columns. Notifications
// arrive in commit order, so the first one heard after an ignored update
// and a shown one is the shown one's.
func TestNotifyFunctionIgnoring(t *testing.T) {
	t.Parallel()
	bdb := dbtest.Postgres(t)
	ctx := context.Background()
	suffix := strings.ReplaceAll(platform.NewID(), "-", "")
	table, channel := "notified_"+suffix, "test_notify_"+suffix
	if _, err := bdb.ExecContext(ctx, "CREATE TABLE "+table+" (k TEXT PRIMARY KEY, counter INT NOT NULL, shown TEXT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if err := db.ExecPostgres(ctx, bdb, db.NotifyFunctionIgnoring("fn_"+suffix, channel, "k", "counter")+
		db.NotifyTrigger("tr_"+suffix, table, "fn_"+suffix)); err != nil {
		t.Fatal(err)
	}
	ln := pgdriver.NewListener(bdb)
	defer ln.Close()
	if err := ln.Listen(ctx, channel); err != nil {
		t.Fatal(err)
	}
	// LISTEN is only sent; a notification of our own proves it is in force.
	if _, err := bdb.ExecContext(ctx, "SELECT pg_notify(?, 'ready')", channel); err != nil {
		t.Fatal(err)
	}
	next := func() string {
		t.Helper()
		_, payload, err := ln.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return payload
	}
	if p := next(); p != "ready" {
		t.Fatalf("first notification %q, want ready", p)
	}
	for _, step := range []struct{ sql, want string }{
		{"INSERT INTO " + table + " VALUES ('a', 0, 'x'), ('b', 0, 'x')", "a"},
		{"", "b"},
		{"UPDATE " + table + " SET counter = counter + 1 WHERE k = 'a'", ""}, // ignored: nothing
		{"UPDATE " + table + " SET shown = 'y' WHERE k = 'b'", "b"},
		{"UPDATE " + table + " SET counter = 5, shown = 'z' WHERE k = 'a'", "a"},
		{"DELETE FROM " + table + " WHERE k = 'b'", "b"},
	} {
		if step.sql != "" {
			if _, err := bdb.ExecContext(ctx, step.sql); err != nil {
				t.Fatal(err)
			}
		}
		if step.want != "" {
			if p := next(); p != step.want {
				t.Fatalf("after %q: notified %q, want %q", step.sql, p, step.want)
			}
		}
	}
}
