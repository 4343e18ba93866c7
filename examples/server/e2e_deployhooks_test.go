package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// TestDeployHooksE2E: a deploy hook's secret URL deploys the project's branch
// head with no other credential; listings show a prefix only; the token is
// stored hashed; other users cannot see or manage the hooks; the plan's
// maxDeployments quota refuses a hook like any deployment (403 naming it); a
// revoked hook is a 404.
func TestDeployHooksE2E(t *testing.T) {
	eachDB(t, func(t *testing.T, dbURL string) {
		ts := startServer(t, dbURL, nil)
		admin := ts.signup(t, "admin@example.com")
		alice := ts.signup(t, "alice@example.com")
		bob := ts.signup(t, "bob@example.com")
		_, bare := newRepo(t, map[string]string{"index.html": "<h1>hooked v1</h1>\n"})
		var p webhookProject
		ts.doJSON(t, http.StatusCreated, "POST", "/projects", alice, map[string]any{
			"name": "hooked", "repoUrl": "file://" + bare, "framework": "static", "port": 8080,
		}, &p)

		// One deployment a month for alice's account.
		var tiny struct{ ID string }
		ts.doJSON(t, http.StatusCreated, "POST", "/plans", admin, map[string]any{"name": "tiny", "tier": "FREE", "maxProjects": 3,
			"maxDeployments": 1, "maxMemoryMi": 256, "maxCpuM": 250, "maxStorageGi": 1, "maxBandwidthGb": 5, "buildTimeoutMins": 5}, &tiny)
		ts.doJSON(t, http.StatusNoContent, "PUT", "/plans/"+tiny.ID+"/accounts/"+ownerOf(t, ts, alice), admin, nil, nil)

		var hook struct {
			ID, Name, Prefix, URL string
		}
		hdr := ts.doJSON(t, http.StatusCreated, "POST", "/projects/"+p.ID+"/deploy-hooks", alice, map[string]any{"name": "ci"}, &hook)
		token, ok := strings.CutPrefix(hook.URL, ts.App.Cfg.PublicURL+"/deploy-hooks/")
		if !ok || len(token) < 40 || hook.Name != "ci" || !strings.HasPrefix(token, hook.Prefix) || len(hook.Prefix) >= len(token)/2 {
			t.Fatalf("created hook = %+v", hook)
		}
		if hdr.Get("Cache-Control") != "no-store" {
			t.Fatalf("create answered Cache-Control %q", hdr.Get("Cache-Control"))
		}
		// Listed by prefix only; stored hashed.
		status, body, _ := ts.do(t, "GET", "/projects/"+p.ID+"/deploy-hooks", alice, nil)
		if status != http.StatusOK || !strings.Contains(string(body), hook.Prefix) || strings.Contains(string(body), token) {
			t.Fatalf("list: %d %s", status, body)
		}
		var stored []string
		if err := ts.App.DB.NewRaw("SELECT token_hash || prefix || name FROM deploy_hooks").Scan(context.Background(), &stored); err != nil {
			t.Fatal(err)
		}
		if len(stored) != 1 || strings.Contains(stored[0], token) {
			t.Fatalf("deploy_hooks row holds the token: %q", stored)
		}
		// Someone else's hooks are not found, whatever the route.
		for _, r := range []struct{ method, path string }{
			{"GET", "/projects/" + p.ID + "/deploy-hooks"}, {"POST", "/projects/" + p.ID + "/deploy-hooks"},
			{"DELETE", "/projects/" + p.ID + "/deploy-hooks/" + hook.ID},
		} {
			if status, body, _ := ts.do(t, r.method, r.path, bob, nil); status != http.StatusNotFound {
				t.Fatalf("bob %s %s: %d %s", r.method, r.path, status, body)
			}
		}
		if status, _, _ := ts.do(t, "GET", "/projects/"+p.ID+"/deploy-hooks", "", nil); status != http.StatusUnauthorized {
			t.Fatalf("list without a token: %d", status)
		}

		// The URL alone deploys the branch head.
		fire := func() (int, string) {
			status, body, _ := ts.do(t, "POST", "/deploy-hooks/"+token, "", nil)
			return status, string(body)
		}
		var fired struct {
			DeploymentID string `json:"deploymentId"`
		}
		ts.doJSON(t, http.StatusCreated, "POST", "/deploy-hooks/"+token, "", nil, &fired)
		st, _ := waitDeployment(t, ts, alice, fired.DeploymentID)
		if st.Status != "LIVE" {
			t.Fatalf("hook deployment %s: %s", st.Status, st.ErrorMessage)
		}
		if page := getApp(t, ts, st.DeployedURL, p.Slug); !strings.Contains(page, "hooked v1") {
			t.Fatalf("app answered %q", page)
		}
		// The quota: a second deployment this month is refused, naming it.
		if status, body := fire(); status != http.StatusForbidden || !strings.Contains(body, "maxDeployments quota reached: 1 of 1") {
			t.Fatalf("over quota: %d %s", status, body)
		}
		if deps := deploymentsOf(t, ts, alice, p.ID); len(deps) != 1 {
			t.Fatalf("deployments = %+v, want 1", deps)
		}
		// Unknown tokens and revoked hooks: 404.
		for _, bad := range []string{"kdh_" + strings.Repeat("A", 43), "nonsense", token[:len(token)-1]} {
			if status, body, _ := ts.do(t, "POST", "/deploy-hooks/"+bad, "", nil); status != http.StatusNotFound {
				t.Fatalf("token %q: %d %s", bad, status, body)
			}
		}
		ts.doJSON(t, http.StatusNoContent, "DELETE", "/projects/"+p.ID+"/deploy-hooks/"+hook.ID, alice, nil, nil)
		if status, body := fire(); status != http.StatusNotFound || !strings.Contains(body, "deploy hook not found") {
			t.Fatalf("revoked hook: %d %s", status, body)
		}
		if status, _, _ := ts.do(t, "DELETE", "/projects/"+p.ID+"/deploy-hooks/"+hook.ID, alice, nil); status != http.StatusNotFound {
			t.Fatalf("second delete: %d", status)
		}
		var left []any
		ts.doJSON(t, http.StatusOK, "GET", "/projects/"+p.ID+"/deploy-hooks", alice, nil, &left)
		if len(left) != 0 {
			t.Fatalf("hooks after revoke: %+v", left)
		}
	})
}

// TestDeployHookCapUnderConcurrency (issue 23): 40 creates at once on one
// project pass the 20-hook cap by none: the count and the insert are one
// transaction under the project's lock (on Postgres; SQLite's one writer).
func TestDeployHookCapUnderConcurrency(t *testing.T) {
	eachDB(t, func(t *testing.T, dbURL string) {
		ts := startServer(t, dbURL, nil)
		alice := ts.signup(t, "alice@example.com")
		var p webhookProject
		ts.doJSON(t, http.StatusCreated, "POST", "/projects", alice, map[string]any{
			"name": "many-hooks", "repoUrl": "https://github.com/acme/many-hooks", "framework": "static", "port": 8080,
		}, &p)
		const tries, limit = 40, 20
		codes := make(chan int, tries)
		var wg sync.WaitGroup
		for i := range tries {
			wg.Add(1)
			go func() {
				defer wg.Done()
				status, _, _ := ts.do(t, "POST", "/projects/"+p.ID+"/deploy-hooks", alice, map[string]any{"name": fmt.Sprintf("h%d", i)})
				codes <- status
			}()
		}
		wg.Wait()
		close(codes)
		count := map[int]int{}
		for c := range codes {
			count[c]++
		}
		if count[http.StatusCreated] != limit || count[http.StatusForbidden] != tries-limit {
			t.Fatalf("answers: %v, want %d x 201 and %d x 403", count, limit, tries-limit)
		}
		var hooks []struct{ ID string }
		ts.doJSON(t, http.StatusOK, "GET", "/projects/"+p.ID+"/deploy-hooks", alice, nil, &hooks)
		if len(hooks) != limit {
			t.Fatalf("%d hooks stored, the cap is %d", len(hooks), limit)
		}
	})
}
