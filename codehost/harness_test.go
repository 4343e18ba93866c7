package codehost_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/danielgtaylor/huma/v2/adapters/humago"
	"github.com/keelson-dev/keelson/codehost"
	"github.com/keelson-dev/keelson/codehost/github"
	"github.com/keelson-dev/keelson/codehost/githubfake"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/keelson-dev/keelson/platform/httpx"
	"github.com/keelson-dev/keelson/platform/platformtest"
	"github.com/uptrace/bun"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

const (
	webhookSecret = "whsec-test-0123456789"
	frontend      = "http://frontend.test"
)

var sets = []db.MigrationSet{codehost.Migrations()}

// users authenticates bearer tokens: the token is the user id; the token
// "admin:<id>" is an admin. It stands in for the auth module.
type users struct{}

func (users) Authenticate(_ context.Context, tok string) (platform.Principal, error) {
	if id, ok := strings.CutPrefix(tok, "admin:"); ok {
		return platform.Principal{UserID: id, Role: platform.RoleAdmin}, nil
	}
	if platform.ValidID(tok) {
		return platform.Principal{UserID: tok, Role: platform.RoleUser}, nil
	}
	return platform.Principal{}, platform.ErrUnauthorized
}

// projectBook is an in-memory ProjectLookup standing in for the projects module.
type projectBook struct {
	mu       sync.Mutex
	projects []codehost.RepoProject
	repoIDs  map[string]string // project id -> codehost repo id
	secrets  map[string]string // project id -> webhookSecret
	lookups  int               // ProjectsForRepository calls
	reads    int               // WebhookSecret calls
	barred   map[string]bool   // project id -> its owner may no longer deploy it
	mayErr   error             // what MayDeploy answers, when set
}

// MayDeploy implements codehost.ProjectLookup: a project's owner may deploy
// it unless barred.
func (b *projectBook) MayDeploy(_ context.Context, userID, projectID string) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.mayErr != nil {
		return false, b.mayErr
	}
	for _, p := range b.projects {
		if p.ProjectID == projectID {
			return p.OwnerID == userID && !b.barred[projectID], nil
		}
	}
	return false, nil
}

// failMayDeploy makes MayDeploy answer err (nil: answer again).
func (b *projectBook) failMayDeploy(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.mayErr = err
}

// bar makes projectID's owner one who may no longer deploy it (a team
// member removed or demoted), or again one who may (bar false).
func (b *projectBook) bar(projectID string, bar bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.barred == nil {
		b.barred = map[string]bool{}
	}
	b.barred[projectID] = bar
}

// WebhookSecret implements codehost.ProjectSecrets.
func (b *projectBook) WebhookSecret(_ context.Context, projectID string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reads++
	for _, p := range b.projects {
		if p.ProjectID == projectID {
			return b.secrets[projectID], nil
		}
	}
	return "", platform.ErrNotFound
}

// counts returns the lookups and secret reads so far.
func (b *projectBook) counts() (lookups, reads int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lookups, b.reads
}

func (b *projectBook) setSecret(projectID, secret string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.secrets == nil {
		b.secrets = map[string]string{}
	}
	b.secrets[projectID] = secret
}

func (b *projectBook) add(p codehost.RepoProject) codehost.RepoProject {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p.ProjectID == "" {
		p.ProjectID = platform.NewID()
	}
	b.projects = append(b.projects, p)
	return p
}

func (b *projectBook) ProjectsForRepository(_ context.Context, urls []string, repoID string) ([]codehost.RepoProject, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lookups++
	var out []codehost.RepoProject
	for _, p := range b.projects {
		if slices.ContainsFunc(urls, func(u string) bool {
			return strings.EqualFold(strings.TrimSuffix(u, ".git"), strings.TrimSuffix(p.RepoURL, ".git"))
		}) || (repoID != "" && b.repoIDs[p.ProjectID] == repoID) {
			p.HasWebhookSecret = b.secrets[p.ProjectID] != ""
			out = append(out, p)
		}
	}
	return out, nil
}

// recorder is a Deployer that records triggers; fail, when set, decides an error.
type recorder struct {
	mu    sync.Mutex
	calls []trigger
	fail  func(projectID string) error
}

type trigger struct{ ProjectID, OwnerID, SHA, Reason, DeploymentID string }

func (r *recorder) Trigger(_ context.Context, projectID, ownerID, sha, reason string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		if err := r.fail(projectID); err != nil {
			return "", err
		}
	}
	id := platform.NewID()
	r.calls = append(r.calls, trigger{projectID, ownerID, sha, reason, id})
	return id, nil
}

func (r *recorder) triggers() []trigger {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

func (b *projectBook) OwnsProject(_ context.Context, userID, projectID string) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.projects {
		if p.ProjectID == projectID {
			return p.OwnerID == userID, nil
		}
	}
	return false, nil
}

// identities is a LinkedAccounts standing in for the auth module's OAuth
// links: each user's code-host login and a user token the fake GitHub
// minted for that login.
type identities struct {
	mu     sync.Mutex
	logins map[string]string
	tokens map[string]string
}

func (i *identities) set(userID, login, token string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.logins[userID], i.tokens[userID] = login, token
}

func (i *identities) CodehostLogin(_ context.Context, userID string) (string, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.logins[userID], nil
}

func (i *identities) CodehostAccessToken(_ context.Context, userID string) (string, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.tokens[userID], nil
}

// linkIdentity links code-host login to userID, with a fresh user token
// minted by the fake, and answers the token.
func (e *env) linkIdentity(userID, login string) string {
	tok := e.fake.UserToken(login)
	e.ids.set(userID, login, tok)
	return tok
}

// clock is a settable clock shared by the service, the provider and the fake.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.t.IsZero() {
		return time.Now().UTC()
	}
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.t.IsZero() {
		c.t = time.Now().UTC()
	}
	c.t = c.t.Add(d)
}

type env struct {
	t        testing.TB
	db       *bun.DB
	fake     *githubfake.Server
	provider *github.Client
	svc      *codehost.Service
	projects *projectBook
	deployer *recorder
	clock    *clock
	ids      *identities
	url      string // our API over real HTTP
	admin    string // an admin token
}

type envOpts struct {
	accounts  codehost.LinkedAccounts // default: e.ids
	connector codehost.IdentityConnector
	missing   []string
	noStart   bool
	results   codehost.DeploymentResults // set: commit statuses through the provider
	pageSize  int
	fake      *githubfake.Server
	projects  *projectBook
	deployer  *recorder
	ids       *identities // shared with another env (a restart)
	// recheck sets Deps.RecheckInterval; poll, Deps.PollInterval.
	recheck, poll time.Duration
}

// newEnv builds the module on bdb against a fresh fake GitHub, serves it on a
// real HTTP server and starts its worker.
func newEnv(t testing.TB, bdb *bun.DB, o envOpts) *env {
	t.Helper()
	e := &env{t: t, db: bdb, projects: &projectBook{repoIDs: map[string]string{}}, deployer: &recorder{}, clock: &clock{},
		ids: &identities{logins: map[string]string{}, tokens: map[string]string{}}}
	e.admin = "admin:" + platform.NewID()
	if o.projects != nil {
		e.projects = o.projects
	}
	if o.deployer != nil {
		e.deployer = o.deployer
	}
	if o.ids != nil {
		e.ids = o.ids
	}
	e.fake = o.fake
	if e.fake == nil {
		e.fake = githubfake.New(githubfake.Options{Now: e.clock.Now, PageSize: o.pageSize, Key: testKey(t)})
		t.Cleanup(e.fake.Close)
	}
	var err error
	e.provider, err = github.New(github.Config{
		AppID: e.fake.AppID, AppSlug: e.fake.AppSlug, PrivateKey: e.fake.Key,
		APIURL: e.fake.URL, WebURL: e.fake.WebURL, Clock: e.clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	var accts codehost.LinkedAccounts = e.ids
	if o.accounts != nil {
		accts = o.accounts
	}
	d := codehost.Deps{
		DB: bdb, Auth: users{}, Provider: e.provider, WebhookSecret: webhookSecret,
		StateKey: []byte("state-key-0123456789abcdef0123456789"), FrontendURL: frontend,
		Projects: e.projects, Secrets: e.projects, Deployer: e.deployer, Accounts: accts, Connector: o.connector, Clock: e.clock, Missing: o.missing,
		RecheckInterval: o.recheck, PollInterval: o.poll,
	}
	if o.results != nil {
		d.Statuses, d.Results = e.provider, o.results
	}
	if len(o.missing) > 0 {
		d.Provider = nil
		if slices.Contains(o.missing, "KEELSON_CODEHOST_WEBHOOK_SECRET") {
			d.WebhookSecret = ""
		}
	}
	e.svc, err = codehost.New(d)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	api := humago.New(mux, platform.APIConfig("codehost-test", "1"))
	if err := e.svc.Register(api); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpx.Middleware(slog.New(slog.DiscardHandler), mux))
	t.Cleanup(srv.Close)
	e.url = srv.URL
	if !o.noStart {
		if err := e.svc.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.svc.Close(context.Background()) })
	}
	return e
}

var (
	keyOnce sync.Once
	keyVal  *rsa.PrivateKey
	keyErr  error
)

// testKey shares one RSA key across the tests of this binary: generating a
// 2048-bit key per test is slow on two shared cores.
func testKey(t testing.TB) *rsa.PrivateKey {
	t.Helper()
	keyOnce.Do(func() { keyVal, keyErr = rsa.GenerateKey(rand.Reader, 2048) })
	if keyErr != nil {
		t.Fatal(keyErr)
	}
	return keyVal
}

var noRedirect = &http.Client{
	Timeout:       30 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// do sends a request with an optional bearer token; it returns status, body, headers.
func (e *env) do(method, path, token string, body io.Reader, hdr map[string]string) (int, []byte, http.Header) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

func (e *env) getJSON(path, token string, want int, out any) http.Header {
	e.t.Helper()
	status, body, hdr := e.do(http.MethodGet, path, token, nil, nil)
	if status != want {
		e.t.Fatalf("GET %s: status %d, want %d: %s", path, status, want, body)
	}
	if out != nil {
		if err := json.Unmarshal(body, out); err != nil {
			e.t.Fatalf("GET %s: decode %s: %v", path, body, err)
		}
	}
	return hdr
}

// connect runs GET /codehost/connect as user and returns the state.
func (e *env) connect(user string) string {
	e.t.Helper()
	var out struct {
		InstallURL string `json:"installUrl"`
	}
	e.getJSON("/codehost/connect", user, http.StatusOK, &out)
	u, err := url.Parse(out.InstallURL)
	if err != nil {
		e.t.Fatal(err)
	}
	want := e.fake.WebURL + "/apps/" + e.fake.AppSlug + "/installations/new"
	if got := u.Scheme + "://" + u.Host + u.Path; got != want {
		e.t.Fatalf("installUrl %s, want %s?state=...", out.InstallURL, want)
	}
	st := u.Query().Get("state")
	if st == "" {
		e.t.Fatal("installUrl has no state")
	}
	return st
}

// callback runs the install callback and returns the redirect target.
func (e *env) callback(installationID, state string) *url.URL {
	e.t.Helper()
	q := url.Values{"installation_id": {installationID}, "state": {state}, "setup_action": {"install"}}
	status, body, hdr := e.do(http.MethodGet, "/codehost/app/callback?"+q.Encode(), "", nil, nil)
	if status != http.StatusFound {
		e.t.Fatalf("callback: status %d, want 302: %s", status, body)
	}
	u, err := url.Parse(hdr.Get("Location"))
	if err != nil || !strings.HasPrefix(hdr.Get("Location"), frontend+"/settings/connected-accounts?") {
		e.t.Fatalf("callback redirected to %q", hdr.Get("Location"))
	}
	return u
}

// install links installation id to user through connect and callback. A
// user without a code-host identity is linked first as the installation's
// account (its owner, for a personal installation).
func (e *env) install(user string, id int64) {
	e.t.Helper()
	if login, _ := e.ids.CodehostLogin(context.Background(), user); login == "" {
		e.linkIdentity(user, e.fake.Account(id))
	}
	u := e.callback(itoa(id), e.connect(user))
	if u.Query().Get("codehost") != "connected" {
		e.t.Fatalf("install %d: redirected to %s", id, u)
	}
}

// deliver sends a signed webhook and expects 200 {"ok":true}.
func (e *env) deliver(event, deliveryID string, body []byte) {
	e.t.Helper()
	status, resp, err := e.fake.Deliver(context.Background(), nil, e.url+"/codehost/webhook",
		githubfake.Delivery{Event: event, DeliveryID: deliveryID, Body: body, Secret: webhookSecret})
	if err != nil {
		e.t.Fatal(err)
	}
	if status != http.StatusOK || strings.TrimSpace(string(resp)) != `{"ok":true}` {
		e.t.Fatalf("deliver %s: status %d body %s", event, status, resp)
	}
}

type decision struct {
	ProjectID    string `json:"projectId"`
	Decision     string `json:"decision"`
	DeploymentID string `json:"deploymentId"`
	Detail       string `json:"detail"`
}

type delivery struct {
	ID             string     `json:"id"`
	DeliveryID     string     `json:"deliveryId"`
	Event          string     `json:"event"`
	Action         string     `json:"action"`
	Repository     string     `json:"repository"`
	InstallationID int64      `json:"installationId"`
	ReceivedAt     time.Time  `json:"receivedAt"`
	SignatureValid bool       `json:"signatureValid"`
	Status         string     `json:"status"`
	Detail         string     `json:"detail"`
	Decisions      []decision `json:"decisions"`
}

func (e *env) deliveries(token, query string) ([]delivery, string) {
	e.t.Helper()
	var out []delivery
	hdr := e.getJSON("/codehost/deliveries"+query, token, http.StatusOK, &out)
	return out, hdr.Get("X-Next-Cursor")
}

// waitProcessed polls the delivery log (as an admin) until deliveryID is no
// longer pending, and returns it.
func (e *env) waitProcessed(deliveryID string) delivery {
	e.t.Helper()
	var got delivery
	platformtest.Eventually(e.t, 20*time.Second, "delivery "+deliveryID+" to be processed", func() bool {
		all, _ := e.deliveries(e.admin, "?limit=100")
		for _, d := range all {
			if d.DeliveryID == deliveryID && d.Status != codehost.DeliveryPending {
				got = d
				return true
			}
		}
		return false
	})
	return got
}

func (e *env) count(table string) int {
	e.t.Helper()
	n, err := e.db.NewSelect().Table(table).Count(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return int(n)
}

func decisionOf(d delivery, projectID string) decision {
	for _, x := range d.Decisions {
		if x.ProjectID == projectID {
			return x
		}
	}
	return decision{}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func each(t *testing.T, fn func(t *testing.T, bdb *bun.DB)) { dbtest.Each(t, sets, fn) }
