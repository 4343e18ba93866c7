package oauth_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
	"github.com/keelson-dev/keelson/auth"
	"github.com/keelson-dev/keelson/auth/oauth"
	"github.com/keelson-dev/keelson/auth/oauth/oauthtest"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/keelson-dev/keelson/platform/platformtest"
	"github.com/keelson-dev/keelson/platform/secret"
	"github.com/uptrace/bun"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

var sets = []db.MigrationSet{auth.Migrations(), oauth.Migrations()}

const frontend = "http://frontend.test"

// offsetClock is the real time plus a settable offset, so the fake OIDC
// provider's real-time tokens stay valid until a test moves it.
type offsetClock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *offsetClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().UTC().Add(c.off)
}

func (c *offsetClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.off += d
	c.mu.Unlock()
}

// env is the auth and oauth modules on one real HTTP server over bdb, with a
// fake code host and a fake identity provider.
type env struct {
	t        *testing.T
	bdb      *bun.DB
	url      string
	api      huma.API
	accounts *auth.Service
	svc      *oauth.Service
	gh       *oauthtest.GitHub
	idp      *oauthtest.OIDC
	clock    *offsetClock
	sealer   *secret.Sealer
	logs     *platformtest.SyncBuffer
}

func newEnv(t *testing.T, bdb *bun.DB, mutate func(*oauth.Deps)) *env {
	t.Helper()
	e := &env{t: t, bdb: bdb, gh: oauthtest.NewGitHub(t), idp: oauthtest.NewOIDC(t), clock: &offsetClock{}, logs: &platformtest.SyncBuffer{}}
	log := slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var err error
	if e.sealer, err = secret.New("test-seal-key-0123456789abcdef0123456789ab"); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	e.url = srv.URL
	e.api = humago.New(mux, platform.APIConfig("test", "1"))
	e.api.UseMiddleware(func(ctx huma.Context, next func(huma.Context)) {
		next(huma.WithContext(ctx, platform.WithLogger(ctx.Context(), log)))
	})
	e.accounts, err = auth.New(auth.Deps{
		DB: bdb, Sealer: e.sealer, Logger: log, FrontendURL: frontend,
		JWTSecret: []byte("test-jwt-secret-0123456789abcdef0123456789"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.accounts.Register(e.api); err != nil {
		t.Fatal(err)
	}
	d := oauth.Deps{
		DB: bdb, Accounts: e.accounts, Authn: e.accounts, Sealer: e.sealer, Clock: e.clock, Logger: log,
		PublicURL: srv.URL, FrontendURL: frontend,
		Codehost: oauth.CodehostConfig{ClientID: e.gh.ClientID, ClientSecret: e.gh.ClientSecret, WebURL: e.gh.URL, APIURL: e.gh.URL},
		IDP:      oauth.IDPConfig{Issuer: e.idp.URL, ClientID: e.idp.ClientID, ClientSecret: e.idp.ClientSecret},
	}
	if mutate != nil {
		mutate(&d)
	}
	if e.svc, err = oauth.New(d); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Register(e.api); err != nil {
		t.Fatal(err)
	}
	return e
}

// browser is a cookie-keeping HTTP client that never follows redirects, so
// the test sees each hop.
type browser struct {
	t *testing.T
	c *http.Client
}

func newBrowser(t *testing.T) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, c: &http.Client{
		Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// resp is a finished response.
type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) location(t *testing.T) *url.URL {
	t.Helper()
	if r.status != http.StatusFound {
		t.Fatalf("status %d, want 302; body %s", r.status, r.body)
	}
	u, err := url.Parse(r.header.Get("Location"))
	if err != nil || u.Scheme == "" {
		t.Fatalf("Location %q", r.header.Get("Location"))
	}
	return u
}

func (r resp) message() string {
	var b struct {
		Message any `json:"message"`
	}
	_ = json.Unmarshal(r.body, &b)
	if s, ok := b.Message.(string); ok {
		return s
	}
	raw, _ := json.Marshal(b.Message)
	return string(raw)
}

func (b *browser) do(req *http.Request) resp {
	b.t.Helper()
	res, err := b.c.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return resp{status: res.StatusCode, header: res.Header, body: body}
}

func (b *browser) get(u string, hdr ...string) resp {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return b.do(req)
}

func (b *browser) postJSON(u string, body any) resp {
	b.t.Helper()
	raw, _ := json.Marshal(body)
	req, err := http.NewRequest(http.MethodPost, u, bytes.NewReader(raw))
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return b.do(req)
}

func (b *browser) postWithToken(u, token string, body any) resp {
	b.t.Helper()
	raw, _ := json.Marshal(body)
	req, err := http.NewRequest(http.MethodPost, u, bytes.NewReader(raw))
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	return b.do(req)
}

// begin follows a start route (path with query) to the provider, which
// approves, and answers the callback URL the provider redirected to, not yet
// visited.
func (e *env) begin(b *browser, path string, hdr ...string) *url.URL {
	e.t.Helper()
	r := b.get(e.url+path, hdr...)
	authz := r.location(e.t)
	cb := b.get(authz.String()).location(e.t)
	if !strings.HasPrefix(cb.String(), e.url+"/auth/") {
		e.t.Fatalf("provider redirected to %s, not to our callback", cb)
	}
	return cb
}

// ticket asks for a connect ticket with token from browser b (which keeps the
// binding cookie) and answers the path and query of its connectUrl.
func (e *env) ticket(b *browser, token string) string {
	e.t.Helper()
	r := b.postWithToken(e.url+"/auth/codehost/connect", token, nil)
	if r.status != http.StatusOK {
		e.t.Fatalf("POST /auth/codehost/connect: %d %s", r.status, r.body)
	}
	var out struct {
		ConnectURL string `json:"connectUrl"`
	}
	if err := json.Unmarshal(r.body, &out); err != nil {
		e.t.Fatal(err)
	}
	u, err := url.Parse(out.ConnectURL)
	if err != nil || u.Query().Get("ticket") == "" {
		e.t.Fatalf("connectUrl %q", out.ConnectURL)
	}
	return u.Path + "?" + u.RawQuery
}

// flow runs a whole flow from the start route and answers the frontend URL it ends on.
func (e *env) flow(b *browser, path string, hdr ...string) *url.URL {
	e.t.Helper()
	cb := e.begin(b, path, hdr...)
	r := b.get(cb.String())
	u := r.location(e.t)
	if !strings.HasPrefix(u.String(), frontend+"/") {
		e.t.Fatalf("callback redirected to %s, not to the frontend", u)
	}
	if r.header.Get("Cache-Control") != "no-store" || r.header.Get("Referrer-Policy") != "no-referrer" {
		e.t.Errorf("callback redirect headers: Cache-Control %q, Referrer-Policy %q",
			r.header.Get("Cache-Control"), r.header.Get("Referrer-Policy"))
	}
	return u
}

// count answers the rows of table.
func (e *env) count(table string) int {
	e.t.Helper()
	n, err := e.bdb.NewSelect().Table(table).Count(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return int(n)
}

// userIDOf answers the user an access token belongs to.
func (e *env) userIDOf(access string) string {
	e.t.Helper()
	p, err := e.accounts.Authenticate(context.Background(), access)
	if err != nil {
		e.t.Fatalf("access token from the redirect does not authenticate: %v", err)
	}
	return p.UserID
}

// loggedIn checks a tokens-mode success redirect and answers the user id.
func (e *env) loggedIn(u *url.URL) string {
	e.t.Helper()
	q := u.Query()
	if u.Path != "/auth/callback" || q.Get("error") != "" || q.Get("accessToken") == "" || q.Get("refreshToken") == "" {
		e.t.Fatalf("not a login success redirect: %s", u)
	}
	return e.userIDOf(q.Get("accessToken"))
}

// refused checks a login refusal redirect with status code.
func (e *env) refused(u *url.URL, code string) {
	e.t.Helper()
	q := u.Query()
	if u.Path != "/auth/callback" || q.Get("error") != code || q.Get("accessToken") != "" || q.Get("code") != "" {
		e.t.Fatalf("want refusal %q, got %s", code, u)
	}
}

// password makes a password account and answers it and a fresh access token.
func (e *env) password(email string) (*auth.User, string) {
	e.t.Helper()
	ctx := context.Background()
	u, err := e.accounts.CreateUser(ctx, auth.CreateUserParams{Email: email, Password: "correct horse battery"})
	if err != nil {
		e.t.Fatal(err)
	}
	tp, err := e.accounts.IssueTokens(ctx, u.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	return u, tp.AccessToken
}

func (e *env) user(id string) *auth.User {
	e.t.Helper()
	u, err := e.accounts.UserByID(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return u
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
