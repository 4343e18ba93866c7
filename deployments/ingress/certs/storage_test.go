package certs_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/uptrace/bun"
	"go.uber.org/goleak"

	"github.com/keelson-dev/keelson/deployments/ingress/certs"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

func TestMain(m *testing.M) {
	if os.Getenv("KEELSON_CERTS_HELPER") == "1" { // a second ingress (TestTwoIngressesOrderOneCertificate)
		if err := helperIngress(); err != nil {
			fmt.Fprintln(os.Stderr, "helper ingress:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	// certmagic keeps one rate limiter (a goroutine) per ACME directory and
	// account for the life of the process, in a package-level map: one per
	// Pebble here, one in production. Anything else of ours must be gone:
	// a renewal's too, since the Manager's loop renews under a context its
	// Close ends, early enough that no handshake starts one (renew.go).
	dbtest.MainCheck(m, func() error {
		return platformtest.FindLeaks(goleak.IgnoreTopFunction("github.com/caddyserver/certmagic.(*RingBufferRateLimiter).permit"))
	})
}

var sets = []db.MigrationSet{certs.Migrations()}

// TestStorage: certmagic's Storage contract on SQLite and Postgres.
func TestStorage(t *testing.T) {
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		ctx := context.Background()
		s := certs.NewStorage(bdb)
		if _, err := s.Load(ctx, "certificates/ca/a.test/a.test.crt"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("Load of a missing key: %v", err)
		}
		keys := []string{"acme/ca/users/me/me.json", "certificates/ca/a.test/a.test.crt", "certificates/ca/a.test/a.test.key", "certificates/ca/b.test/b.test.crt"}
		for _, k := range keys {
			if err := s.Store(ctx, k, []byte("v1 "+k)); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Store(ctx, keys[1], []byte("v2")); err != nil {
			t.Fatal(err)
		}
		if v, err := s.Load(ctx, keys[1]); err != nil || string(v) != "v2" {
			t.Fatalf("Load after overwrite: %q %v", v, err)
		}
		if !s.Exists(ctx, keys[2]) || s.Exists(ctx, "certificates/ca") {
			t.Fatal("Exists")
		}
		if ki, err := s.Stat(ctx, keys[1]); err != nil || !ki.IsTerminal || ki.Size != 2 || time.Since(ki.Modified) > time.Hour {
			t.Fatalf("Stat of a key: %+v %v", ki, err)
		}
		if ki, err := s.Stat(ctx, "certificates/ca"); err != nil || ki.IsTerminal {
			t.Fatalf("Stat of a directory: %+v %v", ki, err)
		}
		if _, err := s.Stat(ctx, "certificates/c"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("Stat of a missing key: %v", err)
		}
		if l, err := s.List(ctx, "certificates/ca", false); err != nil || !slices.Equal(l, []string{"certificates/ca/a.test", "certificates/ca/b.test"}) {
			t.Fatalf("List: %v %v", l, err)
		}
		if l, err := s.List(ctx, "certificates", true); err != nil || !slices.Equal(l, keys[1:]) {
			t.Fatalf("List recursive: %v %v", l, err)
		}
		if err := s.Delete(ctx, "certificates/ca/a.test"); err != nil {
			t.Fatal(err)
		}
		if l, err := s.List(ctx, "", true); err != nil || !slices.Equal(l, []string{keys[0], keys[3]}) {
			t.Fatalf("after deleting a directory: %v %v", l, err)
		}
		if err := s.Delete(ctx, "nothing/here"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("Delete of a missing key: %v", err)
		}
	})
}

// TestLocks: a lock is held by one Storage at a time (two Storages on one
// database, as two ingresses); a waiter gets it on Unlock; a lock whose
// holder stopped keeping it alive is taken over.
func TestLocks(t *testing.T) {
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		ctx := context.Background()
		a, b := certs.NewStorage(bdb), certs.NewStorage(bdb)
		if err := a.Lock(ctx, "issue_cert_x.test"); err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithTimeout(ctx, 600*time.Millisecond)
		err := b.Lock(short, "issue_cert_x.test")
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("second Lock while held: %v", err)
		}
		got := make(chan error, 1)
		go func() { got <- b.Lock(ctx, "issue_cert_x.test") }()
		select {
		case err := <-got:
			t.Fatalf("b got the lock a holds: %v", err)
		case <-time.After(300 * time.Millisecond):
		}
		if err := a.Unlock(ctx, "issue_cert_x.test"); err != nil {
			t.Fatal(err)
		}
		if err := platformtest.Receive(t, got, time.Minute, "b to get the lock a freed"); err != nil {
			t.Fatal(err)
		}
		if err := a.Unlock(ctx, "issue_cert_x.test"); err == nil {
			t.Fatal("a unlocked a lock b holds")
		}
		// b's holder "dies": its lock expires and a takes it over.
		if _, err := bdb.NewUpdate().Table("tls_locks").Set("expires_at = ?", time.Now().Add(-time.Minute)).
			Where("name = ?", "issue_cert_x.test").Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if err := a.Lock(ctx, "issue_cert_x.test"); err != nil {
			t.Fatal(err)
		}
		if err := errors.Join(a.Close(ctx), b.Close(ctx)); err != nil {
			t.Logf("close: %v", err) // b's lock was taken over: its delete matched nothing
		}
		if n, err := bdb.NewSelect().Table("tls_locks").Count(ctx); err != nil || n != 0 {
			t.Fatalf("locks left after Close: %d %v", n, err)
		}
	})
}
