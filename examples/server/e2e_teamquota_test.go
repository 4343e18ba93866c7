package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform/platformtest"
)

// quotaWorld is one FREE user (maxProjects 3), the platform ADMIN and the
// pro plan's id, for TestTeamProjectQuotaE2E.
type quotaWorld struct {
	ts           *testServer
	admin, alice string
	pro          string
	seq          int
}

// create posts a project of the user (teamID "" for a personal one) and
// answers the status, the body and the new project's id.
func (w *quotaWorld) create(t *testing.T, teamID string) (int, string, string) {
	t.Helper()
	w.seq++
	body := map[string]any{"name": fmt.Sprintf("app%d", w.seq), "repoUrl": "https://github.com/acme/app",
		"framework": "go", "port": 8080}
	if teamID != "" {
		body["teamId"] = teamID
	}
	st, raw, _ := w.ts.do(t, "POST", "/projects", w.alice, body)
	var p e2eProject
	if st == http.StatusCreated {
		if err := json.Unmarshal(raw, &p); err != nil {
			t.Fatal(err)
		}
	}
	return st, string(raw), p.ID
}

// mustCreate creates a project and fails unless it is created.
func (w *quotaWorld) mustCreate(t *testing.T, teamID, what string) string {
	t.Helper()
	st, body, id := w.create(t, teamID)
	if st != http.StatusCreated {
		t.Fatalf("%s: %d %s", what, st, body)
	}
	return id
}

// refused fails unless a create (teamID "" for a personal one) is the 403
// QUOTA_EXCEEDED naming 3 of 3 on plan free.
func (w *quotaWorld) refused(t *testing.T, teamID, what string) {
	t.Helper()
	st, body, _ := w.create(t, teamID)
	if st != http.StatusForbidden || !strings.Contains(body, "QUOTA_EXCEEDED") ||
		!strings.Contains(body, "maxProjects quota reached: 3 of 3 projects used on plan free") {
		t.Fatalf("%s: %d %s, want 403 QUOTA_EXCEEDED 3 of 3 on free", what, st, body)
	}
}

func (w *quotaWorld) team(t *testing.T, name string) string {
	t.Helper()
	var team struct{ ID string }
	w.ts.doJSON(t, http.StatusCreated, "POST", "/teams", w.alice, map[string]any{"name": name}, &team)
	return team.ID
}

func (w *quotaWorld) transfer(t *testing.T, id, teamID string) {
	t.Helper()
	w.ts.doJSON(t, http.StatusOK, "POST", "/projects/"+id+"/transfer", w.alice, map[string]any{"teamId": teamID}, nil)
}

func (w *quotaWorld) remove(t *testing.T, id string) {
	t.Helper()
	w.ts.doJSON(t, http.StatusAccepted, "DELETE", "/projects/"+id, w.alice, nil, nil)
	platformtest.Eventually(t, 30*time.Second, "project DELETED", func() bool {
		var s struct{ Status string }
		w.ts.doJSON(t, http.StatusOK, "GET", "/projects/"+id+"/delete-status", w.alice, nil, &s)
		return s.Status == "DELETED"
	})
}

// used is GET /usage's projects.used of the user, checked against limit 3.
func (w *quotaWorld) used(t *testing.T) int {
	t.Helper()
	var u struct{ Projects struct{ Used, Limit int } }
	w.ts.doJSON(t, http.StatusOK, "GET", "/usage", w.alice, nil, &u)
	if u.Projects.Limit != 3 {
		t.Fatalf("usage limit %d, want 3", u.Projects.Limit)
	}
	return u.Projects.Used
}

// TestTeamProjectQuotaE2E: a team without a plan of its own borrows its
// first owner's plan and with it their maxProjects, so the projects of the
// owner's account and of every such team count together; a team given its
// own plan counts on its own. (Before, each team had a counter of its own:
// a FREE user held 3 projects per team they created.)
func TestTeamProjectQuotaE2E(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, dbURL string) {
		ts := startServer(t, dbURL, nil)
		w := &quotaWorld{ts: ts, admin: ts.signup(t, "admin@example.com"), alice: ts.signup(t, "alice@example.com")}
		var ps []e2ePlan
		ts.doJSON(t, http.StatusOK, "GET", "/plans", "", nil, &ps)
		for _, p := range ps {
			if p.Name == "pro" {
				w.pro = p.ID
			}
		}
		mine := []string{w.mustCreate(t, "", "personal 1"), w.mustCreate(t, "", "personal 2"), w.mustCreate(t, "", "personal 3")}
		one, two := w.team(t, "one"), w.team(t, "two")
		w.refused(t, one, "a team project over the owner's quota")
		w.refused(t, two, "a project in a second team")
		if u := w.used(t); u != 3 {
			t.Fatalf("usage at the limit: %d used", u)
		}

		// Deleting a personal project frees a slot the team may use.
		w.remove(t, mine[0])
		inOne := w.mustCreate(t, one, "a team project in the freed slot")
		w.refused(t, "", "a personal project once the team took the slot")
		w.refused(t, two, "a project in the other team")
		if u := w.used(t); u != 3 {
			t.Fatalf("usage with a team project: %d used, want 3 (2 personal, 1 in the team)", u)
		}

		// A transfer between the account and a borrowing team moves no slot:
		// allowed at the limit, and it frees none.
		w.transfer(t, mine[1], one)
		w.refused(t, "", "a personal project after moving one into the team")
		w.transfer(t, mine[1], "")
		w.refused(t, one, "a team project after moving one out")

		checkOwnPlanTeam(t, w, two, inOne, one)
	})
}

// checkOwnPlanTeam: a team given its own plan by an ADMIN counts on its own;
// a project moved into it frees its slot in the owner's count; a project
// created while its team borrowed gives its slot back to the owner even after
// the team got a plan of its own.
func checkOwnPlanTeam(t *testing.T, w *quotaWorld, two, inOne, one string) {
	w.ts.doJSON(t, http.StatusNoContent, "PUT", "/plans/"+w.pro+"/teams/"+two, w.admin, nil, nil)
	w.mustCreate(t, two, "a project in a team with its own plan")
	if u := w.used(t); u != 3 {
		t.Fatalf("usage after a project in the team with its own plan: %d used, want 3", u)
	}
	w.transfer(t, inOne, two)
	if u := w.used(t); u != 2 {
		t.Fatalf("usage after moving a project to the team with its own plan: %d used, want 2", u)
	}
	last := w.mustCreate(t, one, "a team project in the slot the move freed")
	w.ts.doJSON(t, http.StatusNoContent, "PUT", "/plans/"+w.pro+"/teams/"+one, w.admin, nil, nil)
	w.remove(t, last)
	w.mustCreate(t, "", "a personal project in the slot the deleted team project gave back")
	w.refused(t, "", "a personal project over the quota at the end")
}
