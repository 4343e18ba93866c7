package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

// TestPinnedProjectStaysOnItsHostE2E: two worker hosts; only the platform
// ADMIN pins a project (a user gets 403 before any host is looked up; an
// unknown host is a 400 naming it). The pinned project's deployment goes to
// its host; with that host cordoned the next one FAILS naming it, never
// placed on the other; when the host dies its app is not moved, and the
// LIVE deployment's log says why.
func TestPinnedProjectStaysOnItsHostE2E(t *testing.T) {
	t.Parallel()
	w1, w2, api := startTwoHosts(t, 250*time.Millisecond, 2*time.Second, func(c *Config) { c.AdminEmails = []string{"root@example.com"} })
	ctx := context.Background()
	root, alice := api.signup(t, "root@example.com"), api.signup(t, "alice@example.com")
	project := func(token, name string) (id, slug string) {
		_, bare := newRepo(t, goApp(name))
		var p struct{ ID, Slug string }
		api.doJSON(t, http.StatusCreated, "POST", "/projects", token, map[string]any{
			"name": name, "repoUrl": "file://" + bare, "framework": "go", "port": 8080}, &p)
		return p.ID, p.Slug
	}
	pin := func(token, id, host string) (int, string) {
		var p map[string]any
		api.doJSON(t, http.StatusOK, "GET", "/projects/"+id, token, nil, &p)
		st, body, _ := api.do(t, "PATCH", "/projects/"+id+"/settings", token, map[string]any{
			"region": p["region"], "planName": p["planName"], "envVars": []any{}, "host": host})
		return st, string(body)
	}
	deploy := func(token, id string) e2eStatus {
		var tr struct{ DeploymentID string }
		api.doJSON(t, http.StatusCreated, "POST", "/deployments", token, map[string]any{"projectId": id}, &tr)
		final, _ := waitDeployment(t, api, token, tr.DeploymentID)
		return final
	}
	host1 := w1.App.localHost.ID
	mine, _ := project(alice, "mine")
	if st, body := pin(alice, mine, host1); st != http.StatusForbidden || !strings.Contains(body, "platform ADMIN") {
		t.Fatalf("a user pins: %d %s", st, body)
	}
	id, slug := project(root, "pinned")
	if st, body := pin(root, id, "no-such-host"); st != http.StatusBadRequest || !strings.Contains(body, `host \"no-such-host\" is not registered`) {
		t.Fatalf("an unknown host: %d %s", st, body)
	}
	if st, body := pin(root, id, host1); st != http.StatusOK || !strings.Contains(body, `"host":"`+host1+`"`) {
		t.Fatalf("pin: %d %s", st, body)
	}

	live := deploy(root, id)
	row, err := deployments.NewStore(api.App.DB).DeploymentGet(ctx, live.ID)
	if err != nil || live.Status != "LIVE" || row.Host != w1.App.localHost.Queue {
		t.Fatalf("pinned deployment: %+v on %q (%v)", live, row.Host, err)
	}
	if logs := logText(t, api, root, live.ID); !strings.Contains(logs, "placed on host "+host1+" (") || !strings.Contains(logs, "the project is pinned to it") {
		t.Fatalf("the log does not give the pin:\n%s", logs)
	}
	if _, err := w1.App.Hosts.SetCordoned(ctx, host1, true, "test"); err != nil {
		t.Fatal(err)
	}
	if failed := deploy(root, id); failed.Status != "FAILED" || !strings.Contains(failed.ErrorMessage, host1+" cordoned") ||
		!strings.Contains(failed.ErrorMessage, w2.App.localHost.ID+" not the pinned host") {
		t.Fatalf("with its host cordoned: %+v", failed)
	}
	if _, err := w1.App.Hosts.SetCordoned(ctx, host1, false, ""); err != nil {
		t.Fatal(err)
	}

	w1.stop()
	platformtest.Eventually(t, time.Minute, "the pinned app's log to say it is not moved", func() bool {
		return strings.Contains(logText(t, api, root, live.ID), "the project is pinned to host "+host1+", so its app is not moved")
	})
	if now := liveOf(t, api, slug); now.ID != live.ID {
		t.Fatalf("the pinned app moved: %+v", now)
	}
}
