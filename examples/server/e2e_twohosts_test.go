package main

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"testing"

	"github.com/keelson-dev/keelson/deployments/hosts"
	"github.com/keelson-dev/keelson/deployments/temporal/temporaltest"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

// TestTwoHostsServeEveryAppE2E: one API replica and two worker processes,
// each with its own runtime and ingress, on one Postgres and one Temporal.
// One app is placed on each host (the other cordoned through the hosts
// register); every app answers through either host's ingress, the remote
// one forwarding to the host that runs it.
func TestTwoHostsServeEveryAppE2E(t *testing.T) {
	t.Parallel()
	srv := temporaltest.StartDevServer(t)
	dbURL := dbtest.PostgresURL(t)
	queue := "keelson-hosts-" + platformtest.Unique(8)
	role := func(r string) func(*Config) {
		return func(c *Config) {
			c.Engine, c.TemporalAddress, c.TemporalTaskQueue, c.Role = "temporal", srv.FrontendHostPort(), queue, r
		}
	}
	w1 := startServer(t, dbURL, role(RoleWorker))
	w2 := startServer(t, dbURL, role(RoleWorker))
	api := startServer(t, dbURL, role(RoleAPI))
	ctx := context.Background()
	cordon := func(w *testServer, on bool) {
		t.Helper()
		if _, err := w.App.Hosts.SetCordoned(ctx, w.App.localHost.ID, on, "test"); err != nil {
			t.Fatal(err)
		}
	}

	alice := api.signup(t, "alice@example.com")
	deployOn := func(w *testServer, name string) (slug, url string) {
		t.Helper()
		_, bare := newRepo(t, goApp(name))
		var p struct {
			ID   string `json:"id"`
			Slug string `json:"slug"`
		}
		api.doJSON(t, http.StatusCreated, "POST", "/projects", alice, map[string]any{
			"name": name, "repoUrl": "file://" + bare, "framework": "go", "port": 8080,
		}, &p)
		var tr struct {
			DeploymentID string `json:"deploymentId"`
		}
		api.doJSON(t, http.StatusCreated, "POST", "/deployments", alice, map[string]any{"projectId": p.ID}, &tr)
		final, _ := waitDeployment(t, api, alice, tr.DeploymentID)
		if final.Status != "LIVE" {
			t.Fatalf("deployment of %s: %s %s", name, final.Status, final.ErrorMessage)
		}
		row, err := api.App.Deployments.Store().DeploymentGet(ctx, tr.DeploymentID)
		if err != nil {
			t.Fatal(err)
		}
		if row.Host != w.App.localHost.Queue {
			t.Fatalf("%s placed on %q, want the host that is not cordoned (%q)", name, row.Host, w.App.localHost.Queue)
		}
		return p.Slug, final.DeployedURL
	}
	cordon(w2, true)
	slug1, url1 := deployOn(w1, "one")
	cordon(w2, false)
	cordon(w1, true)
	slug2, url2 := deployOn(w2, "two")
	cordon(w1, false)

	for _, w := range []*testServer{w1, w2} {
		platformtest.Eventually(t, remoteEvery*10, "every app through "+w.Ingress, func() bool {
			return tryApp(w, url1, slug1) == "version one" && tryApp(w, url2, slug2) == "version two"
		})
	}
	hs, err := api.App.Hosts.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 2 || hs[0].State != hosts.StateActive || hs[1].State != hosts.StateActive || hs[0].Apps+hs[1].Apps > 2 {
		t.Fatalf("hosts: %+v", hs)
	}
}

// tryApp is the app's answer through ts's ingress, or "" (any failure).
func tryApp(ts *testServer, deployedURL, slug string) string {
	host := slug + "." + ts.App.Cfg.AppsDomain
	if u, err := url.Parse(deployedURL); err == nil && u.Hostname() != "" {
		host = u.Hostname()
	}
	req, err := http.NewRequest(http.MethodGet, "http://"+ts.Ingress+"/", nil)
	if err != nil {
		return ""
	}
	req.Host = host
	resp, err := ts.Client.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return ""
	}
	return string(b)
}
