package main

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/keelson-dev/keelson/deployments/hosts"
	"github.com/keelson-dev/keelson/examples/apiclient"
	"github.com/keelson-dev/keelson/platform"
)

// hostsRoutes drives the ADMIN hosts routes: two workers' hosts written to
// the server's database (one alive, one whose last heartbeat is an hour
// old), listed, cordoned and uncordoned; the live one cannot be removed
// (409), the down one can (204); a user gets 403 and an unknown id 404.
func (e *statusEnv) hostsRoutes(t *testing.T) {
	ctx := context.Background()
	for id, at := range map[string]time.Time{"live-host": time.Now(), "gone-host": time.Now().Add(-time.Hour)} {
		svc, err := hosts.New(hosts.Deps{DB: e.ts.App.DB, Clock: platform.ClockFunc(func() time.Time { return at }),
			HeartbeatEvery: time.Hour, Local: &hosts.Local{Host: hosts.Host{ID: id, Queue: "q/worker/" + id},
				CountApps: func(context.Context) (int, error) { return 0, nil }}})
		require.NoError(t, err)
		require.NoError(t, svc.Start(ctx))
		require.NoError(t, svc.Close(ctx))
	}
	admin := e.rec.client(t, e.ts, e.admin)
	user := e.rec.client(t, e.ts, e.ts.signup(t, "not-an-admin@example.com"))
	list, err := admin.ListHostsWithResponse(ctx)
	want(t, "list hosts", list, err, http.StatusOK)
	states := map[string]apiclient.HostState{}
	for _, h := range *list.JSON200 {
		states[h.Id] = h.State
	}
	require.Equal(t, map[string]apiclient.HostState{"live-host": "active", "gone-host": "down"}, states)
	denied, err := user.ListHostsWithResponse(ctx)
	want(t, "list hosts as a user", denied, err, http.StatusForbidden)
	got, err := admin.GetHostWithResponse(ctx, "live-host")
	want(t, "get host", got, err, http.StatusOK)
	missing, err := admin.GetHostWithResponse(ctx, "no-such-host")
	want(t, "get unknown host", missing, err, http.StatusNotFound)
	reason := "kernel upgrade"
	c, err := admin.CordonHostWithResponse(ctx, "live-host", apiclient.CordonRequest{Reason: &reason})
	want(t, "cordon", c, err, http.StatusOK)
	require.Equal(t, apiclient.HostState("cordoned"), c.JSON200.State)
	cu, err := user.CordonHostWithResponse(ctx, "live-host", apiclient.CordonRequest{})
	want(t, "cordon as a user", cu, err, http.StatusForbidden)
	dr, err := admin.DrainHostWithResponse(ctx, "live-host")
	want(t, "drain", dr, err, http.StatusOK)
	dm, err := admin.DrainHostWithResponse(ctx, "no-such-host")
	want(t, "drain unknown", dm, err, http.StatusNotFound)
	u, err := admin.UncordonHostWithResponse(ctx, "live-host")
	want(t, "uncordon", u, err, http.StatusOK)
	uu, err := admin.UncordonHostWithResponse(ctx, "no-such-host")
	want(t, "uncordon unknown", uu, err, http.StatusNotFound)
	busy, err := admin.DeleteHostWithResponse(ctx, "live-host")
	want(t, "remove a live host", busy, err, http.StatusConflict)
	gone, err := admin.DeleteHostWithResponse(ctx, "gone-host")
	want(t, "remove a down host", gone, err, http.StatusNoContent)
}
