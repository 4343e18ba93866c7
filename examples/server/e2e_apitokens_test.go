package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/platformtest"
	"github.com/keelson-dev/keelson/projects"
)

// apiToken is a token as POST and GET /auth/tokens answer it.
type apiToken struct {
	ID, Token, Prefix, TeamID, LastUsedAddr string
	Scopes                                  []string
	LastUsedAt                              *time.Time
}

var apiTokenRE = regexp.MustCompile(`^kls_[0-9A-Za-z]{50}$`)

// newAPIToken creates a token with session and checks its shape.
func newAPIToken(t *testing.T, ts *testServer, session string, body map[string]any) apiToken {
	t.Helper()
	var tok apiToken
	ts.doJSON(t, http.StatusCreated, "POST", "/auth/tokens", session, body, &tok)
	if !apiTokenRE.MatchString(tok.Token) || !strings.HasPrefix(tok.Token, tok.Prefix) || len(tok.Prefix) != 16 {
		t.Fatalf("token shape: %+v", tok)
	}
	return tok
}

// expect sends a request and fails unless it answers status with a body
// holding each of words.
func expect(t *testing.T, ts *testServer, status int, method, path, token string, body any, words ...string) []byte {
	t.Helper()
	got, b, _ := ts.do(t, method, path, token, body)
	if got != status {
		t.Fatalf("%s %s: %d %s, want %d", method, path, got, b, status)
	}
	for _, w := range words {
		if !strings.Contains(string(b), w) {
			t.Fatalf("%s %s: %s, want it to name %q", method, path, b, w)
		}
	}
	return b
}

// TestAPITokensE2E: on SQLite and Postgres, a developer's token scoped
// deployments:write for team A deploys there and can neither read a
// project of their own team B nor use account routes; scopes, revocation,
// expiry, the per-account cap, a removed member and a deleted creator.
func TestAPITokensE2E(t *testing.T) {
	eachDB(t, func(t *testing.T, dbURL string) {
		ts := startServer(t, dbURL, func(c *Config) {
			c.MaxAPITokens = 8
		})
		w := newTeamWorld(t, ts)
		dev := w.tokens["developer"]
		var teamB struct{ ID string }
		ts.doJSON(t, http.StatusCreated, "POST", "/teams", dev, map[string]any{"name": "side project"}, &teamB)
		var projB struct{ ID string }
		ts.doJSON(t, http.StatusCreated, "POST", "/projects", dev, map[string]any{"name": "side", "repoUrl": w.repo,
			"framework": "go", "port": 8080, "teamId": teamB.ID}, &projB)
		checkTokenCreation(t, w)

		deploy := newAPIToken(t, ts, dev, map[string]any{"name": "CI deploys", "scopes": []string{"deployments:write"}, "teamId": w.team})
		var trig struct{ DeploymentID string }
		ts.doJSON(t, http.StatusCreated, "POST", "/deployments", deploy.Token, map[string]any{"projectId": w.project}, &trig)
		t.Cleanup(func() { ts.do(t, "POST", "/deployments/"+trig.DeploymentID+"/cancel", w.ownerTok, nil) })
		expect(t, ts, http.StatusNotFound, "GET", "/projects/"+projB.ID, deploy.Token, nil)
		expect(t, ts, http.StatusNotFound, "POST", "/deployments", deploy.Token, map[string]any{"projectId": projB.ID})
		expect(t, ts, http.StatusForbidden, "GET", "/projects/"+w.project, deploy.Token, nil, "SCOPE_MISSING", "projects:read")
		expect(t, ts, http.StatusForbidden, "GET", "/projects", deploy.Token, nil, "projects:read")
		expect(t, ts, http.StatusForbidden, "PATCH", "/auth/me", deploy.Token, map[string]any{"email": "x@example.com", "currentPassword": "correct horse battery"},
			"API tokens cannot use account routes")
		expect(t, ts, http.StatusForbidden, "POST", "/auth/tokens", deploy.Token, map[string]any{"name": "more", "scopes": []string{"projects:read"}},
			"API tokens cannot use account routes")
		expect(t, ts, http.StatusForbidden, "POST", "/teams", deploy.Token, map[string]any{"name": "t"}, "TOKEN_REFUSED")

		// projects:read: reads, but cannot deploy; bound to team A it lists team A's projects only.
		read := newAPIToken(t, ts, dev, map[string]any{"name": "reader", "scopes": []string{"projects:read"}})
		expect(t, ts, http.StatusForbidden, "POST", "/deployments", read.Token, map[string]any{"projectId": w.project}, "deployments:write")
		expect(t, ts, http.StatusOK, "GET", "/projects/"+projB.ID, read.Token, nil)
		boundRead := newAPIToken(t, ts, dev, map[string]any{"name": "team reader", "scopes": []string{"projects:read", "members:read", "deployments:read"}, "teamId": w.team})
		var trigB struct{ DeploymentID string }
		ts.doJSON(t, http.StatusCreated, "POST", "/deployments", dev, map[string]any{"projectId": projB.ID}, &trigB)
		t.Cleanup(func() { ts.do(t, "POST", "/deployments/"+trigB.DeploymentID+"/cancel", dev, nil) })
		if got := listIDs(t, ts, "/deployments?limit=100", boundRead.Token); !slices.Contains(got, trig.DeploymentID) || slices.Contains(got, trigB.DeploymentID) {
			t.Fatalf("team-bound token lists deployments %v (team A's %s, not team B's %s)", got, trig.DeploymentID, trigB.DeploymentID)
		}
		if got := listIDs(t, ts, "/projects?limit=100", boundRead.Token); !slices.Contains(got, w.project) || slices.Contains(got, projB.ID) {
			t.Fatalf("team-bound token lists %v (team A's %s, not team B's %s)", got, w.project, projB.ID)
		}
		if got := listIDs(t, ts, "/teams", boundRead.Token); !slices.Equal(got, []string{w.team}) {
			t.Fatalf("team-bound token lists teams %v", got)
		}
		if got := listIDs(t, ts, "/projects?limit=100", read.Token); !slices.Contains(got, projB.ID) || !slices.Contains(got, w.project) {
			t.Fatalf("unbound token lists %v", got)
		}
		checkTokenList(t, ts, dev, deploy, read)
		checkSecretScope(t, w)
		checkBoundCreate(t, w)
		checkTeamDeleted(t, ts, dev)
		checkRefusedEverywhere(t, ts, newAPIToken(t, ts, w.ownerTok, map[string]any{"name": "all", "scopes": allScopes()}))

		// Revoked: 401 at once; a second revocation is a 404.
		ts.doJSON(t, http.StatusNoContent, "DELETE", "/auth/tokens/"+read.ID, dev, nil, nil)
		expect(t, ts, http.StatusUnauthorized, "GET", "/projects/"+projB.ID, read.Token, nil, "invalid or revoked API token")
		expect(t, ts, http.StatusNotFound, "DELETE", "/auth/tokens/"+read.ID, dev, nil)
		expect(t, ts, http.StatusNotFound, "DELETE", "/auth/tokens/"+deploy.ID, w.ownerTok, nil) // not theirs
		// A mistyped token (checksum) is refused like an unknown one.
		typo := []byte(deploy.Token)
		typo[len(typo)-1] = map[bool]byte{true: 'x', false: 'y'}[typo[len(typo)-1] != 'x']
		expect(t, ts, http.StatusUnauthorized, "GET", "/projects", string(typo), nil)

		checkExpiry(t, ts, dev, w.project)
		checkTokenCap(t, ts, w.tokens["viewer"])

		// The creator removed from team A: the token loses the team at once (404, as a non-member).
		ts.doJSON(t, http.StatusNoContent, "DELETE", "/teams/"+w.team+"/members/"+w.ids["developer"], w.ownerTok, nil, nil)
		expect(t, ts, http.StatusNotFound, "POST", "/deployments", deploy.Token, map[string]any{"projectId": w.project})
		if got := listIDs(t, ts, "/projects?limit=100", boundRead.Token); len(got) != 0 {
			t.Fatalf("a removed member's team-bound token lists %v", got)
		}

		// A deleted creator: 401, and the token rows go.
		out := newAPIToken(t, ts, w.tokens["outsider"], map[string]any{"name": "x", "scopes": []string{"projects:read"}})
		expect(t, ts, http.StatusOK, "GET", "/projects", out.Token, nil)
		if err := ts.App.Auth.DeleteUser(context.Background(), w.ids["outsider"]); err != nil {
			t.Fatal(err)
		}
		expect(t, ts, http.StatusUnauthorized, "GET", "/projects", out.Token, nil)
		if n, err := ts.App.DB.NewSelect().Table("api_tokens").Where("user_id = ?", w.ids["outsider"]).Count(context.Background()); err != nil || n != 0 {
			t.Fatalf("tokens of a deleted account: %d %v", n, err)
		}

		// No secret ever reached the log.
		for _, tok := range []string{deploy.Token, read.Token, boundRead.Token, out.Token} {
			if strings.Contains(ts.Logs.String(), tok[len("kls_")+12:]) {
				t.Fatalf("a token's secret is in the server's log")
			}
		}
	})
}

func allScopes() []string {
	var out []string
	for _, p := range platform.Permissions() {
		out = append(out, string(p))
	}
	return out
}

func listIDs(t *testing.T, ts *testServer, path, token string) []string {
	t.Helper()
	var items []struct{ ID string }
	ts.doJSON(t, http.StatusOK, "GET", path, token, nil, &items)
	var out []string
	for _, it := range items {
		out = append(out, it.ID)
	}
	return out
}

// checkTokenCreation: bad bodies are refused naming the problem, and nothing is stored.
func checkTokenCreation(t *testing.T, w *teamWorld) {
	ts, dev := w.ts, w.tokens["developer"]
	for _, c := range []struct {
		body   map[string]any
		status int
		words  []string
	}{
		{map[string]any{"name": "x", "scopes": []string{"deployments:write", "deploy:all"}}, 400, []string{`scopes[1]: unknown scope \"deploy:all\"`}},
		{map[string]any{"name": "x", "scopes": []string{}}, 400, []string{"scopes"}},
		{map[string]any{"name": " ", "scopes": []string{"projects:read"}}, 400, []string{"name"}},
		{map[string]any{"name": "x", "scopes": []string{"projects:read"}, "expiresAt": "2020-01-01T00:00:00Z"}, 400, []string{"expiresAt: must be in the future"}},
		{map[string]any{"name": "x", "scopes": []string{"secrets:write"}, "teamId": w.team}, 403, []string{"ROLE_TOO_LOW", "secrets:write"}},
		{map[string]any{"name": "x", "scopes": []string{"projects:read"}, "teamId": platform.NewID()}, 404, []string{"team not found"}},
	} {
		expect(t, ts, c.status, "POST", "/auth/tokens", dev, c.body, c.words...)
	}
	if got := listIDs(t, ts, "/auth/tokens", dev); len(got) != 0 {
		t.Fatalf("refused tokens were stored: %v", got)
	}
	expect(t, ts, http.StatusUnauthorized, "GET", "/auth/tokens", "", nil)
}

// checkTokenList: the list shows prefix, scopes, team and last use, never a secret.
func checkTokenList(t *testing.T, ts *testServer, session string, tokens ...apiToken) {
	_, body, _ := ts.do(t, "GET", "/auth/tokens", session, nil)
	var list []apiToken
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	for _, tok := range tokens {
		if strings.Contains(string(body), tok.Token[len(tok.Prefix):]) {
			t.Fatalf("the list holds a secret: %s", body)
		}
		i := slices.IndexFunc(list, func(x apiToken) bool { return x.ID == tok.ID })
		if i < 0 || list[i].Token != "" || list[i].Prefix != tok.Prefix || !slices.Equal(list[i].Scopes, tok.Scopes) || list[i].TeamID != tok.TeamID {
			t.Fatalf("listed %+v, created %+v", list, tok)
		}
		if list[i].LastUsedAt == nil || list[i].LastUsedAddr != "127.0.0.1" {
			t.Fatalf("last use of a used token: %+v", list[i])
		}
	}
}

// checkSecretScope: a projects:write token of the owner may change plain
// settings but not a secret (403 naming secrets:write), nor the plan.
func checkSecretScope(t *testing.T, w *teamWorld) {
	tok := newAPIToken(t, w.ts, w.ownerTok, map[string]any{"name": "settings", "scopes": []string{"projects:write", "projects:read"}})
	before := w.snapshot(t)
	expect(t, w.ts, http.StatusForbidden, "PATCH", "/projects/"+w.project+"/settings", tok.Token, settingsBody(w, "pro", "changed-secret-1"), "secrets:write")
	expect(t, w.ts, http.StatusForbidden, "PATCH", "/projects/"+w.project+"/settings", tok.Token, settingsBody(w, "free", projects.Mask), "plans:write")
	if after := w.snapshot(t); after != before {
		t.Fatalf("a refused token changed settings:\n%s\n%s", before, after)
	}
	expect(t, w.ts, http.StatusOK, "PATCH", "/projects/"+w.project+"/settings", tok.Token, settingsBody(w, "pro", projects.Mask))
}

// checkRefusedEverywhere walks every bearer operation of the document with
// an unbound token holding every scope: each one tokenRoutes does not list
// answers 403 TOKEN_REFUSED before doing anything, so a new account route
// (or any new route) is closed to tokens until it is listed.
func checkRefusedEverywhere(t *testing.T, ts *testServer, tok apiToken) {
	_, doc, _ := ts.do(t, "GET", "/openapi.json", "", nil)
	var d struct {
		Paths map[string]map[string]struct {
			OperationID string                `json:"operationId"`
			Security    []map[string][]string `json:"security"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	param := regexp.MustCompile(`\{[^}]+\}`)
	n := 0
	for path, ops := range d.Paths {
		for method, op := range ops {
			if _, listed := tokenRoutes[op.OperationID]; listed || len(op.Security) == 0 && !strings.HasPrefix(path, "/auth/") {
				continue
			}
			n++
			p := param.ReplaceAllString(path, platform.NewID())
			expect(t, ts, http.StatusForbidden, strings.ToUpper(method), p, tok.Token, map[string]any{}, "TOKEN_REFUSED")
		}
	}
	if n < 20 {
		t.Fatalf("only %d operations refuse tokens", n)
	}
}

// checkExpiry: a token works until expiresAt, then answers 401.
func checkExpiry(t *testing.T, ts *testServer, session, project string) {
	exp := time.Now().Add(3 * time.Second).UTC()
	tok := newAPIToken(t, ts, session, map[string]any{"name": "short", "scopes": []string{"projects:read"}, "expiresAt": exp.Format(time.RFC3339Nano)})
	if s, _, _ := ts.do(t, "GET", "/projects/"+project, tok.Token, nil); s != http.StatusOK && time.Now().Before(exp) {
		t.Fatalf("unexpired token: %d", s)
	}
	platformtest.Eventually(t, 10*time.Second, "expired token refused", func() bool {
		s, b, _ := ts.do(t, "GET", "/projects/"+project, tok.Token, nil)
		return s == http.StatusUnauthorized && strings.Contains(string(b), "API token expired")
	})
}

// checkTokenCap: an account holds at most KEELSON_MAX_API_TOKENS tokens.
func checkTokenCap(t *testing.T, ts *testServer, session string) {
	for i := range 8 {
		newAPIToken(t, ts, session, map[string]any{"name": fmt.Sprint("t", i), "scopes": []string{"projects:read"}})
	}
	expect(t, ts, http.StatusForbidden, "POST", "/auth/tokens", session, map[string]any{"name": "one more", "scopes": []string{"projects:read"}},
		"TOKEN_LIMIT", "8 per account")
}

// roleAPITokens makes, for each role of the team world and the outsider, an
// API token with every scope, not bound to a team.
func roleAPITokens(t *testing.T, w *teamWorld) map[string]string {
	out := map[string]string{}
	for who, session := range w.tokens {
		out[who] = newAPIToken(t, w.ts, session, map[string]any{"name": "all of " + who, "scopes": allScopes()}).Token
	}
	return out
}

// checkScopeNarrows walks the team's route table with an owner's token
// holding teams:write only: every route but the rename and the team's reads
// (members:read, which it implies) is refused with 403 naming the scope it
// needs, and changes nothing.
func checkScopeNarrows(t *testing.T, w *teamWorld) {
	tok := newAPIToken(t, w.ts, w.ownerTok, map[string]any{"name": "rename only", "scopes": []string{"teams:write"}, "teamId": w.team})
	for _, r := range teamRouteTable {
		if r.name == "rename team" || r.name == "read team" || r.name == "list members" {
			w.tryRoute(t, r, tok.Token, r.want, r.name+" with a teams:write token")
			continue
		}
		if got := w.tryRoute(t, r, tok.Token, http.StatusForbidden, r.name+" with a teams:write token"); !strings.Contains(string(got), "SCOPE_MISSING") {
			t.Fatalf("%s with a teams:write token: %s, want SCOPE_MISSING", r.name, got)
		}
	}
}

// checkBoundCreate: a team-bound token with projects:create creates projects
// in its team only (403 naming teamId for a personal one).
func checkBoundCreate(t *testing.T, w *teamWorld) {
	tok := newAPIToken(t, w.ts, w.ownerTok, map[string]any{"name": "creator", "scopes": []string{"projects:create"}, "teamId": w.team})
	body := map[string]any{"name": "by-token", "repoUrl": w.repo, "framework": "go", "port": 8080}
	expect(t, w.ts, http.StatusForbidden, "POST", "/projects", tok.Token, body, "bound to a team", "teamId")
	body["teamId"] = w.team
	var p struct{ ID, TeamID string }
	w.ts.doJSON(t, http.StatusCreated, "POST", "/projects", tok.Token, body, &p)
	if p.TeamID != w.team {
		t.Fatalf("created by a team-bound token: %+v", p)
	}
}

// checkTeamDeleted: the tokens bound to a deleted team are deleted with it.
func checkTeamDeleted(t *testing.T, ts *testServer, session string) {
	var team struct{ ID string }
	ts.doJSON(t, http.StatusCreated, "POST", "/teams", session, map[string]any{"name": "short-lived"}, &team)
	tok := newAPIToken(t, ts, session, map[string]any{"name": "bound", "scopes": []string{"members:read"}, "teamId": team.ID})
	expect(t, ts, http.StatusOK, "GET", "/teams/"+team.ID, tok.Token, nil)
	ts.doJSON(t, http.StatusNoContent, "DELETE", "/teams/"+team.ID, session, nil, nil)
	if slices.Contains(listIDs(t, ts, "/auth/tokens", session), tok.ID) {
		t.Fatalf("a deleted team's token is still listed")
	}
	expect(t, ts, http.StatusUnauthorized, "GET", "/teams", tok.Token, nil)
}
