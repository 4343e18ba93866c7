package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform/platformtest"
)

// Instant rollback (issue 29): POST /deployments/{id}/rollback on a replaced
// deployment starts a new deployment from its kept build, through PROVISION
// and DNS only (BUILD is SKIPPED: nothing cloned or built), and the old
// version answers again. Only the last KEELSON_KEEP_BUILDS replaced builds
// are kept; a rollback to an older one, to a LIVE one or to another user's
// answers 409, 409 and 404, and changes nothing.
func TestRollbackRunsTheKeptBuildAgain(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, dbURL string) {
		ts := startServer(t, dbURL, func(c *Config) { c.KeepBuilds = 1 })
		alice, mallory := ts.signup(t, "alice@example.com"), ts.signup(t, "mallory@example.com")
		work, bare := newRepo(t, goApp("v1"))
		var p struct{ ID, Slug string }
		ts.doJSON(t, http.StatusCreated, "POST", "/projects", alice, map[string]any{
			"name": "Rolled Back", "repoUrl": "file://" + bare, "framework": "go", "port": 8080,
		}, &p)
		ts.doJSON(t, http.StatusOK, "PATCH", "/projects/"+p.ID+"/settings", alice, map[string]any{
			"region": "local", "planName": "free", "envVars": []any{},
			"buildCommand": "echo compiling the app; go build -o app .", "startCommand": "./app",
		}, nil)
		type trigger struct {
			DeploymentID string `json:"deploymentId"`
		}
		live := func(path, version string) string {
			t.Helper()
			var tr trigger
			ts.doJSON(t, http.StatusCreated, "POST", path, alice, map[string]any{"projectId": p.ID}, &tr)
			st, _ := waitDeployment(t, ts, alice, tr.DeploymentID)
			if st.Status != "LIVE" {
				t.Fatalf("%s: %s %q", path, st.Status, st.ErrorMessage)
			}
			if got := appAnswer(ts.Ingress, p.Slug); got != "version "+version {
				t.Fatalf("%s: the app answers %q, want version %s", path, got, version)
			}
			return tr.DeploymentID
		}
		v1 := live("/deployments", "v1")
		commit(t, work, bare, "main", goApp("v2"), "v2")
		v2 := live("/deployments", "v2")

		replaced := func(id string) {
			t.Helper()
			platformtest.Eventually(t, 30*time.Second, id+" to be replaced", func() bool {
				var v struct{ Status string }
				ts.doJSON(t, http.StatusOK, "GET", "/deployments/"+id, alice, nil, &v)
				return v.Status == "CANCELLED"
			})
		}
		replaced(v1)

		// Refusals first: nothing is queued by them.
		count := func() int {
			var list []any
			ts.doJSON(t, http.StatusOK, "GET", "/deployments?projectId="+p.ID, alice, nil, &list)
			return len(list)
		}
		before := count()
		st, body, _ := ts.do(t, "POST", "/deployments/"+v2+"/rollback", alice, nil)
		if st != http.StatusConflict || !strings.Contains(string(body), "is live") {
			t.Fatalf("rollback to the LIVE deployment: %d %s", st, body)
		}
		if st, body, _ := ts.do(t, "POST", "/deployments/"+v1+"/rollback", mallory, nil); st != http.StatusNotFound {
			t.Fatalf("another user's rollback: %d %s", st, body)
		}
		if n := count(); n != before {
			t.Fatalf("refused rollbacks queued deployments: %d then %d", before, n)
		}

		// The rollback: v1's build again, BUILD skipped.
		start := time.Now()
		r1 := live("/deployments/"+v1+"/rollback", "v1")
		t.Logf("rollback to LIVE in %s", time.Since(start).Round(time.Millisecond))
		var d struct {
			Status string
			Steps  []struct{ Name, Status string }
		}
		ts.doJSON(t, http.StatusOK, "GET", "/deployments/"+r1, alice, nil, &d)
		if len(d.Steps) != 3 || d.Steps[0].Name != "BUILD" || d.Steps[0].Status != "SKIPPED" ||
			d.Steps[1].Status != "SUCCEEDED" || d.Steps[2].Status != "SUCCEEDED" {
			t.Fatalf("rollback steps: %+v", d.Steps)
		}
		// The audit log: one row each, the rollback named so, alice the actor.
		for id, action := range map[string]string{v1: "deployment.create", r1: "deployment.rollback"} {
			var rows []auditRow
			for _, r := range auditRows(t, ts) {
				if r.ResourceID == id {
					rows = append(rows, r)
				}
			}
			if len(rows) != 1 || rows[0].Action != action || rows[0].ActorID != ownerOf(t, ts, alice) {
				t.Fatalf("audit rows of %s: %+v, want one %s by alice", id, rows, action)
			}
		}
		logs := logText(t, ts, alice, r1)
		if !strings.Contains(logs, "the build of deployment "+v1+" is used again") || strings.Contains(logs, "compiling the app") ||
			strings.Contains(logs, "built commit") {
			t.Fatalf("the rollback's log:\n%s", logs)
		}

		// Keep 1: r1 replaced v2, whose build is the one kept; v1's is gone
		// (removed just after r1 went LIVE).
		kept := func(id string) bool {
			var v struct{ BuildKept bool }
			ts.doJSON(t, http.StatusOK, "GET", "/deployments/"+id, alice, nil, &v)
			return v.BuildKept
		}
		replaced(v2)
		platformtest.Eventually(t, 30*time.Second, "v1's build to be removed", func() bool { return !kept(v1) })
		if !kept(v2) || kept(r1) {
			t.Fatalf("buildKept: v2 %v (want true), r1 %v (LIVE: want false)", kept(v2), kept(r1))
		}
		st, body, _ = ts.do(t, "POST", "/deployments/"+v1+"/rollback", alice, nil)
		if st != http.StatusConflict || !strings.Contains(string(body), "no longer kept") {
			t.Fatalf("rollback to a pruned build: %d %s", st, body)
		}
		live("/deployments/"+v2+"/rollback", "v2")
	})
}
