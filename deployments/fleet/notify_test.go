package fleet_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/fleet"
	"github.com/keelson-dev/keelson/deployments/hosts"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

// heard counts the route notifications a listener receives, and when it
// went live.
type heard struct {
	mu   sync.Mutex
	n    int
	live bool
}

func (h *heard) Invalidate(string, string) { h.mu.Lock(); h.n++; h.mu.Unlock() }
func (h *heard) Reset(live bool)           { h.mu.Lock(); h.live = live; h.mu.Unlock() }
func (h *heard) get() (int, bool)          { h.mu.Lock(); defer h.mu.Unlock(); return h.n, h.live }

// Every ingress reloads its remote routes when Postgres announces a change
// of the route table. The triggers announce exactly the changes LiveHosts
// can see (a deployment becoming LIVE, leaving LIVE, moving host; a host
// added or readdressed) and stay quiet on a deployment's other updates
// (steps, log bytes), which are many per deployment.
func TestRouteTableChangesAreAnnounced(t *testing.T) {
	ctx := context.Background()
	bdb := dbtest.Postgres(t, deployments.Migrations(), hosts.Migrations(), fleet.Migrations())
	h := &heard{}
	stop := db.StartListen(bdb, h, db.ListenConfig{Channels: []string{fleet.RouteChannel}})
	t.Cleanup(stop)
	platformtest.Eventually(t, 10*time.Second, "the listener to go live", func() bool { _, live := h.get(); return live })

	// expect runs change and waits until exactly want more notifications
	// came. A quiet change is followed by a loud one, so "none" is proven by
	// the count after the loud one being one more, not by waiting.
	count := 0
	expect := func(what string, want int, change func()) {
		t.Helper()
		change()
		count += want
		platformtest.Eventually(t, 10*time.Second, what, func() bool { n, _ := h.get(); return n >= count })
		n, _ := h.get()
		require.Equal(t, count, n, what)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	d := &deployments.Deployment{ID: platform.NewID(), ProjectID: platform.NewID(), OwnerID: platform.NewID(), ProjectSlug: "shop",
		Status: deployments.StatusProvisioning, Steps: deployments.NewSteps(), Host: "q/a", WorkflowName: "w", Attempt: 1, CreatedAt: now, UpdatedAt: now}
	update := func(cols ...string) {
		_, err := bdb.NewUpdate().Model(d).Column(cols...).WherePK().Exec(ctx)
		require.NoError(t, err)
	}
	loud := func() { d.Host = map[string]string{"q/a": "q/b", "q/b": "q/a"}[d.Host]; update("host") }

	_, err := bdb.NewInsert().Model(d).Exec(ctx)
	require.NoError(t, err)
	d.Status = deployments.StatusLive
	expect("PROVISIONING -> LIVE", 1, func() { update("status") })
	expect("a LIVE deployment's log bytes, then its host", 1, func() { d.LogBytes = 42; update("log_bytes"); loud() })
	d.Status = deployments.StatusCancelled
	expect("LIVE -> CANCELLED", 1, func() { update("status") })
	expect("a CANCELLED deployment's host (not served)", 0, func() { d.Host = "q/c"; update("host") })

	// A host registering (insert), beating (quiet), readdressed (loud).
	expect("a host registers", 1, func() {
		b, err := hosts.New(hosts.Deps{DB: bdb, HeartbeatEvery: time.Hour, Local: &hosts.Local{
			Host: hosts.Host{ID: "b", Queue: "q/b", Address: "10.0.0.2:8081"}, CountApps: func(context.Context) (int, error) { return 0, nil }}})
		require.NoError(t, err)
		require.NoError(t, b.Start(ctx))
		t.Cleanup(func() { _ = b.Close(ctx) })
	})
	exec := func(q string) {
		_, err := bdb.ExecContext(ctx, q)
		require.NoError(t, err)
	}
	expect("a heartbeat, then a new address", 1, func() {
		exec("UPDATE hosts SET heartbeat_at = now(), apps = 3 WHERE id = 'b'")
		exec("UPDATE hosts SET address = '10.0.0.9:8081' WHERE id = 'b'")
	})
}
