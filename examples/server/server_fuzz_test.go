package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

// Fuzz targets over the whole reference server (SQLite), driving its real
// handler (app.Handler: middleware, body checks, Huma, every module) through
// httptest. The property of every answer: no panic, no 5xx, and every error
// is the error model {"statusCode","message","error"}. Seeds:
// testdata/fuzz/<target>. The webhook has its own target in codehost.

// fuzzApp is a server for a fuzz target, with an admin, a user, and one of
// each resource to aim ids at.
type fuzzApp struct {
	app          *App
	admin, user  string // access tokens
	userID       string
	ids          map[string]string // "project", "plan", "deployment"
	bodyRoutes   []route
	deploymentOK bool
}

func newFuzzApp(f *testing.F) *fuzzApp {
	cfg, err := LoadConfig(func(string) string { return "" })
	if err != nil {
		f.Fatal(err)
	}
	cfg.DataDir = f.TempDir()
	cfg.JWTSecret = "fuzz-jwt-secret-0123456789abcdef0123456789"
	cfg.SecretKey = "fuzz-seal-key-0123456789abcdef0123456789ab"
	cfg.AllowLocalRepos = true
	cfg.AdminEmails = []string{"admin@example.com"}
	cfg.IngressAddr = "127.0.0.1:0"
	cfg.Runtime = "process"            // the fuzz targets build no app; no engine needed
	logs := &platformtest.SyncBuffer{} // holds the dev-mode mails: the admin verifies its address by the link
	app, err := NewApp(context.Background(), cfg, slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		app.Close(ctx)
	})
	fa := &fuzzApp{app: app, ids: map[string]string{}}
	fa.admin = fa.signup(f, "admin@example.com")
	fa.mustJSON(f, "POST", "/auth/verify-email", "", map[string]any{"token": loggedLink(f, logs, "admin@example.com", "/verify-email?token=")}, nil)
	fa.user = fa.signup(f, "user@example.com")
	var me struct{ ID string }
	fa.mustJSON(f, "GET", "/auth/me", fa.user, nil, &me)
	fa.userID = me.ID
	var p struct{ ID string }
	fa.mustJSON(f, "POST", "/projects", fa.user, projectBody("Fuzzed"), &p)
	fa.ids["project"] = p.ID
	var plans []struct{ ID string }
	fa.mustJSON(f, "GET", "/plans", "", nil, &plans)
	fa.ids["plan"] = plans[0].ID

	var doc openAPIDoc
	fa.mustJSON(f, "GET", "/openapi.json", "", nil, &doc)
	for path, ops := range doc.Paths {
		for method, op := range ops {
			if path == "/deployments" && method == "post" {
				fa.deploymentOK = true
			}
			if op.RequestBody != nil && path != "/codehost/webhook" {
				fa.bodyRoutes = append(fa.bodyRoutes, route{method: strings.ToUpper(method), path: path, hasBody: true})
			}
		}
	}
	sort.Slice(fa.bodyRoutes, func(i, j int) bool {
		return fa.bodyRoutes[i].path+fa.bodyRoutes[i].method < fa.bodyRoutes[j].path+fa.bodyRoutes[j].method
	})
	if fa.deploymentOK {
		var gone struct{ ID string }
		fa.mustJSON(f, "POST", "/projects", fa.user, map[string]any{
			"name": "Gone", "repoUrl": "file:///nonexistent/keelson-fuzz-repo", "framework": "go", "port": 8080}, &gone)
		var trig struct{ DeploymentID string }
		fa.mustJSON(f, "POST", "/deployments", fa.user, map[string]any{"projectId": gone.ID}, &trig)
		fa.ids["deployment"] = trig.DeploymentID
	}
	return fa
}

func (fa *fuzzApp) serve(ctx context.Context, method, target, token string, body []byte, hdr map[string]string) *httptest.ResponseRecorder {
	var req *http.Request
	if body != nil {
		req = httptest.NewRequestWithContext(ctx, method, target, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
	} else {
		req = httptest.NewRequestWithContext(ctx, method, target, nil)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	fa.app.Handler.ServeHTTP(rec, req)
	return rec
}

func (fa *fuzzApp) mustJSON(tb testing.TB, method, path, token string, body, out any) {
	tb.Helper()
	var raw []byte
	if body != nil {
		raw, _ = json.Marshal(body)
	}
	rec := fa.serve(context.Background(), method, path, token, raw, nil)
	if rec.Code >= 300 {
		tb.Fatalf("%s %s: %d %s", method, path, rec.Code, rec.Body)
	}
	if out != nil {
		if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
			tb.Fatalf("%s %s: %v", method, path, err)
		}
	}
}

func (fa *fuzzApp) signup(tb testing.TB, email string) string {
	const pw = "correct horse battery"
	fa.mustJSON(tb, "POST", "/auth/register", "", map[string]any{"email": email, "password": pw, "confirmPassword": pw}, nil)
	var tok struct{ AccessToken string }
	fa.mustJSON(tb, "POST", "/auth/login", "", map[string]any{"email": email, "password": pw}, &tok)
	return tok.AccessToken
}

// checkAnswer fails on a 5xx or an error that is not the error model.
func checkAnswer(t *testing.T, what string, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code >= 500 {
		t.Fatalf("%s: %d %s", what, rec.Code, rec.Body)
	}
	if rec.Code < 400 {
		return
	}
	var e struct {
		StatusCode int             `json:"statusCode"`
		Message    json.RawMessage `json:"message"`
		Error      string          `json:"error"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.StatusCode != rec.Code || e.Error != http.StatusText(rec.Code) {
		t.Fatalf("%s: %d answered %q, not the error model", what, rec.Code, rec.Body)
	}
	var s string
	var list []string
	if json.Unmarshal(e.Message, &s) != nil && (json.Unmarshal(e.Message, &list) != nil || len(list) == 0) {
		t.Fatalf("%s: message %s is neither a string nor a list of strings", what, e.Message)
	}
}

// target fills a route's path parameters with ids that exist.
func (fa *fuzzApp) target(r route) string {
	p := r.path
	switch {
	case strings.HasPrefix(p, "/projects/"):
		p = strings.ReplaceAll(p, "{id}", fa.ids["project"])
	case strings.HasPrefix(p, "/plans/"):
		p = strings.ReplaceAll(p, "{id}", fa.ids["plan"])
	case strings.HasPrefix(p, "/deployments/") && fa.ids["deployment"] != "":
		p = strings.ReplaceAll(p, "{id}", fa.ids["deployment"])
	}
	p = strings.ReplaceAll(p, "{userId}", fa.userID)
	return strings.ReplaceAll(p, "{id}", platform.NewID())
}

// FuzzRequestBodies sends fuzzed JSON bodies to every route that takes one
// (found in the OpenAPI document), as the admin, a user or nobody.
func FuzzRequestBodies(f *testing.F) {
	fa := newFuzzApp(f)
	seeds := []string{
		`{}`, `null`, `[]`, `""`, `{"email":"a@example.com","password":"secret1","confirmPassword":"secret1"}`,
		`{"email":"user@example.com","password":"correct horse battery"}`, `{"refreshToken":"x"}`, `{"token":"x","newPassword":"secret12","confirmPassword":"secret12"}`,
		`{"name":"P","repoUrl":"https://github.com/acme/p","framework":"node","port":3000}`,
		`{"region":"local","planName":"free","envVars":[{"key":"A","value":"1","isSecret":true}]}`,
		`{"name":"x","tier":"PRO","maxProjects":1,"maxDeployments":1,"maxMemoryMi":1,"maxCpuM":1,"maxStorageGi":1,"maxBandwidthGb":1,"buildTimeoutMins":1}`,
		`{"code":"123456"}`, `{"projectId":"` + fa.ids["project"] + `"}`, `{"name":"\u0000"}`, `{"port":1e400}`, `{"port":-0}`,
		`{"envVars":[{"key":"PORT","value":"1"}],"region":"local","planName":"free"}`, `{"a":` + strings.Repeat("[", 200) + `}`,
	}
	for i := range fa.bodyRoutes {
		for j, s := range seeds {
			if j%3 == i%3 {
				f.Add(uint8(i), uint8(j%3), []byte(s))
			}
		}
	}
	f.Fuzz(func(t *testing.T, routeIdx, who uint8, body []byte) {
		r := fa.bodyRoutes[int(routeIdx)%len(fa.bodyRoutes)]
		token := []string{fa.user, fa.admin, ""}[who%3]
		rec := fa.serve(context.Background(), r.method, fa.target(r), token, body, nil)
		checkAnswer(t, r.method+" "+r.path, rec)
	})
}

// FuzzLogStreamParams opens a finished deployment's log stream with fuzzed
// after, since and Last-Event-ID: 200 with ready ... done, 204 for a resume
// at or past its last line, or a 400 naming the parameter; never a 5xx.
func FuzzLogStreamParams(f *testing.F) {
	fa := newFuzzApp(f)
	if !fa.deploymentOK {
		f.Skip("deployments are not wired into the reference server yet")
	}
	id := fa.ids["deployment"]
	platformtest.Eventually(f, 2*time.Minute, "the deployment to end", func() bool {
		var st struct{ Status string }
		fa.mustJSON(f, "GET", "/deployments/"+id+"/status", fa.user, nil, &st)
		return st.Status == "FAILED" || st.Status == "CANCELLED" || st.Status == "LIVE"
	})
	f.Add("", "", "")
	f.Add("1", "", "")
	f.Add("", "2025-01-02T15:04:05Z", "")
	f.Add("3", "2025-01-02T15:04:05+02:00", "2")
	f.Add("-1", "not a time", "x")
	f.Add("99999999999999999999", "", "")
	f.Fuzz(func(t *testing.T, after, since, last string) {
		if !validHeader(last) {
			t.Skip("a header value no client can send")
		}
		q := url.Values{}
		if after != "" {
			q.Set("after", after)
		}
		if since != "" {
			q.Set("since", since)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		hdr := map[string]string{}
		if last != "" {
			hdr["Last-Event-ID"] = last
		}
		rec := fa.serve(ctx, "GET", "/deployments/"+id+"/logs?"+q.Encode(), fa.user, nil, hdr)
		checkAnswer(t, "GET logs", rec)
		if rec.Code == http.StatusOK {
			b := rec.Body.String()
			if !strings.HasPrefix(b, `data: {"type":"ready"}`) || !strings.Contains(b, `"type":"done"`) {
				t.Fatalf("stream after=%q since=%q last=%q: %q", after, since, last, b)
			}
		} else if rec.Code == http.StatusNoContent {
			// A resume at or past the last line of a finished deployment:
			// 204 with no body, so EventSource stops reconnecting.
			if after == "" && last == "" || rec.Body.Len() != 0 {
				t.Fatalf("stream after=%q since=%q last=%q: 204 without a resume cursor or with a body %q", after, since, last, rec.Body)
			}
		} else if rec.Code != http.StatusBadRequest {
			t.Fatalf("stream after=%q since=%q last=%q: %d %s", after, since, last, rec.Code, rec.Body)
		}
	})
}

func validHeader(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return strings.TrimSpace(v) == v
}
