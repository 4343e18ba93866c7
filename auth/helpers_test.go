package auth

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/danielgtaylor/huma/v2/humatest"
	"github.com/keelson-dev/keelson/auth/internal/onetime"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/keelson-dev/keelson/platform/platformtest"
	"github.com/keelson-dev/keelson/platform/secret"
	"github.com/pquerna/otp/totp"
	"github.com/uptrace/bun"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

var sets = []db.MigrationSet{Migrations()}

const testPassword = "correct horse battery"

var testSecret = []byte("test-jwt-secret-0123456789abcdef0123456789")

// testClock is a settable clock.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// captureMailer keeps every mail.
type captureMailer struct {
	mu    sync.Mutex
	mails []Mail
}

func (m *captureMailer) Send(_ context.Context, mail Mail) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mails = append(m.mails, mail)
	return nil
}

func (m *captureMailer) all() []Mail {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Mail(nil), m.mails...)
}

// env is one auth module on a humatest API and a real database.
type env struct {
	t      *testing.T
	db     *bun.DB
	svc    *Service
	api    humatest.TestAPI
	clock  *testClock
	mail   *captureMailer
	logs   *platformtest.SyncBuffer
	bodies []string // every response body, for the no-secrets check
	mu     sync.Mutex
}

func newEnv(t *testing.T, bdb *bun.DB, mutate func(*Deps)) *env {
	t.Helper()
	sealer, err := secret.New("test-seal-key-0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{
		t: t, db: bdb, mail: &captureMailer{}, logs: &platformtest.SyncBuffer{},
		clock: &testClock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)},
	}
	d := Deps{
		DB: bdb, Sealer: sealer, Mailer: e.mail, Clock: e.clock, JWTSecret: testSecret,
		Logger:      slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		AdminEmails: []string{"Boss@Example.com"}, FrontendURL: "https://app.example.com/",
	}
	if mutate != nil {
		mutate(&d)
	}
	_, api := humatest.New(t, platform.APIConfig("test", "1"))
	svc, err := New(d)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Register(api); err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := svc.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	e.svc, e.api = svc, api
	return e
}

// settle waits until every queued mail job has run.
func (e *env) settle() {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for e.svc.mq.Pending() != 0 {
		if time.Now().After(deadline) {
			e.t.Fatal("mail queue did not drain within 10s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// mailsTo settles the queue and answers the mails sent to addr.
func (e *env) mailsTo(addr string) []Mail {
	e.t.Helper()
	e.settle()
	var out []Mail
	for _, m := range e.mail.all() {
		if m.To == addr {
			out = append(out, m)
		}
	}
	return out
}

// do sends a request; token "" means none. headers are "Name: value".
func (e *env) do(method, path, token string, body any, headers ...string) *httptest.ResponseRecorder {
	e.t.Helper()
	var args []any
	if token != "" {
		args = append(args, "Authorization: Bearer "+token)
	}
	for _, h := range headers {
		args = append(args, h)
	}
	if body != nil {
		args = append(args, body)
	}
	resp := e.api.Do(method, path, args...)
	e.mu.Lock()
	e.bodies = append(e.bodies, resp.Body.String())
	e.mu.Unlock()
	return resp
}

// want fails unless resp has status, and decodes its body into out.
func (e *env) want(resp *httptest.ResponseRecorder, status int, out any) {
	e.t.Helper()
	if resp.Code != status {
		e.t.Fatalf("status %d, want %d; body %s", resp.Code, status, resp.Body)
	}
	if out != nil {
		if err := json.Unmarshal(resp.Body.Bytes(), out); err != nil {
			e.t.Fatalf("decode %s: %v", resp.Body, err)
		}
	}
}

func (e *env) register(email string) User {
	e.t.Helper()
	var u User
	e.want(e.do("POST", "/auth/register", "", map[string]any{
		"email": email, "password": testPassword, "confirmPassword": testPassword,
	}), http.StatusCreated, &u)
	return u
}

func (e *env) login(email, password, code string) *httptest.ResponseRecorder {
	e.t.Helper()
	body := map[string]any{"email": email, "password": password}
	if code != "" {
		body["twoFactorCode"] = code
	}
	return e.do("POST", "/auth/login", "", body)
}

func (e *env) tokens(email string) TokenPair {
	e.t.Helper()
	var p TokenPair
	e.want(e.login(email, testPassword, ""), http.StatusOK, &p)
	return p
}

// code is the TOTP code for secret at the test clock's time plus offset.
func (e *env) code(secret string, offset time.Duration) string {
	e.t.Helper()
	c, err := totp.GenerateCodeCustom(secret, e.clock.Now().Add(offset), onetime.Opts)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

func (e *env) count(table string, where string, args ...any) int {
	e.t.Helper()
	q := e.db.NewSelect().TableExpr(table)
	if where != "" {
		q = q.Where(where, args...)
	}
	n, err := q.Count(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return int(n)
}

// errBody is the error model of DESIGN.md section 4.
type errBody struct {
	StatusCode int    `json:"statusCode"`
	Message    any    `json:"message"`
	Error      string `json:"error"`
	Code       string `json:"code"`
}

func (e *env) wantErr(resp *httptest.ResponseRecorder, status int, contains string) errBody {
	e.t.Helper()
	var b errBody
	e.want(resp, status, &b)
	msg := fmt.Sprint(b.Message)
	if contains != "" && !strings.Contains(msg, contains) {
		e.t.Fatalf("status %d body %s: message does not contain %q", status, resp.Body, contains)
	}
	return b
}

type httptestResp = httptest.ResponseRecorder

// resets settles the queue and answers the password-reset mails, in order.
func (e *env) resets() []Mail {
	e.t.Helper()
	e.settle()
	var out []Mail
	for _, m := range e.mail.all() {
		if strings.Contains(m.Text, "/reset-password?token=") {
			out = append(out, m)
		}
	}
	return out
}

// emailLink settles the queue and answers the token of the latest
// /verify-email link mailed to addr.
func (e *env) emailLink(addr string) string {
	e.t.Helper()
	ms := e.mailsTo(addr)
	const marker = "/verify-email?token="
	for i := len(ms) - 1; i >= 0; i-- {
		if j := strings.Index(ms[i].Text, marker); j >= 0 {
			tok, err := url.QueryUnescape(strings.Fields(ms[i].Text[j+len(marker):])[0])
			if err != nil {
				e.t.Fatal(err)
			}
			return tok
		}
	}
	e.t.Fatalf("no verification link mailed to %s", addr)
	return ""
}

// verify redeems the latest link mailed to addr.
func (e *env) verify(addr string) {
	e.t.Helper()
	e.want(e.do("POST", "/auth/verify-email", "", map[string]any{"token": e.emailLink(addr)}), http.StatusOK, nil)
}
