package db_test

import (
	"context"
	"strings"
	"testing"
	"time"

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
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
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
	// LISTEN is only sent, and a notification sent before the listening
	// backend has read it is lost: ping until one of our own arrives. Late
	// pings are skipped below.
	for heard := false; !heard; {
		if _, err := bdb.ExecContext(ctx, "SELECT pg_notify(?, 'ready')", channel); err != nil {
			t.Fatal(err)
		}
		_, payload, err := ln.ReceiveTimeout(ctx, 200*time.Millisecond)
		heard = err == nil && payload == "ready"
		if ctx.Err() != nil {
			t.Fatal("no notification of our own arrived: LISTEN is not in force")
		}
	}
	next := func() string {
		t.Helper()
		for {
			_, payload, err := ln.Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if payload != "ready" {
				return payload
			}
		}
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
