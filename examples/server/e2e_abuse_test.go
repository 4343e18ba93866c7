package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/httpx"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

// The abuse suite (issue 9): what a hostile but authenticated user tries.
// Routes are enumerated from the server's own OpenAPI document, so a route
// added later is covered, or fails here until someone says whose ids it takes.

// ownedRoutes maps a path prefix to the kind of resource its {id} names; the
// suite creates one of each kind as alice and attacks it as bob.
var ownedRoutes = []struct{ prefix, kind string }{
	{"/projects/{id}", "project"},
	{"/deployments/{id}", "deployment"},
	{"/teams/{id}", "team"},
	{"/auth/tokens/{id}", "token"},
}

// notOwnedRoutes take ids of things no user owns; why is noted per prefix.
var notOwnedRoutes = map[string]string{
	"/plans/{id}":           "plans are a public catalogue (GET public, writes ADMIN: checked below)",
	"/deploy-hooks/{token}": "the token is the hook's own credential, not an id: unknown and revoked ones answer one 404 (TestDeployHooksE2E)",
	"/hosts/{id}":           "hosts are the installation's machines, not a tenant's: every route is ADMIN only (a user's 403 is driven in TestDeclaredResponses)",
}

// placeholderPrefixes are SPEC 4.7's placeholder modules: no stored resources.
var placeholderPrefixes = []string{"/env-vars", "/logstore", "/workflow-engine", "/admin", "/users", "/logs", "/cluster", "/notification"}

// openAPIDoc is the part of the OpenAPI document the suite reads.
type openAPIDoc struct {
	Paths map[string]map[string]struct {
		Parameters []struct {
			Name string `json:"name"`
			In   string `json:"in"`
		} `json:"parameters"`
		RequestBody *struct{} `json:"requestBody"`
		Responses   map[string]struct {
			Content map[string]any `json:"content"`
		} `json:"responses"`
	} `json:"paths"`
}

type route struct {
	method, path string
	queries      []string
	hasBody      bool
	streams      bool // answers text/event-stream
}

func routesOf(t *testing.T, ts *testServer) []route {
	t.Helper()
	var doc openAPIDoc
	ts.doJSON(t, http.StatusOK, "GET", "/openapi.json", "", nil, &doc)
	var out []route
	for path, ops := range doc.Paths {
		for method, op := range ops {
			r := route{method: strings.ToUpper(method), path: path, hasBody: op.RequestBody != nil}
			for _, p := range op.Parameters {
				if p.In == "query" {
					r.queries = append(r.queries, p.Name)
				}
			}
			if _, ok := op.Responses["200"].Content["text/event-stream"]; ok {
				r.streams = true
			}
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path+out[i].method < out[j].path+out[j].method })
	return out
}

// errorBody is the error model of DESIGN.md section 4.
type errorBody struct {
	StatusCode int    `json:"statusCode"`
	Message    any    `json:"message"`
	Error      string `json:"error"`
}

// checkErrorModel fails unless body is the error model for status.
func checkErrorModel(t *testing.T, what string, status int, body []byte) errorBody {
	t.Helper()
	var e errorBody
	if err := json.Unmarshal(body, &e); err != nil || e.StatusCode != status || e.Error != http.StatusText(status) || e.Message == nil {
		t.Errorf("%s: %d answered %q, not the error model", what, status, body)
	}
	return e
}

func messageOf(e errorBody) string {
	if s, ok := e.Message.(string); ok {
		return s
	}
	b, _ := json.Marshal(e.Message)
	return string(b)
}

func projectBody(name string) map[string]any {
	return map[string]any{"name": name, "repoUrl": "https://github.com/acme/" + strings.ToLower(name), "framework": "node", "port": 3000}
}

func TestAbuse(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, dbURL string) {
		ts := startServer(t, dbURL, nil)
		admin := ts.signup(t, "admin@example.com")
		alice := ts.signup(t, "alice@example.com")
		bob := ts.signup(t, "bob@example.com")
		var aliceMe, bobMe struct{ ID, Role, Email string }
		ts.doJSON(t, http.StatusOK, "GET", "/auth/me", alice, nil, &aliceMe)
		ts.doJSON(t, http.StatusOK, "GET", "/auth/me", bob, nil, &bobMe)
		routes := routesOf(t, ts)
		has := func(method, path string) bool {
			return slices.ContainsFunc(routes, func(r route) bool { return r.method == method && r.path == path })
		}

		// Alice's resources: a project, and a deployment when deployments are
		// wired (of a repository that does not exist: it fails fast, but its
		// id is real).
		var proj e2eProject
		ts.doJSON(t, http.StatusCreated, "POST", "/projects", alice, projectBody("Target"), &proj)
		ids := map[string]string{"project": proj.ID}
		if has("POST", "/deployments") {
			var gone e2eProject
			ts.doJSON(t, http.StatusCreated, "POST", "/projects", alice, map[string]any{
				"name": "Gone", "repoUrl": "file:///nonexistent/keelson-abuse-repo", "framework": "go", "port": 8080,
			}, &gone)
			var trig struct{ DeploymentID string }
			ts.doJSON(t, http.StatusCreated, "POST", "/deployments", alice, map[string]any{"projectId": gone.ID}, &trig)
			ids["deployment"] = trig.DeploymentID
		}
		if has("POST", "/teams") {
			var team struct{ ID string }
			ts.doJSON(t, http.StatusCreated, "POST", "/teams", alice, map[string]any{"name": "alice's"}, &team)
			ids["team"] = team.ID
		}
		if has("POST", "/auth/tokens") {
			var tok struct{ ID string }
			ts.doJSON(t, http.StatusCreated, "POST", "/auth/tokens", alice, map[string]any{"name": "alice's CI", "scopes": []string{"projects:read"}}, &tok)
			ids["token"] = tok.ID
		}
		// A custom domain of alice's project (her account on a plan that
		// has customDomains), for the routes under .../domains/{domainId}.
		if has("POST", "/projects/{id}/domains") {
			var catalogue []struct{ ID, Name string }
			ts.doJSON(t, http.StatusOK, "GET", "/plans", "", nil, &catalogue)
			for _, p := range catalogue {
				if p.Name == "starter" {
					ts.doJSON(t, http.StatusNoContent, "PUT", "/plans/"+p.ID+"/accounts/"+aliceMe.ID, admin, nil, nil)
				}
			}
			var d struct{ ID string }
			ts.doJSON(t, http.StatusCreated, "POST", "/projects/"+proj.ID+"/domains", alice, map[string]any{"hostname": "www.abuse.example.com"}, &d)
			ids["domain"] = d.ID
		}
		_, projBefore, _ := ts.do(t, "GET", "/projects/"+proj.ID, alice, nil)

		t.Run("another user's id is 404", func(t *testing.T) {
			// Bodies valid enough to get past validation to the ownership check.
			bodies := map[string]any{
				"PATCH /projects/{id}/settings":      map[string]any{"region": "local", "planName": "free", "envVars": []any{}},
				"POST /projects/{id}/domains":        map[string]any{"hostname": "www.stolen.example.com"},
				"POST /projects/{id}/transfer":       map[string]any{},
				"PATCH /teams/{id}":                  map[string]any{"name": "stolen"},
				"POST /teams/{id}/invitations":       map[string]any{"email": "bob@example.com", "role": "owner"},
				"PATCH /teams/{id}/members/{userId}": map[string]any{"role": "owner"},
			}
			covered := 0
			for _, r := range routes {
				if !strings.Contains(r.path, "{") {
					continue
				}
				kind, why := "", ""
				for _, o := range ownedRoutes {
					if r.path == o.prefix || strings.HasPrefix(r.path, o.prefix+"/") {
						kind = o.kind
					}
				}
				for prefix, reason := range notOwnedRoutes {
					if r.path == prefix || strings.HasPrefix(r.path, prefix+"/") {
						why = reason
					}
				}
				for _, p := range placeholderPrefixes {
					if strings.HasPrefix(r.path, p+"/{") {
						why = "placeholder module"
					}
				}
				if why != "" {
					continue
				}
				if kind == "" {
					t.Errorf("%s %s takes an id, but the abuse suite does not know whose: add its prefix to ownedRoutes or notOwnedRoutes",
						r.method, r.path)
					continue
				}
				id := ids[kind]
				if id == "" {
					t.Errorf("%s %s: no %s was created to attack", r.method, r.path, kind)
					continue
				}
				var body any
				if r.hasBody {
					body = bodies[r.method+" "+r.path]
					if body == nil {
						body = map[string]any{}
					}
				}
				// Ids below the project's are alice's own (her domain).
				sub := strings.NewReplacer("{domainId}", ids["domain"], "{userId}", aliceMe.ID, "{invitationId}", platform.NewID())
				other := sub.Replace(strings.ReplaceAll(r.path, "{id}", id))
				random := sub.Replace(strings.ReplaceAll(r.path, "{id}", platform.NewID()))
				st, raw, _ := ts.do(t, r.method, other, bob, body)
				if st != http.StatusNotFound {
					t.Errorf("bob %s %s (alice's %s): %d %s, want 404", r.method, r.path, kind, st, raw)
					continue
				}
				e := checkErrorModel(t, r.method+" "+other, st, raw)
				// No oracle: another's id answers exactly as an id that does not exist.
				st2, raw2, _ := ts.do(t, r.method, random, bob, body)
				if e2 := checkErrorModel(t, r.method+" "+random, st2, raw2); st2 != st || messageOf(e2) != messageOf(e) {
					t.Errorf("%s %s: another's id answers %d %q but a missing id %d %q", r.method, r.path, st, messageOf(e), st2, messageOf(e2))
				}
				covered++
				// The owner gets past the check (so the 404 was about ownership).
				if r.method == http.MethodGet && !r.streams {
					if st, raw, _ := ts.do(t, r.method, other, alice, nil); st != http.StatusOK {
						t.Errorf("alice %s %s: %d %s", r.method, other, st, raw)
					}
				}
			}
			if covered < 4 {
				t.Fatalf("only %d id routes attacked; the OpenAPI enumeration is broken", covered)
			}
			// List filters naming another's resource answer as for a missing one.
			for _, r := range routes {
				if r.method != http.MethodGet || strings.Contains(r.path, "{") {
					continue
				}
				for _, q := range r.queries {
					kind := strings.TrimSuffix(q, "Id")
					if kind == q || ids[kind] == "" {
						continue
					}
					st, raw, _ := ts.do(t, "GET", r.path+"?"+q+"="+ids[kind], bob, nil)
					st2, raw2, _ := ts.do(t, "GET", r.path+"?"+q+"="+platform.NewID(), bob, nil)
					switch {
					case st == http.StatusNotFound:
						checkErrorModel(t, r.path+"?"+q, st, raw)
					case r.path != "/deployments" && r.path != "/codehost/deliveries" && st == http.StatusOK && strings.TrimSpace(string(raw)) == "[]" && st2 == st && bytes.Equal(raw, raw2):
						// Not yours and absent look alike: no leak. (GET /deployments and
						// GET /codehost/deliveries answer 404 for a project filter the
						// caller cannot see.)
						t.Logf("GET %s?%s=<another's>: 200 [] (same as a missing id), not 404", r.path, q)
					default:
						t.Errorf("bob GET %s?%s=<alice's %s>: %d %s (missing id: %d %s)", r.path, q, kind, st, raw, st2, raw2)
					}
				}
			}
			// Plans: a user cannot write them or move anyone between plans.
			var plans []e2ePlan
			ts.doJSON(t, http.StatusOK, "GET", "/plans", "", nil, &plans)
			for _, c := range []struct{ method, path string }{
				{"PATCH", "/plans/" + plans[0].ID}, {"DELETE", "/plans/" + plans[0].ID},
				{"PUT", "/plans/" + plans[3].ID + "/accounts/" + bobMe.ID},
			} {
				var body any
				if c.method == "PATCH" {
					body = map[string]any{"maxProjects": 1000}
				}
				if st, raw, _ := ts.do(t, c.method, c.path, bob, body); st != http.StatusForbidden {
					t.Errorf("bob %s %s: %d %s, want 403", c.method, c.path, st, raw)
				}
			}
			// Nothing bob did changed alice's project.
			_, after, _ := ts.do(t, "GET", "/projects/"+proj.ID, alice, nil)
			if !bytes.Equal(projBefore, after) {
				t.Errorf("alice's project changed:\n%s\n%s", projBefore, after)
			}
		})

		t.Run("mass assignment changes nothing", func(t *testing.T) {
			var before []e2eProject
			ts.doJSON(t, http.StatusOK, "GET", "/projects", alice, nil, &before)
			pw := "correct horse battery"
			for _, extra := range []map[string]any{
				{"role": "ADMIN"}, {"Role": "ADMIN"}, {"ROLE": "ADMIN"}, {"id": bobMe.ID}, {"ownerId": bobMe.ID},
				{"OwnerID": bobMe.ID}, {"isAdmin": true}, {"twoFactorEnabled": true}, {"sessionVersion": 9},
			} {
				reg := map[string]any{"email": "mallory@example.com", "password": pw, "confirmPassword": pw}
				me := map[string]any{"name": "Alice"}
				project := projectBody("Sneaky")
				settings := map[string]any{"region": "local", "planName": "free", "envVars": []any{}}
				for k, v := range extra {
					reg[k], me[k], project[k], settings[k] = v, v, v, v
				}
				for _, c := range []struct {
					method, path, token string
					body                map[string]any
				}{
					{"POST", "/auth/register", "", reg},
					{"PATCH", "/auth/me", alice, me},
					{"POST", "/projects", alice, project},
					{"PATCH", "/projects/" + proj.ID + "/settings", alice, settings},
				} {
					st, raw, _ := ts.do(t, c.method, c.path, c.token, c.body)
					if st != http.StatusBadRequest {
						t.Errorf("%s %s with %v: %d %s, want 400", c.method, c.path, extra, st, raw)
						continue
					}
					e := checkErrorModel(t, c.path, st, raw)
					for k := range extra {
						if !strings.Contains(messageOf(e), k) {
							t.Errorf("%s %s: message %q does not name %q", c.method, c.path, messageOf(e), k)
						}
					}
				}
			}
			// Case variants of real fields are not the fields (encoding/json
			// matches them case-insensitively; the schema, strictly cased, does not).
			for _, body := range []string{
				`{"NAME":"X","repoUrl":"https://github.com/acme/x","framework":"node","port":3000}`,
				`{"name":"x","Name":"Y","repoUrl":"https://github.com/acme/x","framework":"node","port":3000}`,
			} {
				if st, raw, _ := ts.do(t, "POST", "/projects", alice, body); st != http.StatusBadRequest {
					t.Errorf("POST /projects %s: %d %s, want 400", body, st, raw)
				}
			}
			// Duplicate keys are refused, whichever value would have won.
			for _, c := range []struct{ method, path, token, body string }{
				{"POST", "/projects", alice, `{"name":"a","name":"b","repoUrl":"https://github.com/acme/x","framework":"node","port":3000}`},
				{"PATCH", "/auth/me", alice, `{"email":"alice@example.com","email":"bob2@example.com"}`},
				{"POST", "/auth/login", "", `{"email":"bob@example.com","email":"alice@example.com","password":"x"}`},
				{"PATCH", "/projects/" + proj.ID + "/settings", alice, `{"region":"local","planName":"free","planName":"enterprise","envVars":[]}`},
			} {
				st, raw, _ := ts.do(t, c.method, c.path, c.token, c.body)
				if e := checkErrorModel(t, c.path, st, raw); st != http.StatusBadRequest || !strings.Contains(messageOf(e), "duplicate key") {
					t.Errorf("%s %s %s: %d %s, want 400 naming the duplicate key", c.method, c.path, c.body, st, raw)
				}
			}
			var me struct{ ID, Role, Email, Name string }
			ts.doJSON(t, http.StatusOK, "GET", "/auth/me", alice, nil, &me)
			if me.ID != aliceMe.ID || me.Role != "USER" || me.Email != "alice@example.com" || me.Name != "" {
				t.Errorf("alice changed: %+v", me)
			}
			var after []e2eProject
			ts.doJSON(t, http.StatusOK, "GET", "/projects", alice, nil, &after)
			if len(after) != len(before) {
				t.Errorf("projects: %d before, %d after", len(before), len(after))
			}
			_, projAfter, _ := ts.do(t, "GET", "/projects/"+proj.ID, alice, nil)
			if !bytes.Equal(projBefore, projAfter) {
				t.Errorf("alice's project changed:\n%s\n%s", projBefore, projAfter)
			}
			if st, _, _ := ts.do(t, "POST", "/auth/login", "", map[string]any{"email": "mallory@example.com", "password": pw}); st != http.StatusUnauthorized {
				t.Errorf("mallory was registered: login %d", st)
			}
		})

		t.Run("NUL, lone surrogates and invalid UTF-8 are 400", func(t *testing.T) {
			bad := map[string]string{
				`\u0000`: "NUL", `\ud800`: "surrogate", `\udfff`: "surrogate", `\ud800\u0041`: "surrogate",
				"\xff": "UTF-8", "\xc3\x28": "UTF-8", "\xed\xa0\x80": "UTF-8", // CESU-encoded surrogate
			}
			for frag, want := range bad {
				for _, c := range []struct{ method, path, token, tmpl string }{
					{"POST", "/auth/register", "", `{"email":"x%s@example.com","password":"secret1","confirmPassword":"secret1"}`},
					{"POST", "/auth/login", "", `{"email":"alice@example.com","password":"p%s"}`},
					{"PATCH", "/auth/me", alice, `{"name":"A%s"}`},
					{"POST", "/projects", alice, `{"name":"N%s","repoUrl":"https://github.com/acme/x","framework":"node","port":3000}`},
					{"PATCH", "/projects/" + proj.ID + "/settings", alice, `{"region":"local","planName":"free","envVars":[{"key":"K","value":"v%s","isSecret":true}]}`},
					{"POST", "/plans", admin, `{"name":"p%s","tier":"FREE","maxProjects":1,"maxDeployments":1,"maxMemoryMi":1,"maxCpuM":1,"maxStorageGi":1,"maxBandwidthGb":1,"buildTimeoutMins":1}`},
				} {
					body := fmt.Sprintf(c.tmpl, frag)
					st, raw, _ := ts.do(t, c.method, c.path, c.token, body)
					if e := checkErrorModel(t, c.path, st, raw); st != http.StatusBadRequest || !strings.Contains(messageOf(e), want) {
						t.Errorf("%s %s %q: %d %s, want 400 naming %s", c.method, c.path, body, st, raw, want)
					}
				}
			}
			// In a query parameter: a 4xx, never a 500.
			for _, q := range []string{"/projects?status=%00", "/projects?cursor=%00", "/projects?limit=%00", "/projects/%00"} {
				if st, raw, _ := ts.do(t, "GET", q, alice, nil); st >= 500 || st < 400 {
					t.Errorf("GET %s: %d %s", q, st, raw)
				}
			}
			_, projAfter, _ := ts.do(t, "GET", "/projects/"+proj.ID, alice, nil)
			if !bytes.Equal(projBefore, projAfter) {
				t.Errorf("alice's project changed:\n%s\n%s", projBefore, projAfter)
			}
		})

		t.Run("oversized bodies are 413", func(t *testing.T) {
			big := `{"name":"` + strings.Repeat("a", 3<<20) + `"}`
			for _, c := range []struct{ method, path, token string }{
				{"POST", "/auth/register", ""}, {"POST", "/auth/login", ""}, {"PATCH", "/auth/me", alice},
				{"POST", "/projects", alice}, {"PATCH", "/projects/" + proj.ID + "/settings", alice}, {"POST", "/plans", admin},
			} {
				st, raw, _ := ts.do(t, c.method, c.path, c.token, big)
				if st != http.StatusRequestEntityTooLarge {
					t.Errorf("%s %s with 3 MiB: %d %.200s, want 413", c.method, c.path, st, raw)
					continue
				}
				checkErrorModel(t, c.path, st, raw)
			}
		})

		t.Run("absurd limits are clamped", func(t *testing.T) {
			// Alice gets room for more than a page of projects.
			var roomy e2ePlan
			ts.doJSON(t, http.StatusCreated, "POST", "/plans", admin, map[string]any{"name": "roomy", "tier": "ENTERPRISE",
				"maxProjects": 200, "maxDeployments": 10, "maxMemoryMi": 256, "maxCpuM": 250, "maxStorageGi": 1,
				"maxBandwidthGb": 1, "buildTimeoutMins": 5}, &roomy)
			ts.doJSON(t, http.StatusNoContent, "PUT", "/plans/"+roomy.ID+"/accounts/"+aliceMe.ID, admin, nil, nil)
			var have []e2eProject
			ts.doJSON(t, http.StatusOK, "GET", "/projects?limit=100", alice, nil, &have)
			for i := len(have); i <= platform.MaxPageSize; i++ {
				ts.doJSON(t, http.StatusCreated, "POST", "/projects", alice, projectBody(fmt.Sprintf("p%03d", i)), nil)
			}
			for _, r := range routes {
				if r.method != http.MethodGet || strings.Contains(r.path, "{") || !slices.Contains(r.queries, "limit") {
					continue
				}
				for _, lim := range []string{"1000000", "2147483648", "9223372036854775807", "-5", "0"} {
					st, raw, _ := ts.do(t, "GET", r.path+"?limit="+lim, alice, nil)
					var items []json.RawMessage
					if st != http.StatusOK || json.Unmarshal(raw, &items) != nil || len(items) > platform.MaxPageSize {
						t.Errorf("GET %s?limit=%s: %d, %d items (%.200s)", r.path, lim, st, len(items), raw)
					}
					if r.path == "/projects" && lim == "1000000" && len(items) != platform.MaxPageSize {
						t.Errorf("GET /projects?limit=%s: %d items, want %d", lim, len(items), platform.MaxPageSize)
					}
				}
				// Not an integer at all (or past int64): 400 naming the parameter.
				for _, lim := range []string{"lots", "99999999999999999999", "1e3"} {
					st, raw, _ := ts.do(t, "GET", r.path+"?limit="+lim, alice, nil)
					if e := checkErrorModel(t, r.path, st, raw); st != http.StatusBadRequest || !strings.Contains(messageOf(e), "limit") {
						t.Errorf("GET %s?limit=%s: %d %s, want 400 naming limit", r.path, lim, st, raw)
					}
				}
			}
		})

		t.Run("CORS", func(t *testing.T) {
			front := ts.App.Cfg.FrontendURL
			send := func(method, origin string, hdr map[string]string) http.Header {
				req, _ := http.NewRequest(method, ts.URL+"/projects", nil)
				req.Header.Set("Origin", origin)
				for k, v := range hdr {
					req.Header.Set(k, v)
				}
				resp, err := ts.Client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp.Header
			}
			pre := send("OPTIONS", front, map[string]string{"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization, content-type"})
			if pre.Get("Access-Control-Allow-Origin") != front || pre.Get("Access-Control-Allow-Credentials") != "true" ||
				!strings.Contains(pre.Get("Access-Control-Allow-Headers"), "Authorization") {
				t.Errorf("preflight from the frontend: %v", pre)
			}
			// An error answer (401 here) is readable by the frontend too.
			if h := send("GET", front, nil); h.Get("Access-Control-Allow-Origin") != front {
				t.Errorf("GET from the frontend: %v", h)
			}
			for _, h := range []http.Header{
				send("GET", "https://evil.example", nil),
				send("OPTIONS", "https://evil.example", map[string]string{"Access-Control-Request-Method": "POST"}),
			} {
				if h.Get("Access-Control-Allow-Origin") != "" || h.Get("Access-Control-Allow-Credentials") != "" {
					t.Errorf("another origin got CORS headers: %v", h)
				}
			}
		})
	})
}

// TestRepoURLsCannotReachPrivateAddresses: with local repositories not
// allowed, a repoUrl naming loopback, link-local or private addresses is 400.
func TestRepoURLsCannotReachPrivateAddresses(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, dbURL string) {
		ts := startServer(t, dbURL, func(c *Config) { c.AllowLocalRepos = false })
		alice := ts.signup(t, "alice@example.com")
		for _, repo := range []string{
			"https://127.0.0.1/acme/x", "https://127.1.2.3/acme/x", "https://[::1]/acme/x", "https://0.0.0.0/acme/x",
			"https://169.254.169.254/latest/meta-data", "https://[fe80::1]/acme/x", "https://10.0.0.1/acme/x",
			"https://172.16.5.4/acme/x", "https://192.168.1.1/acme/x", "https://[fd00::1]/acme/x",
			"https://[::ffff:127.0.0.1]/acme/x", "https://localhost/acme/x", "https://api.localhost/acme/x",
			"https://2130706433/acme/x", "https://0x7f000001/acme/x", "https://0x7f.1/acme/x", "https://017700000001/acme/x",
			"http://github.com/acme/x", "file:///etc/passwd", "/srv/git/repo", "git://127.0.0.1/x", "ssh://127.0.0.1/x",
			"https://user:pass@github.com/acme/x",
		} {
			body := projectBody("X")
			body["repoUrl"] = repo
			st, raw, _ := ts.do(t, "POST", "/projects", alice, body)
			if e := checkErrorModel(t, repo, st, raw); st != http.StatusBadRequest || !strings.Contains(messageOf(e), "repoUrl") {
				t.Errorf("repoUrl %s: %d %s, want 400 naming repoUrl", repo, st, raw)
			}
		}
		// A host name that resolves to a private address (here through
		// /etc/hosts: the machine's own name) must be refused too, where git
		// connects (DNS can change after validation).
		host, err := privateHostName()
		if err != nil {
			t.Skipf("no host name resolving to a private address here: %v", err)
		}
		// The project can be created (the name may resolve differently when it
		// deploys), but its deployment fails at BUILD before git connects.
		body := projectBody("Resolved")
		body["repoUrl"] = "https://" + host + "/acme/x"
		var p struct{ ID string }
		ts.doJSON(t, http.StatusCreated, "POST", "/projects", alice, body, &p)
		var tr struct{ DeploymentID string }
		ts.doJSON(t, http.StatusCreated, "POST", "/deployments", alice, map[string]any{"projectId": p.ID}, &tr)
		st, _ := waitDeployment(t, ts, alice, tr.DeploymentID)
		if st.Status != "FAILED" || !strings.Contains(st.ErrorMessage, "non-public address") {
			t.Fatalf("deploying %s (a private address): %s %q, want FAILED naming the non-public address", body["repoUrl"], st.Status, st.ErrorMessage)
		}
	})
}

// privateHostName finds a name of this machine that resolves to a loopback or
// private address without DNS (/etc/hosts), other than "localhost" itself.
func privateHostName() (string, error) {
	for _, h := range []string{"vm", "runsc", "ip6-localhost", "ip6-loopback", "localhost.localdomain"} {
		addrs, err := net.LookupHost(h)
		if err != nil || len(addrs) == 0 {
			continue
		}
		if ip := net.ParseIP(addrs[0]); ip != nil && (ip.IsLoopback() || ip.IsPrivate()) {
			return h, nil
		}
	}
	return "", fmt.Errorf("none of the usual /etc/hosts names resolve")
}

// TestTimeoutsKeepStreamsOpen: the API server's timeouts (as httpServer sets
// them, shortened) do not end a long response such as an SSE stream. net/http
// clears the read deadline when the handler runs (background read), and
// IdleTimeout counts between requests only; there is no WriteTimeout.
func TestTimeoutsKeepStreamsOpen(t *testing.T) {
	t.Parallel()
	a := &App{Log: slog.New(slog.DiscardHandler)}
	// The timeouts are 5*d: d is large enough that a loaded machine sends
	// the request's headers within ReadHeaderTimeout (50 ms gave 250 ms).
	const d = 200 * time.Millisecond
	stream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < 10; i++ { // 10*d: twice every timeout below
			select {
			case <-r.Context().Done():
				return
			case <-time.After(d):
			}
			io.WriteString(w, ": ping\n\n")
			http.NewResponseController(w).Flush()
		}
		io.WriteString(w, "data: {\"type\":\"done\"}\n\n")
	})
	srv := a.httpServer(httpx.Middleware(a.Log, stream))
	if srv.WriteTimeout != 0 {
		t.Fatalf("WriteTimeout %s would cut streams", srv.WriteTimeout)
	}
	srv.ReadTimeout, srv.ReadHeaderTimeout, srv.IdleTimeout = 5*d, 5*d, 5*d
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l) //nolint:errcheck
	t.Cleanup(func() { srv.Close() })
	resp, err := http.Get((&url.URL{Scheme: "http", Host: l.Addr().String(), Path: "/"}).String())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `"type":"done"`) {
		t.Fatalf("the stream was cut: %q", body)
	}
}

// TestLogStreamCapPerUser: a user holding KEELSON_MAX_LOG_STREAMS open log
// streams is refused another with 429 and Retry-After until one closes;
// another user is not affected by the first one's streams.
func TestLogStreamCapPerUser(t *testing.T) {
	t.Parallel()
	if _, err := LoadConfig(func(k string) string { return map[string]string{"KEELSON_MAX_LOG_STREAMS": "0"}[k] }); err == nil ||
		!strings.Contains(err.Error(), "KEELSON_MAX_LOG_STREAMS") {
		t.Fatalf("KEELSON_MAX_LOG_STREAMS=0: %v", err)
	}
	ts := startServer(t, "", func(c *Config) { c.MaxLogStreams = 2 })
	if ts.App.Ingress == nil { // set by wire_deployments.go
		t.Skip("deployments are not wired")
	}
	alice := ts.signup(t, "alice@example.com")
	// A build that takes long enough to hold streams open; cancelled at the end.
	work, _ := newRepo(t, map[string]string{"go.mod": "module example.com/app\n\ngo 1.21\n", "main.go": "package main\n\nfunc main() {}\n"})
	var p e2eProject
	ts.doJSON(t, http.StatusCreated, "POST", "/projects", alice, map[string]any{"name": "Slow", "repoUrl": work, "framework": "go", "port": 8080}, &p)
	ts.doJSON(t, http.StatusOK, "PATCH", "/projects/"+p.ID+"/settings", alice, map[string]any{
		"region": "local", "planName": "free", "envVars": []any{}, "buildCommand": "sleep 120"}, nil)
	var trig struct{ DeploymentID string }
	ts.doJSON(t, http.StatusCreated, "POST", "/deployments", alice, map[string]any{"projectId": p.ID}, &trig)
	t.Cleanup(func() { ts.do(t, "POST", "/deployments/"+trig.DeploymentID+"/cancel", alice, nil) })

	open := func(token string) (*http.Response, error) {
		req, _ := http.NewRequest("GET", ts.URL+"/deployments/"+trig.DeploymentID+"/logs", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		return ts.Client.Do(req)
	}
	var held []*http.Response
	for i := 0; i < 2; i++ {
		resp, err := open(alice)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("stream %d: %v %v", i, err, resp)
		}
		held = append(held, resp)
	}
	resp, err := open(alice)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("third stream: %d %s (Retry-After %q)", resp.StatusCode, raw, resp.Header.Get("Retry-After"))
	}
	checkErrorModel(t, "third stream", resp.StatusCode, raw)
	// Closing one frees its slot (once the server sees the disconnect).
	held[0].Body.Close()
	platformtest.Eventually(t, 10*time.Second, "a freed stream slot", func() bool { return ts.App.LogStreams.Open(ownerOf(t, ts, alice)) < 2 })
	resp, err = open(alice)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("after closing one: %v %v", err, resp)
	}
	resp.Body.Close()
	held[1].Body.Close()
}
