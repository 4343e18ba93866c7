package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/codehost/githubfake"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

// codehostTeam is a team on the pro plan with Alice (admin), who linked
// acme's installation 900 and created the team's project on acme's private
// repository acme/secret, and Bob (developer), who deploys it by hand.
type codehostTeam struct {
	h                 *codehostHarness
	ts                *testServer
	team, project     string
	owner, alice, bob string // tokens
	aliceID           string
}

func newCodehostTeam(t *testing.T, dbURL string) *codehostTeam {
	t.Helper()
	h := newCodehostHarness(t, "acme", "secret", "<h1>acme's secret</h1>\n")
	secret := &githubfake.Repository{ID: 9100, Owner: "acme", Name: "secret", Private: true, DefaultBranch: "main"}
	h.fake.AddInstallation(githubfake.Installation{ID: 900, Account: "acme", AccountType: "Organization",
		Members: []string{"alice-gh"}, Repositories: []*githubfake.Repository{secret}})
	h.addUser(7000, "alice-gh")
	ts := h.start(t, dbURL)
	c := &codehostTeam{h: h, ts: ts, owner: ts.signupVerified(t, "owner@team.example.com"),
		alice: ts.signupVerified(t, "alice@team.example.com"), bob: ts.signupVerified(t, "bob@team.example.com")}
	c.aliceID = ownerOf(t, ts, c.alice)
	var team struct{ ID string }
	ts.doJSON(t, http.StatusCreated, "POST", "/teams", c.owner, map[string]any{"name": "acme ops"}, &team)
	c.team = team.ID
	var plans []struct{ ID, Name string }
	ts.doJSON(t, http.StatusOK, "GET", "/plans", "", nil, &plans)
	for _, p := range plans {
		if p.Name == "pro" {
			ts.doJSON(t, http.StatusNoContent, "PUT", "/plans/"+p.ID+"/teams/"+c.team, ts.signup(t, "admin@example.com"), nil, nil)
		}
	}
	for who, role := range map[string]string{"alice": "admin", "bob": "developer"} {
		email := who + "@team.example.com"
		ts.doJSON(t, http.StatusCreated, "POST", "/teams/"+c.team+"/invitations", c.owner, map[string]any{"email": email, "role": role}, nil)
		tok := map[string]string{"alice": c.alice, "bob": c.bob}[who]
		ts.doJSON(t, http.StatusOK, "POST", "/invitations/accept", tok, map[string]any{"token": loggedLink(t, ts.Logs, email, "/invite?token=")}, nil)
	}
	if _, loc := h.connect(t, ts, c.alice, "alice-gh", "900"); !strings.HasSuffix(loc, "codehost=connected") {
		t.Fatalf("alice's install: %s", loc)
	}
	var p struct{ ID, TeamID string }
	ts.doJSON(t, http.StatusCreated, "POST", "/projects", c.alice, map[string]any{"name": "site", "teamId": c.team,
		"repoUrl": h.gs.URL + "/acme/secret.git", "framework": "static", "port": 8080}, &p)
	if p.TeamID != c.team {
		t.Fatalf("project's teamId %q", p.TeamID)
	}
	c.project = p.ID
	return c
}

// deployments counts the project's stored deployments.
func (c *codehostTeam) deployments(t *testing.T) int {
	t.Helper()
	n, err := c.ts.App.DB.NewSelect().Table("deployments").Where("project_id = ?", c.project).Count(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return int(n)
}

// bobDeploysThroughAlice: while Alice may deploy the project, Bob's manual
// deployment clones acme/secret with a token of Alice's installation.
func (c *codehostTeam) bobDeploysThroughAlice(t *testing.T) string {
	t.Helper()
	var dep struct{ DeploymentID string }
	c.ts.doJSON(t, http.StatusCreated, "POST", "/deployments", c.bob, map[string]string{"projectId": c.project}, &dep)
	var st struct{ Status string }
	platformtest.Eventually(t, 2*time.Minute, "Bob's deployment to end", func() bool {
		c.ts.doJSON(t, http.StatusOK, "GET", "/deployments/"+dep.DeploymentID+"/status", c.bob, nil, &st)
		return st.Status == "FAILED" || st.Status == "LIVE" || st.Status == "CANCELLED"
	})
	if c.h.gs.authOK.Load() == 0 {
		t.Fatalf("Bob's deployment (%s) never cloned with a token of Alice's installation", st.Status)
	}
	return dep.DeploymentID
}

// expectRefused: Bob's deployment and his redeployment of depID are refused
// before anything is queued, naming the problem and the way out, and
// nothing clones with a token of Alice's installation.
func (c *codehostTeam) expectRefused(t *testing.T, what, depID string) {
	t.Helper()
	deps, clones, mints := c.deployments(t), c.h.gs.authOK.Load(), c.h.fake.TokenMints(900)
	for _, path := range []string{"/deployments", "/deployments/" + depID + "/redeploy"} {
		status, body, _ := c.ts.do(t, "POST", path, c.bob, map[string]string{"projectId": c.project})
		if status != http.StatusConflict || !strings.Contains(string(body), "CODEHOST_LINK_MEMBER_CANNOT_DEPLOY") ||
			!strings.Contains(string(body), "no longer allowed to deploy") || !strings.Contains(string(body), "/transfer") {
			t.Fatalf("%s: Bob's POST %s: %d %s", what, path, status, body)
		}
	}
	time.Sleep(2 * time.Second) // a deployment queued anyhow would have cloned by now
	if n := c.deployments(t); n != deps {
		t.Fatalf("%s: %d deployment(s) stored", what, n-deps)
	}
	if n := c.h.gs.authOK.Load(); n != clones {
		t.Fatalf("%s: %d clone request(s) with a token of Alice's installation", what, n-clones)
	}
	if n := c.h.fake.TokenMints(900); n != mints {
		t.Fatalf("%s: Alice's installation minted %d token(s)", what, n-mints)
	}
}

// TestCodehostTeamLinkDemotedE2E: a team project's clone credentials are
// those of the member who created it, only while that member may deploy it.
// Demoted below developer, Alice's installation no longer clones for Bob's
// manual deployments; they are refused before anything is queued.
func TestCodehostTeamLinkDemotedE2E(t *testing.T) {
	eachDB(t, func(t *testing.T, dbURL string) {
		c := newCodehostTeam(t, dbURL)
		dep := c.bobDeploysThroughAlice(t)
		c.ts.doJSON(t, http.StatusOK, "PATCH", "/teams/"+c.team+"/members/"+c.aliceID, c.owner, map[string]any{"role": "viewer"}, nil)
		c.expectRefused(t, "Alice demoted to viewer", dep)
	})
}

// TestCodehostTeamLinkRemovedE2E: the same once Alice is removed from the
// team.
func TestCodehostTeamLinkRemovedE2E(t *testing.T) {
	eachDB(t, func(t *testing.T, dbURL string) {
		c := newCodehostTeam(t, dbURL)
		dep := c.bobDeploysThroughAlice(t)
		c.ts.doJSON(t, http.StatusNoContent, "DELETE", "/teams/"+c.team+"/members/"+c.aliceID, c.owner, nil, nil)
		c.expectRefused(t, "Alice removed", dep)
	})
}
