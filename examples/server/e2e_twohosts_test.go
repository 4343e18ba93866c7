package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/deployments"
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
	w1, w2, api := startTwoHosts(t, 250*time.Millisecond, 2*time.Second, nil)
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
		row, err := deployments.NewStore(api.App.DB).DeploymentGet(ctx, tr.DeploymentID)
		if err != nil {
			t.Fatal(err)
		}
		if row.Host != w.App.localHost.Queue {
			t.Fatalf("%s placed on %q, want the host that is not cordoned (%q)", name, row.Host, w.App.localHost.Queue)
		}
		if logs := strings.Join(streamLogs(t, api, alice, tr.DeploymentID), "\n"); !strings.Contains(logs, "placed on host "+w.App.localHost.ID+" (") ||
			!strings.Contains(logs, " cordoned") {
			t.Fatalf("the log does not give the placement and its reason:\n%s", logs)
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

	// Host two is drained while clients ask app two through each ingress
	// without pause: app two moves to host one, and no request fails.
	steadyWhile(t, []*testServer{w1, w2}, slug2, "200 version two", func() {
		moving := liveOf(t, api, slug2)
		if _, err := w1.App.Hosts.Drain(ctx, w2.App.localHost.ID); err != nil {
			t.Fatal(err)
		}
		platformtest.Eventually(t, time.Minute, "app two to move to host one", func() bool {
			d := liveOf(t, api, slug2)
			return d.ID != moving.ID && d.Host == w1.App.localHost.Queue
		})
		time.Sleep(5 * time.Second) // past the old app's release
	})
	cordon(w2, false)

	// Host one stops (its heartbeat, its apps, its ingress): within a
	// minute its apps answer through host two, from new deployments of the
	// same commits that the old ones' logs name.
	was := liveOf(t, api, slug1)
	w1.stop()
	platformtest.Eventually(t, time.Minute, "the apps through host two after host one stopped", func() bool {
		return tryApp(w2, "", slug1) == "version one" && tryApp(w2, url2, slug2) == "version two"
	})
	now := liveAfter(t, api, slug1, was.ID)
	if now.CommitSHA != was.CommitSHA {
		t.Fatalf("after the move: %+v, before: %+v", now, was)
	}
	if logs := streamLogs(t, api, alice, was.ID); !strings.Contains(strings.Join(logs, "\n"), "deployment "+now.ID+" builds commit "+was.CommitSHA+" again (its image is in no registry) on another host") {
		t.Fatalf("the moved deployment's log does not say where it went:\n%s", strings.Join(logs, "\n"))
	}
}

// startTwoHosts starts two worker processes (hosts) and one API replica
// on one Temporal dev server and one Postgres, with the hosts' heartbeat
// and down-after given; more, when set, adjusts each one's config (its
// Role set).
func startTwoHosts(t testing.TB, heartbeat, downAfter time.Duration, more func(*Config)) (w1, w2, api *testServer) {
	t.Helper()
	srv := temporaltest.StartDevServer(t)
	dbURL := dbtest.PostgresURL(t)
	queue := "keelson-hosts-" + platformtest.Unique(8)
	role := func(r string) func(*Config) {
		return func(c *Config) {
			c.Engine, c.TemporalAddress, c.TemporalTaskQueue, c.Role = "temporal", srv.FrontendHostPort(), queue, r
			c.hostHeartbeat, c.HostDownAfter = heartbeat, downAfter
			if more != nil {
				more(c)
			}
		}
	}
	return startServer(t, dbURL, role(RoleWorker)), startServer(t, dbURL, role(RoleWorker)), startServer(t, dbURL, role(RoleAPI))
}

// liveOf is the project's LIVE deployment (the newest), by slug.
func liveOf(t *testing.T, ts *testServer, slug string) *deployments.Deployment {
	t.Helper()
	var out *deployments.Deployment
	platformtest.Eventually(t, time.Minute, "a LIVE deployment of "+slug, func() bool {
		ds, err := deployments.NewStore(ts.App.DB).DeploymentsWhere(context.Background(),
			deployments.Filter{Statuses: []deployments.Status{deployments.StatusLive}})
		if err != nil {
			t.Fatal(err)
		}
		out = nil
		for _, d := range ds {
			if d.ProjectSlug == slug {
				out = d
			}
		}
		return out != nil
	})
	return out
}

// liveAfter is the project's LIVE deployment once it is no longer the one
// with id was. The ingress serves a route from the DNS step on, a moment
// before the deployment is marked LIVE, so an app answering from its new
// place does not yet mean its deployment reads LIVE.
func liveAfter(t *testing.T, ts *testServer, slug, was string) *deployments.Deployment {
	t.Helper()
	var now *deployments.Deployment
	platformtest.Eventually(t, time.Minute, "a LIVE deployment of "+slug+" other than "+was, func() bool {
		now = liveOf(t, ts, slug)
		return now.ID != was
	})
	return now
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

// askApp is the status and body of the app's answer through ts's ingress, or the error.
func askApp(ts *testServer, slug string) string {
	req, err := http.NewRequest(http.MethodGet, "http://"+ts.Ingress+"/", nil)
	if err != nil {
		return err.Error()
	}
	req.Host = slug + "." + ts.App.Cfg.AppsDomain
	resp, err := ts.Client.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return fmt.Sprintf("%d %s", resp.StatusCode, b)
}
