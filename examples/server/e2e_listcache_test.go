package main

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

// listPlanNames is each listed project's planName, newest first.
func listPlanNames(t *testing.T, ts *testServer, token string) []string {
	t.Helper()
	var list []e2eProject
	ts.doJSON(t, http.StatusOK, "GET", "/projects", token, nil, &list)
	var out []string
	for _, p := range list {
		out = append(out, p.PlanName)
	}
	return out
}

// planAccounts signs up admin and alice on ts and answers their tokens,
// alice's user id and the plans by name.
func planAccounts(t *testing.T, ts *testServer) (admin, alice, aliceID string, byName map[string]e2ePlan) {
	t.Helper()
	admin = ts.signup(t, "admin@example.com")
	alice = ts.signup(t, "alice@example.com")
	var me struct{ ID string }
	ts.doJSON(t, http.StatusOK, "GET", "/auth/me", alice, nil, &me)
	var ps []e2ePlan
	ts.doJSON(t, http.StatusOK, "GET", "/plans", "", nil, &ps)
	byName = map[string]e2ePlan{}
	for _, p := range ps {
		byName[p.Name] = p
	}
	return admin, alice, me.ID, byName
}

// TestProjectListCachePlanNamesE2E: GET /projects is answered from the list
// cache, and the plans module's writes reach it through the host's edge
// before they answer: an account plan assignment and a plan rename show in
// the next list of a project that follows the account plan.
func TestProjectListCachePlanNamesE2E(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, dbURL string) {
		ts := startServer(t, dbURL, nil)
		admin, alice, aliceID, byName := planAccounts(t, ts)
		ts.doJSON(t, http.StatusCreated, "POST", "/projects", alice, map[string]any{
			"name": "Web", "repoUrl": "https://github.com/acme/web", "framework": "node", "port": 3000}, nil)
		for range 2 {
			if got := listPlanNames(t, ts, alice); len(got) != 1 || got[0] != "free" {
				t.Fatalf("list: %v", got)
			}
		}
		ts.doJSON(t, http.StatusNoContent, "PUT", "/plans/"+byName["starter"].ID+"/accounts/"+aliceID, admin, nil, nil)
		if got := listPlanNames(t, ts, alice); len(got) != 1 || got[0] != "starter" {
			t.Fatalf("after the account plan assignment: %v", got)
		}
		ts.doJSON(t, http.StatusOK, "PATCH", "/plans/"+byName["starter"].ID, admin, map[string]any{"name": "starter-2"}, nil)
		if got := listPlanNames(t, ts, alice); len(got) != 1 || got[0] != "starter-2" {
			t.Fatalf("after the plan rename: %v", got)
		}
	})
}

// TestProjectListCacheReplicasE2E: two replicas on one Postgres database see
// each other's project and plan writes in GET /projects (the list cache
// hears of them through LISTEN/NOTIFY; the window is the notification's
// trip, so the other replica's list is awaited).
func TestProjectListCacheReplicasE2E(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.PostgresURL(t)
	a := startServer(t, dbURL, nil)
	b := startServer(t, dbURL, nil)
	admin, alice, aliceID, byName := planAccounts(t, a)
	await := func(ts *testServer, what string, want ...string) {
		t.Helper()
		platformtest.Eventually(t, 20*time.Second, what, func() bool {
			return slices.Equal(listPlanNames(t, ts, alice), want)
		})
	}
	await(b, "b's empty list")
	a.doJSON(t, http.StatusCreated, "POST", "/projects", alice, map[string]any{
		"name": "Web", "repoUrl": "https://github.com/acme/web", "framework": "node", "port": 3000}, nil)
	await(b, "a's project on b", "free")
	a.doJSON(t, http.StatusNoContent, "PUT", "/plans/"+byName["starter"].ID+"/accounts/"+aliceID, admin, nil, nil)
	await(b, "a's account plan assignment on b", "starter")
	b.doJSON(t, http.StatusOK, "PATCH", "/plans/"+byName["starter"].ID, admin, map[string]any{"name": "starter-2"}, nil)
	await(a, "b's plan rename on a", "starter-2")
	b.doJSON(t, http.StatusCreated, "POST", "/projects", alice, map[string]any{
		"name": "Backend", "repoUrl": "https://github.com/acme/backend", "framework": "go", "port": 8080}, nil)
	await(a, "b's project on a", "starter-2", "starter-2")
}
