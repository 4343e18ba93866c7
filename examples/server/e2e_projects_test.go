package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform/platformtest"
)

type e2eProject struct {
	ID               string `json:"id"`
	Slug             string `json:"slug"`
	Status           string `json:"status"`
	PlanName         string `json:"planName"`
	HasWebhookSecret bool   `json:"hasWebhookSecret"`
	EnvVars          []struct {
		Key      string `json:"key"`
		Value    string `json:"value"`
		IsSecret bool   `json:"isSecret"`
	} `json:"envVars"`
}

type e2ePlan struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Tier        string `json:"tier"`
	MaxProjects int    `json:"maxProjects"`
}

// TestProjectsAndPlansE2E drives projects, plans and quotas over real HTTP
// with real accounts, then restarts the server over the same database.
func TestProjectsAndPlansE2E(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, dbURL string) {
		ts := startServer(t, dbURL, func(c *Config) { c.Regions = []string{"local", "eu-west"} })
		admin := ts.signup(t, "admin@example.com")
		alice := ts.signup(t, "alice@example.com")
		bob := ts.signup(t, "bob@example.com")
		var me struct{ ID, Role string }
		ts.doJSON(t, http.StatusOK, "GET", "/auth/me", alice, nil, &me)

		// Plans: seeded one per tier, public reads, ADMIN writes.
		var ps []e2ePlan
		ts.doJSON(t, http.StatusOK, "GET", "/plans", "", nil, &ps)
		if len(ps) != 4 || ps[0].Name != "free" || ps[0].MaxProjects != 3 || ps[3].Tier != "ENTERPRISE" {
			t.Fatalf("seeded plans: %+v", ps)
		}
		byName := map[string]e2ePlan{}
		for _, p := range ps {
			byName[p.Name] = p
		}
		custom := map[string]any{"name": "hobby", "tier": "STARTER", "maxProjects": 4, "maxDeployments": 20,
			"maxMemoryMi": 256, "maxCpuM": 250, "maxStorageGi": 1, "maxBandwidthGb": 5, "buildTimeoutMins": 5}
		if st, _, _ := ts.do(t, "POST", "/plans", alice, custom); st != http.StatusForbidden {
			t.Fatalf("plan create by user: %d", st)
		}
		if st, _, _ := ts.do(t, "POST", "/plans", "", custom); st != http.StatusUnauthorized {
			t.Fatalf("plan create without token: %d", st)
		}
		var hobby e2ePlan
		ts.doJSON(t, http.StatusCreated, "POST", "/plans", admin, custom, &hobby)

		// Projects with secrets: never answered, never logged.
		const hook, secretVal = "e2e-hook-secret-31f9", "e2e-db-password-77c2"
		var p1 e2eProject
		ts.doJSON(t, http.StatusCreated, "POST", "/projects", alice, map[string]any{
			"name": "Web", "repoUrl": "https://github.com/acme/web", "framework": "node", "port": 3000,
			"webhookSecret": hook,
		}, &p1)
		if p1.Slug != "web" || p1.Status != "ACTIVE" || !p1.HasWebhookSecret {
			t.Fatalf("created: %+v", p1)
		}
		settings := map[string]any{"region": "eu-west", "planName": "free", "envVars": []any{
			map[string]any{"key": "DB_PASSWORD", "value": secretVal, "isSecret": true},
			map[string]any{"key": "MODE", "value": "prod"},
		}}
		st, body, _ := ts.do(t, "PATCH", "/projects/"+p1.ID+"/settings", alice, settings)
		if st != http.StatusOK || !strings.Contains(string(body), `"value":"********"`) {
			t.Fatalf("settings: %d %s", st, body)
		}
		var bodies []string
		for _, path := range []string{"/projects", "/projects/" + p1.ID, "/usage"} {
			_, b, _ := ts.do(t, "GET", path, alice, nil)
			bodies = append(bodies, string(b))
		}
		bodies = append(bodies, string(body))
		for _, b := range append(bodies, ts.Logs.String()) {
			if strings.Contains(b, hook) || strings.Contains(b, secretVal) {
				t.Fatalf("a secret leaked: %s", b)
			}
		}
		// The deployments side sees the plaintext.
		info, err := ts.App.Projects.ProjectForDeploy(t.Context(), p1.ID)
		if err != nil || len(info.Env) != 2 || info.Env[0].Value != secretVal || info.Region != "eu-west" || info.MaxMemoryMi != 512 {
			t.Fatalf("deploy info: %+v %v", info, err)
		}

		// Another user: 404 everywhere, empty list.
		for _, c := range []struct {
			method, path string
			body         any
		}{
			{"GET", "/projects/" + p1.ID, nil}, {"PATCH", "/projects/" + p1.ID + "/settings", settings},
			{"GET", "/projects/" + p1.ID + "/delete-status", nil}, {"DELETE", "/projects/" + p1.ID, nil},
		} {
			if st, b, _ := ts.do(t, c.method, c.path, bob, c.body); st != http.StatusNotFound {
				t.Errorf("bob %s %s: %d %s", c.method, c.path, st, b)
			}
		}
		if _, b, _ := ts.do(t, "GET", "/projects", bob, nil); strings.TrimSpace(string(b)) != "[]" {
			t.Fatalf("bob's list: %s", b)
		}

		// Quotas: free allows 3 projects.
		for i := 2; i <= 3; i++ {
			ts.doJSON(t, http.StatusCreated, "POST", "/projects", alice, map[string]any{
				"name": fmt.Sprintf("app%d", i), "repoUrl": "https://github.com/acme/app", "framework": "go", "port": 8080,
			}, nil)
		}
		st, body, _ = ts.do(t, "POST", "/projects", alice, map[string]any{
			"name": "app4", "repoUrl": "https://github.com/acme/app", "framework": "go", "port": 8080})
		if st != http.StatusForbidden || !strings.Contains(string(body), "maxProjects quota reached: 3 of 3 projects used on plan free") {
			t.Fatalf("4th project: %d %s", st, body)
		}
		// A plan above the account plan is refused; after an upgrade it is allowed.
		settings["planName"] = "pro"
		if st, b, _ := ts.do(t, "PATCH", "/projects/"+p1.ID+"/settings", alice, settings); st != http.StatusForbidden {
			t.Fatalf("pro on free: %d %s", st, b)
		}
		ts.doJSON(t, http.StatusNoContent, "PUT", "/plans/"+byName["pro"].ID+"/accounts/"+me.ID, admin, nil, nil)
		var up e2eProject
		ts.doJSON(t, http.StatusOK, "PATCH", "/projects/"+p1.ID+"/settings", alice, settings, &up)
		if up.PlanName != "pro" || len(up.EnvVars) != 2 || up.EnvVars[0].Value != "********" {
			t.Fatalf("after upgrade: %+v", up)
		}
		info, _ = ts.App.Projects.ProjectForDeploy(t.Context(), p1.ID)
		if info.Env[0].Value != secretVal || info.PlanName != "pro" || !info.PriorityBuilds {
			t.Fatalf("masked secret not kept or plan limits wrong: %+v", info)
		}
		// A plan in use cannot be deleted.
		if st, b, _ := ts.do(t, "DELETE", "/plans/"+byName["pro"].ID, admin, nil); st != http.StatusConflict {
			t.Fatalf("delete plan in use: %d %s", st, b)
		}
		var usage struct {
			Plan     struct{ Name string }
			Projects struct{ Used, Limit int }
		}
		ts.doJSON(t, http.StatusOK, "GET", "/usage", alice, nil, &usage)
		if usage.Plan.Name != "pro" || usage.Projects.Used != 3 || usage.Projects.Limit != 50 {
			t.Fatalf("usage: %+v", usage)
		}

		// Deletion: 202, background teardown, DELETED, gone elsewhere.
		var del struct{ ID, Status string }
		ts.doJSON(t, http.StatusAccepted, "DELETE", "/projects/"+p1.ID, alice, nil, &del)
		if del.ID != p1.ID || del.Status != "DELETING" {
			t.Fatalf("delete: %+v", del)
		}
		platformtest.Eventually(t, 30*time.Second, "project DELETED", func() bool {
			var s struct{ Status string }
			ts.doJSON(t, http.StatusOK, "GET", "/projects/"+p1.ID+"/delete-status", alice, nil, &s)
			return s.Status == "DELETED"
		})
		if st, _, _ := ts.do(t, "GET", "/projects/"+p1.ID, alice, nil); st != http.StatusNotFound {
			t.Fatalf("deleted project: %d", st)
		}
		// No longer in use: the plan may go now.
		ts.doJSON(t, http.StatusOK, "DELETE", "/plans/"+byName["enterprise"].ID, admin, nil, nil)

		// Restart over the same database: data survives, plans are not re-seeded.
		cfg := ts.App.Cfg
		ts.stop()
		ts2 := startServerWith(t, cfg, nil)
		var after []e2ePlan
		ts2.doJSON(t, http.StatusOK, "GET", "/plans", "", nil, &after)
		names := []string{}
		for _, p := range after {
			names = append(names, p.Name)
		}
		if strings.Join(names, ",") != "free,starter,hobby,pro" {
			t.Fatalf("plans after restart: %v", names)
		}
		var list []e2eProject
		ts2.doJSON(t, http.StatusOK, "GET", "/projects", alice, nil, &list)
		if len(list) != 2 {
			t.Fatalf("projects after restart: %+v", list)
		}
		var s struct{ Status string }
		ts2.doJSON(t, http.StatusOK, "GET", "/projects/"+p1.ID+"/delete-status", alice, nil, &s)
		if s.Status != "DELETED" {
			t.Fatalf("delete-status after restart: %+v", s)
		}
	})
}
