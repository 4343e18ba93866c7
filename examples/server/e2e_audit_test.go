package main

import (
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

// auditRow is an audit_events row as the test reads it from the database.
type auditRow struct {
	ID           string    `bun:"id"`
	At           time.Time `bun:"at"`
	ActorID      string    `bun:"actor_id"`
	TokenID      string    `bun:"token_id"`
	Addr         string    `bun:"addr"`
	Action       string    `bun:"action"`
	ResourceType string    `bun:"resource_type"`
	ResourceID   string    `bun:"resource_id"`
	OwnerID      string    `bun:"owner_id"`
	ProjectID    string    `bun:"project_id"`
	Summary      string    `bun:"summary"`
}

// auditRows reads every audit row, oldest first.
func auditRows(t *testing.T, ts *testServer) []auditRow {
	t.Helper()
	var rows []auditRow
	if err := ts.App.DB.NewSelect().Table("audit_events").OrderExpr("at, id").Scan(context.Background(), &rows); err != nil {
		t.Fatal(err)
	}
	return rows
}

// auditSeen is the set of the audit rows' ids now.
func auditSeen(t *testing.T, ts *testServer) map[string]bool {
	t.Helper()
	seen := map[string]bool{}
	for _, r := range auditRows(t, ts) {
		seen[r.ID] = true
	}
	return seen
}

// auditAdded is the audit rows not in seen, oldest first.
func auditAdded(t *testing.T, ts *testServer, seen map[string]bool) []auditRow {
	t.Helper()
	var added []auditRow
	for _, r := range auditRows(t, ts) {
		if !seen[r.ID] {
			added = append(added, r)
		}
	}
	return added
}

// auditStep is one row of the table: who sends which request, the status
// it must answer, and the one audit row it must leave ("" action: none).
type auditStep struct {
	name, who, method, path string
	body                    any
	status                  int
	action, resourceType    string
	resourceID              string // "" skips the check; "*" must be non-empty
	actor                   string // who the row names, when not who (a login: nobody is signed in)
}

// auditWorld is a team with an owner, an admin, a viewer and an outsider.
type auditWorld struct {
	ts                       *testServer
	tokens, ids              map[string]string
	team, planPro, siteAdmin string
}

const auditMarker = "AUDIT-MARKER-s3cr3t-value" // a secret env value no audit row may hold

// run sends s and checks the audit rows it left.
func (w *auditWorld) run(t *testing.T, s auditStep) []byte {
	t.Helper()
	seen := auditSeen(t, w.ts)
	status, body, _ := w.ts.do(t, s.method, s.path, w.tokens[s.who], s.body)
	if status != s.status {
		t.Fatalf("%s: %s %s as %s: %d, want %d: %s", s.name, s.method, s.path, s.who, status, s.status, body)
	}
	added := auditAdded(t, w.ts, seen)
	if s.action == "" {
		if len(added) != 0 {
			t.Fatalf("%s: refused (%d) but left audit rows %+v", s.name, status, added)
		}
		return body
	}
	if len(added) != 1 {
		t.Fatalf("%s: %d audit rows, want exactly 1: %+v", s.name, len(added), added)
	}
	r, actor := added[0], w.ids[cmp.Or(s.actor, s.who)]
	if r.ActorID != actor || r.Action != s.action || r.ResourceType != s.resourceType || r.TokenID != "" {
		t.Fatalf("%s: audit row %+v, want actor %s (%s), action %s, resource type %s", s.name, r, actor, cmp.Or(s.actor, s.who), s.action, s.resourceType)
	}
	if (s.resourceID == "*" && r.ResourceID == "") || (s.resourceID != "" && s.resourceID != "*" && r.ResourceID != s.resourceID) {
		t.Fatalf("%s: resource id %q, want %q", s.name, r.ResourceID, s.resourceID)
	}
	if r.Addr != "127.0.0.1" || r.At.IsZero() || strings.Contains(r.Summary, auditMarker) {
		t.Fatalf("%s: audit row %+v: want address 127.0.0.1, a time, no secret", s.name, r)
	}
	return body
}

func TestAuditLogE2E(t *testing.T) {
	eachDB(t, func(t *testing.T, dbURL string) {
		ts := startServer(t, dbURL, nil)
		w := &auditWorld{ts: ts, tokens: map[string]string{}, ids: map[string]string{}}
		w.siteAdmin = ts.signup(t, "admin@example.com")
		w.tokens["siteadmin"], w.ids["siteadmin"] = w.siteAdmin, ownerOf(t, ts, w.siteAdmin)
		for _, r := range []string{"owner", "admin", "viewer", "outsider"} {
			w.tokens[r] = ts.signupVerified(t, r+"@audit.example.com")
			w.ids[r] = ownerOf(t, ts, w.tokens[r])
		}
		var team struct{ ID string }
		ts.doJSON(t, http.StatusCreated, "POST", "/teams", w.tokens["owner"], map[string]any{"name": "auditors"}, &team)
		w.team = team.ID
		var plans []struct{ ID, Name string }
		ts.doJSON(t, http.StatusOK, "GET", "/plans", "", nil, &plans)
		for _, p := range plans {
			if p.Name == "pro" {
				w.planPro = p.ID
			}
		}
		w.walk(t)
		w.checkReads(t)
	})
}

// walk runs the table of actions: each allowed one leaves exactly one row
// with its actor, each refused one none.
func (w *auditWorld) walk(t *testing.T) {
	ts, team := w.ts, "/teams/"+w.team
	w.run(t, auditStep{name: "plan for the team", who: "siteadmin", method: "PUT", path: "/plans/" + w.planPro + "/teams/" + w.team,
		status: 204, action: "plan.assign", resourceType: "team", resourceID: w.team})
	for _, r := range []string{"admin", "viewer"} {
		w.run(t, auditStep{name: "invite " + r, who: "owner", method: "POST", path: team + "/invitations",
			body: map[string]any{"email": r + "@audit.example.com", "role": r}, status: 201, action: "invitation.create", resourceType: "invitation", resourceID: "*"})
		tok := loggedLink(t, ts.Logs, r+"@audit.example.com", "/invite?token=")
		w.run(t, auditStep{name: "accept " + r, who: r, method: "POST", path: "/invitations/accept", body: map[string]any{"token": tok},
			status: 200, action: "member.join", resourceType: "member", resourceID: w.ids[r]})
	}
	var inv struct{ ID string }
	body := w.run(t, auditStep{name: "invite outsider", who: "admin", method: "POST", path: team + "/invitations",
		body: map[string]any{"email": "someone@audit.example.com", "role": "viewer"}, status: 201, action: "invitation.create", resourceType: "invitation"})
	_ = json.Unmarshal(body, &inv)
	steps := []auditStep{
		{name: "viewer renames", who: "viewer", method: "PATCH", path: team, body: map[string]any{"name": "x"}, status: 403},
		{name: "outsider renames", who: "outsider", method: "PATCH", path: team, body: map[string]any{"name": "x"}, status: 404},
		{name: "rename", who: "owner", method: "PATCH", path: team, body: map[string]any{"name": "auditors 2"}, status: 200,
			action: "team.update", resourceType: "team", resourceID: w.team},
		{name: "viewer revokes", who: "viewer", method: "DELETE", path: team + "/invitations/" + inv.ID, status: 403},
		{name: "revoke", who: "admin", method: "DELETE", path: team + "/invitations/" + inv.ID, status: 204,
			action: "invitation.revoke", resourceType: "invitation", resourceID: inv.ID},
		{name: "viewer promotes self", who: "viewer", method: "PATCH", path: team + "/members/" + w.ids["viewer"], body: map[string]any{"role": "admin"}, status: 403},
		{name: "role", who: "admin", method: "PATCH", path: team + "/members/" + w.ids["viewer"], body: map[string]any{"role": "developer"}, status: 200,
			action: "member.role", resourceType: "member", resourceID: w.ids["viewer"]},
		{name: "role back", who: "owner", method: "PATCH", path: team + "/members/" + w.ids["viewer"], body: map[string]any{"role": "viewer"}, status: 200,
			action: "member.role", resourceType: "member", resourceID: w.ids["viewer"]},
	}
	for _, s := range steps {
		w.run(t, s)
	}
	w.walkProject(t)
	w.walkAccount(t)
	var tok struct{ ID, Token string }
	_ = json.Unmarshal(w.run(t, auditStep{name: "create token", who: "owner", method: "POST", path: "/auth/tokens",
		body:   map[string]any{"name": "ci", "scopes": []string{"deployments:write"}, "teamId": w.team},
		status: 201, action: "token.create", resourceType: "token", resourceID: "*"}), &tok)
	if rows := auditRows(t, w.ts); strings.Contains(rows[len(rows)-1].Summary, tok.Token) || tok.Token == "" {
		t.Fatalf("token.create summary holds the token (or none was made): %q", rows[len(rows)-1].Summary)
	}
	w.run(t, auditStep{name: "revoke token", who: "owner", method: "DELETE", path: "/auth/tokens/" + tok.ID, status: 204,
		action: "token.revoke", resourceType: "token", resourceID: tok.ID})
	w.run(t, auditStep{name: "revoke it again", who: "owner", method: "DELETE", path: "/auth/tokens/" + tok.ID, status: 404})
	w.run(t, auditStep{name: "leave", who: "viewer", method: "POST", path: team + "/leave", status: 204,
		action: "member.leave", resourceType: "member", resourceID: w.ids["viewer"]})
	w.run(t, auditStep{name: "remove", who: "owner", method: "DELETE", path: team + "/members/" + w.ids["admin"], status: 204,
		action: "member.remove", resourceType: "member", resourceID: w.ids["admin"]})
	var other struct{ ID string }
	_ = json.Unmarshal(w.run(t, auditStep{name: "second team", who: "outsider", method: "POST", path: "/teams", body: map[string]any{"name": "tmp"},
		status: 201, action: "team.create", resourceType: "team", resourceID: "*"}), &other)
	w.run(t, auditStep{name: "delete team", who: "outsider", method: "DELETE", path: "/teams/" + other.ID, status: 204,
		action: "team.delete", resourceType: "team", resourceID: other.ID})
}

// walkProject creates, changes, moves and deletes a team project.
func (w *auditWorld) walkProject(t *testing.T) {
	repo, _ := newRepo(t, map[string]string{"go.mod": "module example.com/app\n\ngo 1.21\n", "main.go": "package main\n\nfunc main() {}\n"})
	var p struct{ ID string }
	_ = json.Unmarshal(w.run(t, auditStep{name: "viewer creates project", who: "viewer", method: "POST", path: "/projects",
		body: map[string]any{"name": "audited", "repoUrl": repo, "framework": "go", "port": 8080, "teamId": w.team}, status: 403}), &p)
	_ = json.Unmarshal(w.run(t, auditStep{name: "create project", who: "admin", method: "POST", path: "/projects",
		body:   map[string]any{"name": "audited", "repoUrl": repo, "framework": "go", "port": 8080, "teamId": w.team},
		status: 201, action: "project.create", resourceType: "project", resourceID: "*"}), &p)
	proj := "/projects/" + p.ID
	settings := map[string]any{"region": "local", "planName": "pro", "buildCommand": "sleep 120", "webhookSecret": auditMarker + "-hook",
		"envVars": []any{map[string]any{"key": "API_TOKEN", "value": auditMarker, "isSecret": true}, map[string]any{"key": "PLAIN", "value": "x"}}}
	w.run(t, auditStep{name: "viewer edits settings", who: "viewer", method: "PATCH", path: proj + "/settings", body: settings, status: 403})
	w.run(t, auditStep{name: "outsider edits settings", who: "outsider", method: "PATCH", path: proj + "/settings", body: settings, status: 404})
	w.run(t, auditStep{name: "settings", who: "admin", method: "PATCH", path: proj + "/settings", body: settings, status: 200,
		action: "project.update", resourceType: "project", resourceID: p.ID})
	rows := auditRows(t, w.ts)
	if s := rows[len(rows)-1].Summary; !strings.Contains(s, "API_TOKEN") || !strings.Contains(s, "webhookSecret") {
		t.Fatalf("settings summary %q: want the env var's and the field's names", s)
	}
	w.walkDeployments(t, p.ID)
	w.run(t, auditStep{name: "transfer", who: "owner", method: "POST", path: proj + "/transfer", body: map[string]any{}, status: 200,
		action: "project.transfer", resourceType: "project", resourceID: p.ID})
	w.run(t, auditStep{name: "admin deletes personal project", who: "admin", method: "DELETE", path: proj, status: 404})
	w.run(t, auditStep{name: "delete project", who: "owner", method: "DELETE", path: proj, status: 202,
		action: "project.delete", resourceType: "project", resourceID: p.ID})
}

// walkDeployments deploys, redeploys, cancels and deletes, and adds and
// removes a deploy hook and a custom domain of the team's project.
func (w *auditWorld) walkDeployments(t *testing.T, project string) {
	var d1, d2 struct{ DeploymentID string }
	w.run(t, auditStep{name: "viewer deploys", who: "viewer", method: "POST", path: "/deployments", body: map[string]any{"projectId": project}, status: 403})
	_ = json.Unmarshal(w.run(t, auditStep{name: "deploy", who: "admin", method: "POST", path: "/deployments", body: map[string]any{"projectId": project},
		status: 201, action: "deployment.create", resourceType: "deployment", resourceID: "*"}), &d1)
	_ = json.Unmarshal(w.run(t, auditStep{name: "redeploy", who: "admin", method: "POST", path: "/deployments/" + d1.DeploymentID + "/redeploy",
		status: 201, action: "deployment.redeploy", resourceType: "deployment", resourceID: "*"}), &d2)
	w.run(t, auditStep{name: "viewer cancels", who: "viewer", method: "POST", path: "/deployments/" + d1.DeploymentID + "/cancel", status: 403})
	w.run(t, auditStep{name: "cancel", who: "admin", method: "POST", path: "/deployments/" + d1.DeploymentID + "/cancel", status: 200,
		action: "deployment.cancel", resourceType: "deployment", resourceID: d1.DeploymentID})
	w.run(t, auditStep{name: "delete running deployment", who: "admin", method: "DELETE", path: "/deployments/" + d2.DeploymentID, status: 200,
		action: "deployment.delete", resourceType: "deployment", resourceID: d2.DeploymentID})

	var hook struct{ ID, URL string }
	hooks := "/projects/" + project + "/deploy-hooks"
	w.run(t, auditStep{name: "viewer adds hook", who: "viewer", method: "POST", path: hooks, body: map[string]any{"name": "ci"}, status: 403})
	_ = json.Unmarshal(w.run(t, auditStep{name: "add hook", who: "admin", method: "POST", path: hooks, body: map[string]any{"name": "ci"},
		status: 201, action: "hook.create", resourceType: "hook", resourceID: "*"}), &hook)
	hookURL, err := url.Parse(hook.URL)
	if err != nil {
		t.Fatal(err)
	}
	if rows := auditRows(t, w.ts); strings.Contains(rows[len(rows)-1].Summary, strings.TrimPrefix(hookURL.Path, "/deploy-hooks/")) {
		t.Fatalf("hook summary holds its token: %q", rows[len(rows)-1].Summary)
	}
	var fired struct{ DeploymentID string }
	_ = json.Unmarshal(w.run(t, auditStep{name: "fire hook (nobody signed in: no row)", who: "", method: "POST",
		path: hookURL.Path, status: 201}), &fired)
	w.ts.do(t, "POST", "/deployments/"+fired.DeploymentID+"/cancel", w.tokens["owner"], nil) // its audit row is the cancel's
	w.run(t, auditStep{name: "delete hook", who: "admin", method: "DELETE", path: hooks + "/" + hook.ID, status: 204,
		action: "hook.delete", resourceType: "hook", resourceID: hook.ID})

	var dom struct{ ID string }
	doms := "/projects/" + project + "/domains"
	w.run(t, auditStep{name: "viewer adds domain", who: "viewer", method: "POST", path: doms, body: map[string]any{"hostname": "audit.example.com"}, status: 403})
	_ = json.Unmarshal(w.run(t, auditStep{name: "add domain", who: "admin", method: "POST", path: doms, body: map[string]any{"hostname": "audit.example.com"},
		status: 201, action: "domain.create", resourceType: "domain", resourceID: "*"}), &dom)
	w.run(t, auditStep{name: "delete domain", who: "admin", method: "DELETE", path: doms + "/" + dom.ID, status: 204,
		action: "domain.delete", resourceType: "domain", resourceID: dom.ID})
}

// walkAccount: logins and the account changes of auth, as the outsider.
func (w *auditWorld) walkAccount(t *testing.T) {
	const email, pw = "outsider@audit.example.com", "correct horse battery"
	me := "/auth/me"
	w.run(t, auditStep{name: "bad login", method: "POST", path: "/auth/login", body: map[string]any{"email": email, "password": "wrong password"}, status: 401})
	w.run(t, auditStep{name: "profile", who: "outsider", method: "PATCH", path: me, body: map[string]any{"name": "Out Sider"}, status: 200,
		action: "account.update", resourceType: "account", resourceID: w.ids["outsider"]})
	var setup struct{ Secret string }
	w.ts.doJSON(t, http.StatusOK, "POST", "/auth/2fa/setup", w.tokens["outsider"], nil, &setup)
	var enabled struct{ RecoveryCodes []string }
	_ = json.Unmarshal(w.run(t, auditStep{name: "2fa on", who: "outsider", method: "POST", path: "/auth/2fa/verify",
		body: map[string]any{"code": totpAt(t, setup.Secret, time.Now())}, status: 200,
		action: "account.2fa_enable", resourceType: "account", resourceID: w.ids["outsider"]}), &enabled)
	w.run(t, auditStep{name: "2fa off, wrong code", who: "outsider", method: "POST", path: "/auth/2fa/disable", body: map[string]any{"code": "000000"}, status: 400})
	w.run(t, auditStep{name: "2fa off", who: "outsider", method: "POST", path: "/auth/2fa/disable", body: map[string]any{"code": enabled.RecoveryCodes[0]},
		status: 200, action: "account.2fa_disable", resourceType: "account", resourceID: w.ids["outsider"]})
	w.run(t, auditStep{name: "forgot password", method: "POST", path: "/auth/forgot-password", body: map[string]any{"email": email}, status: 200})
	tok := loggedLink(t, w.ts.Logs, email, "/reset-password?token=")
	w.run(t, auditStep{name: "reset password", actor: "outsider", method: "POST", path: "/auth/reset-password",
		body: map[string]any{"token": tok, "newPassword": pw + "!", "confirmPassword": pw + "!"}, status: 200,
		action: "account.password_reset", resourceType: "account", resourceID: w.ids["outsider"]})
	var login struct{ AccessToken string }
	_ = json.Unmarshal(w.run(t, auditStep{name: "login", actor: "outsider", method: "POST", path: "/auth/login",
		body: map[string]any{"email": email, "password": pw + "!"}, status: 200,
		action: "account.login", resourceType: "account", resourceID: w.ids["outsider"]}), &login)
	w.tokens["outsider"] = login.AccessToken
}

// auditPage is one page of an audit-log route.
func (w *auditWorld) auditPage(t *testing.T, who, path string) ([]map[string]any, string) {
	t.Helper()
	status, body, hdr := w.ts.do(t, "GET", path, w.tokens[who], nil)
	if status != http.StatusOK {
		t.Fatalf("GET %s as %s: %d %s", path, who, status, body)
	}
	if strings.Contains(string(body), auditMarker) {
		t.Fatalf("GET %s holds the secret value: %s", path, body)
	}
	var out []map[string]any
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatal(err)
	}
	return out, hdr.Get("X-Next-Cursor")
}

// all pages through path (limit 3) and answers every event id, in order.
func (w *auditWorld) all(t *testing.T, who, path string) (ids, actions []string) {
	t.Helper()
	cursor := ""
	for range 100 {
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		page, next := w.auditPage(t, who, path+sep+"limit=3&cursor="+url.QueryEscape(cursor))
		for _, e := range page {
			ids = append(ids, e["id"].(string))
			actions = append(actions, e["action"].(string))
		}
		if next == "" {
			return ids, actions
		}
		cursor = next
	}
	t.Fatalf("%s: more than 100 pages", path)
	return nil, nil
}

// checkReads: who may read which log, paging, filters, no secret.
func (w *auditWorld) checkReads(t *testing.T) {
	team := "/teams/" + w.team + "/audit-log"
	for who, want := range map[string]int{"outsider": 404, "admin": 404 /* removed */, "viewer": 404 /* left */} {
		if s, _, _ := w.ts.do(t, "GET", team, w.tokens[who], nil); s != want {
			t.Fatalf("GET %s as %s: %d, want %d", team, who, s, want)
		}
	}
	// A viewer of the team: 403.
	var inv struct{ ID string }
	w.ts.doJSON(t, 201, "POST", "/teams/"+w.team+"/invitations", w.tokens["owner"], map[string]any{"email": "viewer@audit.example.com", "role": "viewer"}, &inv)
	tok := loggedLink(t, w.ts.Logs, "viewer@audit.example.com", "/invite?token=")
	w.ts.doJSON(t, 200, "POST", "/invitations/accept", w.tokens["viewer"], map[string]any{"token": tok}, nil)
	if s, body, _ := w.ts.do(t, "GET", team, w.tokens["viewer"], nil); s != 403 || !strings.Contains(string(body), "audit:read") {
		t.Fatalf("GET %s as viewer: %d %s, want 403 naming audit:read", team, s, body)
	}
	if s, _, _ := w.ts.do(t, "GET", team+"?action=Project", w.tokens["owner"], nil); s != 422 && s != 400 {
		t.Fatalf("bad action filter: %d, want 4xx", s)
	}
	var want []string
	for _, r := range slices.Backward(auditRows(t, w.ts)) {
		if r.OwnerID == w.team {
			want = append(want, r.ID)
		}
	}
	ids, _ := w.all(t, "owner", team)
	if !slices.Equal(ids, want) {
		t.Fatalf("team log paged: %d ids %v\nwant %d %v", len(ids), ids, len(want), want)
	}
	_, actions := w.all(t, "owner", team+"?action=member.role")
	if len(actions) != 2 || actions[0] != "member.role" {
		t.Fatalf("action filter: %v", actions)
	}
	_, actions = w.all(t, "owner", team+"?resourceType=invitation")
	for _, a := range actions {
		if !strings.HasPrefix(a, "invitation.") {
			t.Fatalf("resourceType filter: %v", actions)
		}
	}
	// The outsider's own log: their own actions only.
	want = nil
	for _, r := range slices.Backward(auditRows(t, w.ts)) {
		if r.ActorID == w.ids["outsider"] || r.OwnerID == w.ids["outsider"] {
			want = append(want, r.ID)
		}
	}
	if ids, _ := w.all(t, "outsider", "/auth/audit-log"); len(want) == 0 || !slices.Equal(ids, want) {
		t.Fatalf("outsider's log %v, want %v", ids, want)
	}
	_, actions = w.all(t, "owner", "/auth/audit-log")
	if !slices.Contains(actions, "project.delete") || !slices.Contains(actions, "team.update") {
		t.Fatalf("owner's log: %v", actions)
	}
}
