package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// testServer is a whole reference server on real sockets: the API on an
// httptest server and the ingress on its own loopback port.
type testServer struct {
	App     *App
	URL     string // API base URL
	Ingress string // ingress host:port ("" when deployments are not wired)
	// IngressTLS is the ingress's HTTPS host:port ("" when off).
	IngressTLS string
	// MetricsURL is the /metrics URL on the metrics listener
	// (Config.MetricsAddr, e.g. "127.0.0.1:0"); "" when metrics are off.
	MetricsURL string
	Client     *http.Client
	Logs       *platformtest.SyncBuffer // everything the server logged (JSON lines)

	api    *httptest.Server
	stopFn func()
	once   sync.Once
}

// startServer builds the server on dbURL ("" = SQLite in a temp data dir) with
// test defaults (local repos allowed, fixed secrets, loopback ingress), lets
// mutate adjust the config, and stops it when t ends.
func startServer(t testing.TB, dbURL string, mutate func(*Config)) *testServer {
	t.Helper()
	ingressL, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return startServerOn(t, dbURL, ingressL, nil, mutate)
}

// startServerOn is startServer with the ingress's listeners given (tlsL,
// when not nil, serves its HTTPS: set KEELSON_INGRESS_TLS_ADDR in mutate).
func startServerOn(t testing.TB, dbURL string, ingressL, tlsL net.Listener, mutate func(*Config)) *testServer {
	t.Helper()
	cfg, err := LoadConfig(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = testDataDir(t)
	cfg.DatabaseURL = dbURL
	cfg.JWTSecret = "test-jwt-secret-0123456789abcdef0123456789"
	cfg.SecretKey = "test-seal-key-0123456789abcdef0123456789ab"
	cfg.AllowLocalRepos = true
	// The e2e suites build their Go apps with the host's toolchain; the docker
	// runtime has its own suite (e2e_docker_test.go).
	cfg.Runtime = "process"
	cfg.AdminEmails = []string{"admin@example.com"}
	cfg.IngressAddr = ingressL.Addr().String()
	if mutate != nil {
		mutate(&cfg)
	}
	return startServerWith(t, cfg, ingressL, tlsL)
}

// testDataDir returns a fresh data dir for a server under test whose Go build
// cache (<data>/cache/go-build, what the process runtime gives every build as
// GOCACHE) is the test runner's own GOCACHE. Without it each server's first Go
// app build compiles the standard library again: about a minute of both cores
// on this 2-core CI machine per server, the main cause of the e2e suites'
// time and of their timeouts under load. Builds still run in full; only
// compiled packages are shared (Go's cache is safe for concurrent builds).
func testDataDir(t testing.TB) string {
	t.Helper()
	data := t.TempDir()
	if gocache := runnerGOCACHE(); gocache != "" {
		if err := os.MkdirAll(filepath.Join(data, "cache"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(gocache, filepath.Join(data, "cache", "go-build")); err != nil {
			t.Fatal(err)
		}
	}
	return data
}

// runnerGOCACHE is `go env GOCACHE` of the test runner ("" when off or unknown).
var runnerGOCACHE = sync.OnceValue(func() string {
	out, err := exec.Command("go", "env", "GOCACHE").Output()
	if gc := strings.TrimSpace(string(out)); err == nil && gc != "off" && filepath.IsAbs(gc) {
		return gc
	}
	return ""
})

// startServerWith starts a server on an explicit config (e.g. to restart one
// over the same data dir and database).
func startServerWith(t testing.TB, cfg Config, ingressL net.Listener, tlsL ...net.Listener) *testServer {
	t.Helper()
	logs := &platformtest.SyncBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx := context.Background()
	app, err := NewApp(ctx, cfg, log)
	if err != nil {
		t.Fatalf("NewApp: %v", err)
	}
	ts := &testServer{App: app, Logs: logs, Client: &http.Client{Timeout: 60 * time.Second}}
	ts.api = httptest.NewServer(app.Handler)
	ts.URL = ts.api.URL
	var ingressSrv *http.Server
	if app.Ingress != nil {
		if ingressL == nil {
			if ingressL, err = net.Listen("tcp", cfg.IngressAddr); err != nil {
				t.Fatal(err)
			}
		}
		ingressSrv = &http.Server{Handler: app.Ingress}
		go ingressSrv.Serve(ingressL) //nolint:errcheck
		ts.Ingress = ingressL.Addr().String()
		if app.ingressTLS != nil && len(tlsL) == 1 && tlsL[0] != nil {
			sec := &http.Server{Handler: app.ingressTLS.handler, TLSConfig: app.ingressTLS.config}
			go sec.ServeTLS(tlsL[0], "", "") //nolint:errcheck
			ts.IngressTLS = tlsL[0].Addr().String()
			t.Cleanup(func() { sec.Close() })
		}
	} else if ingressL != nil {
		ingressL.Close()
	}
	stopMetrics := func() {}
	t.Cleanup(func() { ts.stop() })
	// A failed test shows what each of its servers warned of: a CI run
	// leaves nothing else to read.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the server at %s warned or failed:\n%s", ts.URL, lastLines(errorLines(logs.String()), 60))
		}
	})
	ts.stopFn = func() {
		stopMetrics()
		app.cancelShutdown()
		ts.api.CloseClientConnections()
		ts.api.Close()
		if ingressSrv != nil {
			ingressSrv.Close()
		}
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := app.Close(cctx); err != nil {
			t.Logf("close: %v", err)
		}
	}
	if app.Metrics != nil {
		ml, err := listenMetrics(cfg.MetricsAddr)
		if err != nil {
			t.Fatal(err)
		}
		stopMetrics = serveMetrics(ctx, ml, app.Metrics, log)
		ts.MetricsURL = "http://" + ml.Addr().String() + "/metrics"
	}
	return ts
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("(%d lines before these)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// stop shuts the server down (idempotent).
func (ts *testServer) stop() {
	ts.once.Do(func() {
		if ts.stopFn != nil {
			ts.stopFn()
		}
	})
}

// eachDB runs fn against SQLite and against a fresh Postgres schema.
func eachDB(t *testing.T, fn func(t *testing.T, dbURL string)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		fn(t, "")
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		fn(t, dbtest.PostgresURL(t))
	})
}

// do sends a JSON request (body nil for none; a []byte or string is sent raw)
// with an optional bearer token and returns status, body and headers.
func (ts *testServer) do(t testing.TB, method, path, token string, body any) (int, []byte, http.Header) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, ts.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := ts.Client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp.StatusCode, out, resp.Header
}

// doJSON is do that also decodes the response into out and fails unless the
// status is want.
func (ts *testServer) doJSON(t testing.TB, want int, method, path, token string, body, out any) http.Header {
	t.Helper()
	status, raw, hdr := ts.do(t, method, path, token, body)
	if status != want {
		t.Fatalf("%s %s: status %d, want %d; body %s", method, path, status, want, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, path, raw, err)
		}
	}
	return hdr
}

// signup registers email with a password and logs in, returning the access token.
func (ts *testServer) signup(t testing.TB, email string) string {
	t.Helper()
	const pw = "correct horse battery"
	ts.doJSON(t, http.StatusCreated, "POST", "/auth/register", "", map[string]any{
		"email": email, "password": pw, "confirmPassword": pw,
	}, nil)
	var tok struct {
		AccessToken string `json:"accessToken"`
	}
	ts.doJSON(t, http.StatusOK, "POST", "/auth/login", "", map[string]any{"email": email, "password": pw}, &tok)
	if tok.AccessToken == "" {
		t.Fatal("login returned no accessToken")
	}
	// An admin-listed address is ADMIN only once verified: verify it by the
	// link the log mailer wrote (KEELSON_SMTP_URL unset in tests).
	if ts.App != nil && slices.Contains(ts.App.Cfg.AdminEmails, email) && ts.App.Cfg.SMTPURL == "" {
		ts.doJSON(t, http.StatusOK, "POST", "/auth/verify-email", "", map[string]any{
			"token": loggedLink(t, ts.Logs, email, "/verify-email?token=")}, nil)
	}
	return tok.AccessToken
}

// loggedLink polls the log for the latest mail the log mailer wrote to addr
// holding a link with path (e.g. "/verify-email?token=") and answers its token.
func loggedLink(t testing.TB, logs interface{ String() string }, addr, path string) string {
	t.Helper()
	re := regexp.MustCompile(regexp.QuoteMeta(path) + `([A-Za-z0-9_-]{43})`)
	tok := ""
	platformtest.Eventually(t, 10*time.Second, "a mail to "+addr+" with "+path, func() bool {
		for _, l := range strings.Split(logs.String(), "\n") {
			var rec struct {
				To   string `json:"to"`
				Body string `json:"body"`
			}
			if json.Unmarshal([]byte(l), &rec) != nil || rec.To != addr {
				continue
			}
			if m := re.FindStringSubmatch(rec.Body); m != nil {
				tok = m[1]
			}
		}
		return tok != ""
	})
	return tok
}
