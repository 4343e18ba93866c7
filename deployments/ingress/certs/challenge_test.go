package certs_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/uptrace/bun"

	"github.com/keelson-dev/keelson/deployments/ingress/certs"
	"github.com/keelson-dev/keelson/platform/dbtest"
)

// challengeLookups counts the database's reads of ACME challenge data
// (certmagic's challenge_tokens keys, which it reads for a challenge it
// did not start itself: another ingress's).
type challengeLookups struct{ n atomic.Int64 }

func (c *challengeLookups) BeforeQuery(ctx context.Context, e *bun.QueryEvent) context.Context {
	if strings.Contains(e.Query, "challenge_tokens") {
		c.n.Add(1)
	}
	return ctx
}

func (c *challengeLookups) AfterQuery(context.Context, *bun.QueryEvent) {}

// TestChallengesOfUnservedHostsCostNoQuery: an outside client asking for
// the ACME challenge of made-up hosts, on the HTTP-01 path or in a
// TLS-ALPN-01 handshake, gets none, and the database is never asked (a
// flood of them would be a flood of queries); a host Challenged is looked
// up, since another ingress sharing the database may have started its order.
func TestChallengesOfUnservedHostsCostNoQuery(t *testing.T) {
	bdb := dbtest.SQLite(t, sets...)
	lookups := &challengeLookups{}
	bdb.AddQueryHook(lookups)
	const served = "served.example.test"
	mgr, err := certs.New(context.Background(), certs.Config{DB: bdb, DirectoryURL: "https://127.0.0.1:1/directory",
		Allowed:    func(context.Context, string) error { return errors.New("no order in this test") },
		Challenged: func(_ context.Context, host string) bool { return host == served }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mgr.Close(context.Background()) })
	plain := mgr.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("a challenge path reached the app: %s %s", r.Host, r.URL)
	}))
	secure := httptest.NewUnstartedServer(http.NotFoundHandler())
	secure.TLS = mgr.TLSConfig()
	secure.StartTLS()
	t.Cleanup(secure.Close)

	ask := func(host string) {
		t.Helper()
		rec := httptest.NewRecorder()
		plain.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://"+host+"/.well-known/acme-challenge/token", nil))
		if rec.Code != http.StatusNotFound {
			t.Fatalf("challenge of %s: %d, want 404", host, rec.Code)
		}
		conn, err := tls.Dial("tcp", secure.Listener.Addr().String(),
			&tls.Config{ServerName: host, NextProtos: []string{"acme-tls/1"}, InsecureSkipVerify: true})
		if err == nil {
			conn.Close()
			t.Fatalf("a TLS-ALPN-01 handshake for %s got a certificate", host)
		}
	}
	for i := range 20 {
		ask(fmt.Sprintf("made-up-%d.example.test", i))
	}
	if n := lookups.n.Load(); n != 0 {
		t.Fatalf("challenges of 20 made-up hosts read the database %d times, want 0", n)
	}
	ask(served)
	if lookups.n.Load() == 0 {
		t.Fatal("the challenge of a served host was not looked up in the database (another ingress's order)")
	}
}
