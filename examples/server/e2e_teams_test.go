package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/keelson-dev/keelson/projects/domains/dnstest"
)

// teamWorld is a team with one member of each role and an outsider, on a
// real server: the team (on plan pro), a project of the team whose builds
// sleep (so deployments stay cancellable) and one deployment of it.
type teamWorld struct {
	ts                              *testServer
	admin                           string // the site ADMIN
	team, project, deployment, repo string
	tokens                          map[string]string // by role, and "outsider"
	emails                          map[string]string
	ids                             map[string]string // user ids by role
	auditMark                       map[string]bool   // audit rows before the last tryRoute's request
	lastMethod                      string            // and its method
	seq                             atomic.Int64
	ownerTok                        string
	planPro                         string
}

var teamRoles = []string{"viewer", "developer", "admin", "owner"}

func roleRank(r string) int { return slices.Index(teamRoles, r) }

// signupVerified signs email up and verifies it by the logged link.
func (ts *testServer) signupVerified(t *testing.T, email string) string {
	t.Helper()
	tok := ts.signup(t, email)
	if !slices.Contains(ts.App.Cfg.AdminEmails, email) { // signup verified those
		ts.doJSON(t, http.StatusOK, "POST", "/auth/verify-email", "", map[string]any{
			"token": loggedLink(t, ts.Logs, email, "/verify-email?token=")}, nil)
	}
	return tok
}

func (w *teamWorld) next() int64 { return w.seq.Add(1) }

// newTeamWorld builds the world; it also checks the FREE plan's gate, the
// plan assignment and invitations accepted by the wrong account.
func newTeamWorld(t *testing.T, ts *testServer) *teamWorld {
	w := &teamWorld{ts: ts, tokens: map[string]string{}, emails: map[string]string{}, ids: map[string]string{}}
	w.admin = ts.signup(t, "admin@example.com")
	for _, r := range append(slices.Clone(teamRoles), "outsider") {
		w.emails[r] = r + "@team.example.com"
		w.tokens[r] = ts.signupVerified(t, w.emails[r])
		w.ids[r] = ownerOf(t, ts, w.tokens[r])
	}
	w.ownerTok = w.tokens["owner"]
	var team struct{ ID, Role string }
	ts.doJSON(t, http.StatusCreated, "POST", "/teams", w.ownerTok, map[string]any{"name": "night shift"}, &team)
	if team.Role != "owner" {
		t.Fatalf("creator's role %q", team.Role)
	}
	w.team = team.ID

	// A FREE team cannot add a second member: 403 naming the plan, nothing stored.
	status, body, _ := ts.do(t, "POST", "/teams/"+w.team+"/invitations", w.ownerTok, map[string]any{"email": w.emails["viewer"], "role": "viewer"})
	if status != http.StatusForbidden || !strings.Contains(string(body), "plan free does not include team members") {
		t.Fatalf("FREE team invitation: %d %s", status, body)
	}
	w.expectIDs(t, "/teams/"+w.team+"/invitations", nil)

	var plans []struct{ ID, Name string }
	ts.doJSON(t, http.StatusOK, "GET", "/plans", "", nil, &plans)
	for _, p := range plans {
		if p.Name == "pro" {
			w.planPro = p.ID
		}
	}
	if s, _, _ := ts.do(t, "PUT", "/plans/"+w.planPro+"/teams/"+w.ids["owner"], w.admin, nil); s != http.StatusNotFound {
		t.Fatalf("plan for a user id as a team: %d, want 404", s)
	}
	if s, _, _ := ts.do(t, "PUT", "/plans/"+w.planPro+"/teams/"+w.team, w.ownerTok, nil); s != http.StatusForbidden {
		t.Fatalf("team owner assigns a plan: %d, want 403 (ADMIN only)", s)
	}
	ts.doJSON(t, http.StatusNoContent, "PUT", "/plans/"+w.planPro+"/teams/"+w.team, w.admin, nil, nil)

	for _, r := range []string{"viewer", "developer", "admin"} {
		tok := w.invite(t, w.ownerTok, r, r)
		if r == "developer" {
			// Accepted by the wrong account (verified, signed in): refused, and the invitation still works.
			status, body, _ := ts.do(t, "POST", "/invitations/accept", w.tokens["outsider"], map[string]any{"token": tok})
			if status != http.StatusForbidden || !strings.Contains(string(body), "INVITATION_NOT_YOURS") {
				t.Fatalf("wrong account accepts: %d %s", status, body)
			}
		}
		var joined struct{ ID, Role string }
		ts.doJSON(t, http.StatusOK, "POST", "/invitations/accept", w.tokens[r], map[string]any{"token": tok}, &joined)
		if joined.ID != w.team || joined.Role != r {
			t.Fatalf("accepted as %s: %+v", r, joined)
		}
		waitMail(t, ts, w.emails[r], "You joined team night shift")
		// Single use.
		if s, _, _ := ts.do(t, "POST", "/invitations/accept", w.tokens[r], map[string]any{"token": tok}); s != http.StatusNotFound {
			t.Fatalf("invitation used twice: %d", s)
		}
	}
	if s, _, _ := ts.do(t, "GET", "/teams/"+w.team, w.tokens["outsider"], nil); s != http.StatusNotFound {
		t.Fatalf("outsider reads the team: %d", s)
	}

	w.repo, _ = newRepo(t, map[string]string{"go.mod": "module example.com/app\n\ngo 1.21\n", "main.go": "package main\n\nfunc main() {}\n"})
	w.project = w.newProject(t)
	w.deployment = w.deploy(t)
	return w
}

// invite invites role's account with role as inviter and answers the mailed token.
func (w *teamWorld) invite(t *testing.T, inviter, who, role string) string {
	t.Helper()
	var inv struct{ ID, Email, Role string }
	w.ts.doJSON(t, http.StatusCreated, "POST", "/teams/"+w.team+"/invitations", inviter, map[string]any{"email": strings.ToUpper(w.emails[who]), "role": role}, &inv)
	if inv.Email != w.emails[who] || inv.Role != role {
		t.Fatalf("invitation: %+v", inv)
	}
	return loggedLink(t, w.ts.Logs, w.emails[who], "/invite?token=")
}

// newProject creates a project of the team (as its owner) whose builds sleep.
func (w *teamWorld) newProject(t *testing.T) string {
	t.Helper()
	var p struct{ ID, TeamID string }
	w.ts.doJSON(t, http.StatusCreated, "POST", "/projects", w.ownerTok, map[string]any{"name": fmt.Sprintf("shared-%d", w.next()),
		"repoUrl": w.repo, "framework": "go", "port": 8080, "teamId": w.team}, &p)
	if p.TeamID != w.team {
		t.Fatalf("project's teamId %q", p.TeamID)
	}
	w.ts.doJSON(t, http.StatusOK, "PATCH", "/projects/"+p.ID+"/settings", w.ownerTok, map[string]any{
		"region": "local", "planName": "pro", "buildCommand": "sleep 120",
		"envVars": []any{map[string]any{"key": "API_TOKEN", "value": "secret-value-1234", "isSecret": true}}}, nil)
	return p.ID
}

// deploy starts a deployment of the project as its owner (cancelled when t ends).
func (w *teamWorld) deploy(t *testing.T) string {
	t.Helper()
	var trig struct{ DeploymentID string }
	w.ts.doJSON(t, http.StatusCreated, "POST", "/deployments", w.ownerTok, map[string]any{"projectId": w.project}, &trig)
	t.Cleanup(func() { w.ts.do(t, "POST", "/deployments/"+trig.DeploymentID+"/cancel", w.ownerTok, nil) })
	return trig.DeploymentID
}

func (w *teamWorld) hook(t *testing.T) string {
	var h struct{ ID string }
	w.ts.doJSON(t, http.StatusCreated, "POST", "/projects/"+w.project+"/deploy-hooks", w.ownerTok, map[string]any{"name": "ci"}, &h)
	return h.ID
}

func (w *teamWorld) domain(t *testing.T) string {
	var d struct{ ID string }
	w.ts.doJSON(t, http.StatusCreated, "POST", "/projects/"+w.project+"/domains", w.ownerTok,
		map[string]any{"hostname": fmt.Sprintf("d%d.example.com", w.next())}, &d)
	return d.ID
}

// expectIDs fails unless the list at path (as the owner) holds exactly want's ids.
func (w *teamWorld) expectIDs(t *testing.T, path string, want []string) {
	t.Helper()
	if got := w.ids2(t, path); !slices.Equal(got, want) {
		t.Fatalf("%s: ids %v, want %v", path, got, want)
	}
}

func (w *teamWorld) ids2(t *testing.T, path string) []string {
	t.Helper()
	var items []struct{ ID, Status string }
	w.ts.doJSON(t, http.StatusOK, "GET", path, w.ownerTok, nil, &items)
	var out []string
	for _, it := range items {
		id := it.ID
		if it.Status == "CANCELLED" {
			id += " CANCELLED"
		}
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// snapshot is what the owner sees of the team and the project; a refused
// request must leave it as it was.
func (w *teamWorld) snapshot(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, path := range []string{"/projects/" + w.project, "/teams/" + w.team, "/teams/" + w.team + "/members",
		"/projects/" + w.project + "/domains?limit=100"} { // whole bodies: a refused PATCH changes no field
		_, body, _ := w.ts.do(t, "GET", path, w.ownerTok, nil)
		b.Write(body)
	}
	for _, path := range []string{"/projects?limit=100&status=ACTIVE", "/deployments?limit=100&projectId=" + w.project,
		"/projects/" + w.project + "/deploy-hooks", "/projects/" + w.project + "/domains?limit=100", "/teams/" + w.team + "/invitations"} {
		fmt.Fprintf(&b, "\n%s %v", path, w.ids2(t, path))
	}
	return b.String()
}

// teamRoute is one route of the role table: the least role it needs, and a
// request built afresh for each caller (writes get resources of their own).
type teamRoute struct {
	name, min string
	want      int
	req       func(t *testing.T, w *teamWorld) (method, path string, body any)
}

func settingsBody(w *teamWorld, plan string, secret string) any {
	return map[string]any{"region": "local", "planName": plan, "buildCommand": "sleep 120",
		"envVars": []any{map[string]any{"key": "API_TOKEN", "value": secret, "isSecret": true},
			map[string]any{"key": "MODE", "value": fmt.Sprint("m", w.next())}}}
}

var teamRouteTable = []teamRoute{
	{"read project", "viewer", 200, func(t *testing.T, w *teamWorld) (string, string, any) { return "GET", "/projects/" + w.project, nil }},
	{"delete status", "viewer", 200, func(t *testing.T, w *teamWorld) (string, string, any) {
		return "GET", "/projects/" + w.project + "/delete-status", nil
	}},
	{"list deployments", "viewer", 200, func(t *testing.T, w *teamWorld) (string, string, any) {
		return "GET", "/deployments?projectId=" + w.project, nil
	}},
	{"read deployment", "viewer", 200, func(t *testing.T, w *teamWorld) (string, string, any) {
		return "GET", "/deployments/" + w.deployment, nil
	}},
	{"deployment status", "viewer", 200, func(t *testing.T, w *teamWorld) (string, string, any) {
		return "GET", "/deployments/" + w.deployment + "/status", nil
	}},
	{"log token", "viewer", 201, func(t *testing.T, w *teamWorld) (string, string, any) {
		return "POST", "/deployments/" + w.deployment + "/logs/token", nil
	}},
	{"list hooks", "viewer", 200, func(t *testing.T, w *teamWorld) (string, string, any) {
		return "GET", "/projects/" + w.project + "/deploy-hooks", nil
	}},
	{"list domains", "viewer", 200, func(t *testing.T, w *teamWorld) (string, string, any) {
		return "GET", "/projects/" + w.project + "/domains", nil
	}},
	{"read domain", "viewer", 200, func(t *testing.T, w *teamWorld) (string, string, any) {
		return "GET", "/projects/" + w.project + "/domains/" + w.domain(t), nil
	}},
	{"read team", "viewer", 200, func(t *testing.T, w *teamWorld) (string, string, any) { return "GET", "/teams/" + w.team, nil }},
	{"list members", "viewer", 200, func(t *testing.T, w *teamWorld) (string, string, any) {
		return "GET", "/teams/" + w.team + "/members", nil
	}},
	{"settings", "developer", 200, func(t *testing.T, w *teamWorld) (string, string, any) {
		return "PATCH", "/projects/" + w.project + "/settings", settingsBody(w, w.planOf(t), "********")
	}},
	{"deploy", "developer", 201, func(t *testing.T, w *teamWorld) (string, string, any) {
		return "POST", "/deployments", map[string]any{"projectId": w.project}
	}},
	{"redeploy", "developer", 201, func(t *testing.T, w *teamWorld) (string, string, any) {
		return "POST", "/deployments/" + w.deploy(t) + "/redeploy", nil
	}},
	{"cancel", "developer", 200, func(t *testing.T, w *teamWorld) (string, string, any) {
		return "POST", "/deployments/" + w.deploy(t) + "/cancel", nil
	}},
	{"secret env var", "admin", 200, func(t *testing.T, w *teamWorld) (string, string, any) {
		return "PATCH", "/projects/" + w.project + "/settings", settingsBody(w, w.planOf(t), fmt.Sprintf("new-secret-%06d", w.next()))
	}},
	{"webhook secret", "admin", 200, func(t *testing.T, w *teamWorld) (string, string, any) {
		b := settingsBody(w, w.planOf(t), "********").(map[string]any)
		b["webhookSecret"] = fmt.Sprint("hook-secret-", w.next())
		return "PATCH", "/projects/" + w.project + "/settings", b
	}},
	{"https redirect", "admin", 200, func(t *testing.T, w *teamWorld) (string, string, any) {
		var p struct{ HTTPSRedirect bool }
		w.ts.doJSON(t, http.StatusOK, "GET", "/projects/"+w.project, w.ownerTok, nil, &p)
		b := settingsBody(w, w.planOf(t), "********").(map[string]any)
		b["httpsRedirect"] = !p.HTTPSRedirect
		return "PATCH", "/projects/" + w.project + "/settings", b
	}},
	{"delete deployment", "admin", 200, func(t *testing.T, w *teamWorld) (string, string, any) {
		return "DELETE", "/deployments/" + w.deploy(t), nil
	}},
	{"create hook", "admin", 201, func(t *testing.T, w *teamWorld) (string, string, any) {
		return "POST", "/projects/" + w.project + "/deploy-hooks", map[string]any{"name": "x"}
	}},
	{"delete hook", "admin", 204, func(t *testing.T, w *teamWorld) (string, string, any) {
		return "DELETE", "/projects/" + w.project + "/deploy-hooks/" + w.hook(t), nil
	}},
	{"create domain", "admin", 201, func(t *testing.T, w *teamWorld) (string, string, any) {
		return "POST", "/projects/" + w.project + "/domains", map[string]any{"hostname": fmt.Sprintf("n%d.example.com", w.next())}
	}},
	{"verify domain", "admin", 200, func(t *testing.T, w *teamWorld) (string, string, any) {
		return "POST", "/projects/" + w.project + "/domains/" + w.domain(t) + "/verify", nil
	}},
	{"domain hsts", "admin", 200, func(t *testing.T, w *teamWorld) (string, string, any) {
		return "PATCH", "/projects/" + w.project + "/domains/" + w.domain(t), map[string]any{"hsts": true}
	}},
	{"delete domain", "admin", 204, func(t *testing.T, w *teamWorld) (string, string, any) {
		return "DELETE", "/projects/" + w.project + "/domains/" + w.domain(t), nil
	}},
	{"list invitations", "admin", 200, func(t *testing.T, w *teamWorld) (string, string, any) {
		return "GET", "/teams/" + w.team + "/invitations", nil
	}},
	{"delete project", "admin", 202, func(t *testing.T, w *teamWorld) (string, string, any) {
		return "DELETE", "/projects/" + w.otherProject(t), nil
	}},
	{"transfer project out", "admin", 200, func(t *testing.T, w *teamWorld) (string, string, any) {
		return "POST", "/projects/" + w.otherProject(t) + "/transfer", map[string]any{}
	}},
	{"project plan", "owner", 200, func(t *testing.T, w *teamWorld) (string, string, any) {
		var p struct{ PlanName string }
		w.ts.doJSON(t, http.StatusOK, "GET", "/projects/"+w.project, w.ownerTok, nil, &p)
		return "PATCH", "/projects/" + w.project + "/settings", settingsBody(w, map[string]string{"pro": "starter", "starter": "pro"}[p.PlanName], "********")
	}},
	{"rename team", "owner", 200, func(t *testing.T, w *teamWorld) (string, string, any) {
		return "PATCH", "/teams/" + w.team, map[string]any{"name": "night shift"}
	}},
}

// otherProject is a fresh project of the team (for deletion and transfer).
func (w *teamWorld) otherProject(t *testing.T) string {
	var p struct{ ID string }
	w.ts.doJSON(t, http.StatusCreated, "POST", "/projects", w.ownerTok, map[string]any{"name": fmt.Sprintf("spare-%d", w.next()),
		"repoUrl": w.repo, "framework": "go", "port": 8080, "teamId": w.team}, &p)
	return p.ID
}

// TestTeamsE2E walks the role table on SQLite and Postgres: every route of
// the table answers 2xx to each role that holds it, 403 to a member whose
// role is lower and 404 to a non-member, with what the owner sees unchanged
// after every refusal; then invitations, the last owner and a removed
// member.
func TestTeamsE2E(t *testing.T) {
	dns := dnstest.Start(t)
	eachDB(t, func(t *testing.T, dbURL string) {
		ts := startServer(t, dbURL, func(c *Config) {
			c.DNSResolvers = []string{dns.DNS}
			c.AppsDomain = "apps.example.test"
			c.MaxDomainsPerProject = 100 // the table is walked three times, each domain row adding one per caller
		})
		w := newTeamWorld(t, ts)
		walkTeamTable(t, w, w.tokens, "")
		// The same table with API tokens holding every scope: a token never
		// does more than its creator's role, and a scope it lacks refuses.
		walkTeamTable(t, w, roleAPITokens(t, w), "with an API token")
		checkScopeNarrows(t, w)
		checkTeamCreateRoles(t, w)
		checkInvitations(t, w)
		checkTransferredOut(t, w)
		checkRemovedMember(t, w)
		checkLastOwner(t, w)
	})
}

// planOf is the project's plan as the owner reads it (the table's "project
// plan" route flips it), so a settings update that is not about the plan
// sends it back unchanged.
func (w *teamWorld) planOf(t *testing.T) string {
	var p struct{ PlanName string }
	w.ts.doJSON(t, http.StatusOK, "GET", "/projects/"+w.project, w.ownerTok, nil, &p)
	return p.PlanName
}

// walkTeamTable sends every route of the table as each caller (by role, and
// "outsider"): 2xx to each role that holds it, 403 to a lower one, 404 to
// the outsider, with what the owner sees unchanged after every refusal.
func walkTeamTable(t *testing.T, w *teamWorld, callers map[string]string, how string) {
	for _, r := range teamRouteTable {
		for _, who := range append([]string{"outsider"}, teamRoles...) {
			allowed := who != "outsider" && roleRank(who) >= roleRank(r.min)
			want := r.want
			switch {
			case who == "outsider":
				want = http.StatusNotFound
			case !allowed:
				want = http.StatusForbidden
			}
			w.tryRoute(t, r, callers[who], want, r.name+" as "+who+" "+how)
			// A change allowed leaves exactly one audit row, of its caller
			// (with the token's id for a token); a read or a refusal none.
			w.checkAudit(t, r, who, allowed, how != "")
		}
	}
}

// tryRoute sends route r with token and fails unless it answers want; a
// refusal must leave what the owner sees unchanged.
func (w *teamWorld) tryRoute(t *testing.T, r teamRoute, token string, want int, what string) []byte {
	t.Helper()
	method, path, body := r.req(t, w)
	w.auditMark, w.lastMethod = auditSeen(t, w.ts), method
	before := ""
	if want >= 400 {
		before = w.snapshot(t)
	}
	status, got, _ := w.ts.do(t, method, path, token, body)
	if status != want {
		t.Fatalf("%s (%s %s): %d %s, want %d", what, method, path, status, got, want)
	}
	var trig struct{ DeploymentID string }
	if json.Unmarshal(got, &trig) == nil && trig.DeploymentID != "" {
		t.Cleanup(func() { w.ts.do(t, "POST", "/deployments/"+trig.DeploymentID+"/cancel", w.tokens["admin"], nil) })
	}
	if want >= 400 {
		if after := w.snapshot(t); after != before {
			t.Fatalf("%s was refused but changed what is stored:\nbefore %s\nafter  %s", what, before, after)
		}
	}
	return got
}

// checkAudit checks the audit rows the last tryRoute added: exactly one,
// whose actor is who (and with a token id when byToken), for an allowed
// change; none for a read, the log token or a refusal.
func (w *teamWorld) checkAudit(t *testing.T, r teamRoute, who string, allowed, byToken bool) {
	t.Helper()
	rows, changes := auditAdded(t, w.ts, w.auditMark), allowed && w.lastMethod != "GET" && r.name != "log token"
	ok := len(rows) == 0
	if changes {
		ok = len(rows) == 1 && rows[0].ActorID == w.ids[who] && (rows[0].TokenID != "") == byToken
	}
	if !ok {
		t.Fatalf("%s as %s (token %v): audit rows %+v, want %s", r.name, who, byToken, rows,
			map[bool]string{true: "one of " + w.ids[who], false: "none"}[changes])
	}
}

// checkTeamCreateRoles: creating a project in a team needs admin; a non-member gets 404.
func checkTeamCreateRoles(t *testing.T, w *teamWorld) {
	for who, want := range map[string]int{"outsider": 404, "viewer": 403, "developer": 403, "admin": 201} {
		status, body, _ := w.ts.do(t, "POST", "/projects", w.tokens[who], map[string]any{"name": "by-" + who,
			"repoUrl": w.repo, "framework": "go", "port": 8080, "teamId": w.team})
		if status != want {
			t.Fatalf("create in team as %s: %d %s, want %d", who, status, body, want)
		}
	}
	// A member's project list holds the team's projects; an outsider's does not.
	for who, want := range map[string]bool{"viewer": true, "outsider": false} {
		var ps []struct{ ID string }
		w.ts.doJSON(t, http.StatusOK, "GET", "/projects?limit=100", w.tokens[who], nil, &ps)
		if got := slices.ContainsFunc(ps, func(p struct{ ID string }) bool { return p.ID == w.project }); got != want {
			t.Fatalf("%s lists the team project: %v", who, got)
		}
	}
	if s, body, _ := w.ts.do(t, "DELETE", "/teams/"+w.team, w.ownerTok, nil); s != http.StatusConflict || !strings.Contains(string(body), "still owns") {
		t.Fatalf("delete a team with projects: %d %s", s, body)
	}
}

// checkInvitations: an admin cannot invite an owner; revoked invitations are gone.
func checkInvitations(t *testing.T, w *teamWorld) {
	ts := w.ts
	if s, _, _ := ts.do(t, "POST", "/teams/"+w.team+"/invitations", w.tokens["admin"], map[string]any{"email": "new@team.example.com", "role": "owner"}); s != http.StatusForbidden {
		t.Fatalf("admin invites an owner: %d", s)
	}
	w.emails["late"] = "late@team.example.com"
	late := ts.signupVerified(t, w.emails["late"])
	tok := w.invite(t, w.tokens["admin"], "late", "viewer")
	var invs []struct{ ID string }
	ts.doJSON(t, http.StatusOK, "GET", "/teams/"+w.team+"/invitations", w.tokens["admin"], nil, &invs)
	if len(invs) != 1 {
		t.Fatalf("pending invitations: %+v", invs)
	}
	ts.doJSON(t, http.StatusNoContent, "DELETE", "/teams/"+w.team+"/invitations/"+invs[0].ID, w.tokens["admin"], nil, nil)
	if s, _, _ := ts.do(t, "POST", "/invitations/accept", late, map[string]any{"token": tok}); s != http.StatusNotFound {
		t.Fatalf("revoked invitation accepted: %d", s)
	}
	w.expectIDs(t, "/teams/"+w.team+"/invitations", nil)
}

// checkRemovedMember: a removed member loses the team's projects at once,
// log tokens issued before included, and is told by mail.
func checkRemovedMember(t *testing.T, w *teamWorld) {
	ts, dev := w.ts, w.tokens["developer"]
	var lt struct{ Token string }
	ts.doJSON(t, http.StatusCreated, "POST", "/deployments/"+w.deployment+"/logs/token", dev, nil, &lt)
	ts.doJSON(t, http.StatusOK, "PATCH", "/teams/"+w.team+"/members/"+w.ids["developer"], w.tokens["admin"], map[string]any{"role": "viewer"}, nil)
	waitMail(t, ts, w.emails["developer"], "Your role in team night shift is now viewer")
	if s, _, _ := ts.do(t, "POST", "/deployments", dev, map[string]any{"projectId": w.project}); s != http.StatusForbidden {
		t.Fatalf("demoted member deploys: %d", s)
	}
	ts.doJSON(t, http.StatusNoContent, "DELETE", "/teams/"+w.team+"/members/"+w.ids["developer"], w.tokens["admin"], nil, nil)
	waitMail(t, ts, w.emails["developer"], "You were removed from team night shift")
	for _, path := range []string{"/projects/" + w.project, "/deployments/" + w.deployment, "/teams/" + w.team,
		"/deployments/" + w.deployment + "/logs?token=" + lt.Token, "/projects/" + w.project + "/deploy-hooks"} {
		tok := dev
		if strings.Contains(path, "token=") {
			tok = ""
		}
		if s, body, _ := ts.do(t, "GET", path, tok, nil); s != http.StatusNotFound {
			t.Fatalf("removed member GET %s: %d %s", path, s, body)
		}
	}
	var ps, ds []json.RawMessage
	ts.doJSON(t, http.StatusOK, "GET", "/projects", dev, nil, &ps)
	ts.doJSON(t, http.StatusOK, "GET", "/deployments", dev, nil, &ds)
	if len(ps) != 0 || len(ds) != 0 {
		t.Fatalf("removed member still lists %d projects, %d deployments", len(ps), len(ds))
	}
}

// checkTransferredOut: a project an admin moves out of the team to their
// own account is the team's no more at once, though every member had just
// read it (the projects module keeps the rows it reads in memory): the
// viewer and the team's owner get 404, the admin reads it as theirs.
func checkTransferredOut(t *testing.T, w *teamWorld) {
	p := w.otherProject(t)
	for _, who := range []string{"viewer", "owner", "admin"} {
		for range 2 { // the second read is the kept row's
			w.ts.doJSON(t, http.StatusOK, "GET", "/projects/"+p, w.tokens[who], nil, nil)
		}
	}
	w.ts.doJSON(t, http.StatusOK, "POST", "/projects/"+p+"/transfer", w.tokens["admin"], map[string]any{}, nil)
	for _, who := range []string{"viewer", "owner"} {
		if s, body, _ := w.ts.do(t, "GET", "/projects/"+p, w.tokens[who], nil); s != http.StatusNotFound {
			t.Fatalf("%s reads a project moved out of the team: %d %s", who, s, body)
		}
	}
	var got struct{ TeamID *string }
	w.ts.doJSON(t, http.StatusOK, "GET", "/projects/"+p, w.tokens["admin"], nil, &got)
	if got.TeamID != nil && *got.TeamID != "" {
		t.Fatalf("the moved project still names team %s", *got.TeamID)
	}
}

// checkLastOwner: the last owner can neither leave nor step down; an admin
// cannot touch an owner; ownership moves by making another member owner.
func checkLastOwner(t *testing.T, w *teamWorld) {
	ts, owner := w.ts, w.ownerTok
	team := "/teams/" + w.team
	for _, c := range []struct {
		method, path, tok string
		body              any
		want              int
	}{
		{"POST", team + "/leave", owner, nil, http.StatusConflict},
		{"PATCH", team + "/members/" + w.ids["owner"], owner, map[string]any{"role": "admin"}, http.StatusConflict},
		{"DELETE", team + "/members/" + w.ids["owner"], owner, nil, http.StatusConflict},
		{"DELETE", team + "/members/" + w.ids["owner"], w.tokens["admin"], nil, http.StatusForbidden},
		{"PATCH", team + "/members/" + w.ids["viewer"], w.tokens["admin"], map[string]any{"role": "owner"}, http.StatusForbidden},
		{"PATCH", team, w.tokens["admin"], map[string]any{"name": "mine now"}, http.StatusForbidden},
	} {
		before := w.snapshot(t)
		if s, body, _ := ts.do(t, c.method, c.path, c.tok, c.body); s != c.want {
			t.Fatalf("%s %s: %d %s, want %d", c.method, c.path, s, body, c.want)
		}
		if after := w.snapshot(t); after != before {
			t.Fatalf("%s %s refused but changed:\n%s\n%s", c.method, c.path, before, after)
		}
	}
	ts.doJSON(t, http.StatusOK, "PATCH", team+"/members/"+w.ids["admin"], owner, map[string]any{"role": "owner"}, nil)
	ts.doJSON(t, http.StatusNoContent, "POST", team+"/leave", owner, nil, nil)
	if s, _, _ := ts.do(t, "GET", "/projects/"+w.project, owner, nil); s != http.StatusNotFound {
		t.Fatalf("former owner reads the team's project: %d", s)
	}
	if s, _, _ := ts.do(t, "POST", team+"/leave", w.tokens["admin"], nil); s != http.StatusConflict {
		t.Fatalf("the new last owner leaves: %d", s)
	}
}
