package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/auth/oauth/oauthtest"
	"github.com/keelson-dev/keelson/codehost/githubfake"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

const e2eWebhookSecret = "e2e-webhook-secret-0123456789"

// gitServer is a local git smart-HTTP server (git http-backend over CGI) that,
// like the code host, serves a private repository only to a basic-auth
// x-access-token whose password is an installation token the fake minted for
// an installation that can access that repository.
type gitServer struct {
	URL      string
	root     string
	authOK   atomic.Int64 // requests with a valid installation token
	rejected atomic.Int64 // requests refused for missing or bad credentials
}

func newGitServer(t *testing.T, fake *githubfake.Server) *gitServer {
	t.Helper()
	execPath, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Skipf("git is not installed: %v", err)
	}
	backend := filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend")
	if _, err := os.Stat(backend); err != nil {
		t.Skip("git-http-backend is not installed")
	}
	g := &gitServer{root: t.TempDir()}
	cgiHandler := &cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + g.root, "GIT_HTTP_EXPORT_ALL=1"}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		parts := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/"), "/", 3)
		user, pass, ok := r.BasicAuth()
		if len(parts) < 3 || !ok || user != "x-access-token" ||
			!fake.CanAccess(pass, parts[0]+"/"+strings.TrimSuffix(parts[1], ".git")) {
			g.rejected.Add(1)
			w.Header().Set("WWW-Authenticate", `Basic realm="GitHub"`)
			http.Error(w, "Invalid username or token.", http.StatusUnauthorized)
			return
		}
		g.authOK.Add(1)
		cgiHandler.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	g.URL = srv.URL
	return g
}

// gitRun runs git in dir with a fixed identity and no user configuration.
func gitRun(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=Octo Cat", "GIT_AUTHOR_EMAIL=octocat@example.com",
		"GIT_COMMITTER_NAME=Octo Cat", "GIT_COMMITTER_EMAIL=octocat@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// commit writes files in the work tree, commits them on branch and pushes to
// the bare repository; it returns the commit.
func commit(t testing.TB, work, bare, branch string, files map[string]string, msg string) string {
	t.Helper()
	gitRun(t, work, "checkout", "-q", "-B", branch)
	for name, body := range files {
		mode := os.FileMode(0o644)
		if strings.HasPrefix(body, "\x7fELF") {
			mode = 0o755 // a prebuilt binary is committed executable
		}
		if err := os.WriteFile(filepath.Join(work, name), []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
	gitRun(t, work, "add", "-A")
	gitRun(t, work, "commit", "-q", "-m", msg)
	gitRun(t, work, "push", "-q", bare, branch)
	return gitRun(t, work, "rev-parse", "HEAD")
}

// TestCodehostE2E: install the app -> callback -> repositories -> a signed
// push webhook deploys the project from a private repository (cloned with an
// installation token) and the app answers at its URL; an unsigned or
// mis-signed webhook changes nothing; the same delivery twice deploys once; a
// push to another branch records "branch mismatch".
func TestCodehostE2E(t *testing.T) {
	eachDB(t, func(t *testing.T, dbURL string) {
		// A private repository octocat/site with a static site on main.
		h := newCodehostHarness(t, "octocat", "site", "<h1>site v1</h1>\n")
		gh, fake, gs := h.gh, h.fake, h.gs
		repo := &githubfake.Repository{ID: 4242, Owner: "octocat", Name: "site", Private: true, DefaultBranch: "main"}
		fake.AddInstallation(githubfake.Installation{ID: 77, Account: "octocat", Repositories: []*githubfake.Repository{repo}})
		h.addUser(583231, "octocat")

		ts := h.start(t, dbURL)
		token := ts.signup(t, "octocat@example.com")

		// Install: octocat has no code-host identity yet, so connect's URL goes
		// through the code host's OAuth first, then on to the install page with
		// a state; the provider sends that state back to the callback with the
		// installation.
		state, loc := h.connect(t, ts, token, "octocat", "77")
		if loc != ts.App.Cfg.FrontendURL+"/settings/connected-accounts?codehost=connected" {
			t.Fatalf("callback redirected to %q", loc)
		}
		// Replaying the callback links nothing and says why.
		if loc := callbackRedirect(t, ts, "77", state); !strings.Contains(loc, "codehost=error&reason=state_already_used") {
			t.Fatalf("replayed callback redirected to %q", loc)
		}
		// Linked now: connect answers the install page directly.
		if st := installState(t, ts, newOAuthBrowser(t, ts), token, gh, false); st == "" {
			t.Fatal("no state")
		}

		var repos []struct {
			ID             int64  `json:"id"`
			FullName       string `json:"fullName"`
			Private        bool   `json:"private"`
			CloneURL       string `json:"cloneUrl"`
			DefaultBranch  string `json:"defaultBranch"`
			InstallationID int64  `json:"installationId"`
		}
		ts.doJSON(t, http.StatusOK, "GET", "/codehost/repositories", token, nil, &repos)
		if len(repos) != 1 || repos[0].FullName != "octocat/site" || !repos[0].Private ||
			repos[0].CloneURL != gs.URL+"/octocat/site.git" || repos[0].InstallationID != 77 {
			t.Fatalf("repositories = %+v", repos)
		}

		var project struct {
			ID   string `json:"id"`
			Slug string `json:"slug"`
		}
		ts.doJSON(t, http.StatusCreated, "POST", "/projects", token, map[string]any{
			"name": "site", "repoUrl": repos[0].CloneURL, "framework": "static", "port": 8080,
			"isPrivate": true, "autoDeploy": true, "codehostRepositoryId": strconv.FormatInt(repos[0].ID, 10),
		}, &project)

		hook := ts.URL + "/codehost/webhook"
		deliver := func(d githubfake.Delivery) (int, []byte) {
			t.Helper()
			status, body, err := fake.Deliver(context.Background(), ts.Client, hook, d)
			if err != nil {
				t.Fatal(err)
			}
			return status, body
		}

		// Unsigned and mis-signed pushes: 401, nothing recorded or deployed.
		v2 := h.commit(t, map[string]string{"index.html": "<h1>site v2</h1>\n"}, "second")
		pushMain := fake.PushPayload(githubfake.Push{Installation: 77, Repo: repo, Branch: "main", After: v2, Message: "second"})
		for _, d := range []githubfake.Delivery{
			{Event: "push", Body: pushMain},
			{Event: "push", Body: pushMain, Secret: "not-the-secret"},
		} {
			if status, body := deliver(d); status != http.StatusUnauthorized {
				t.Fatalf("bad signature: %d %s", status, body)
			}
		}
		var log []codehostDelivery
		ts.doJSON(t, http.StatusOK, "GET", "/codehost/deliveries", token, nil, &log)
		if len(log) != 0 {
			t.Fatalf("rejected webhooks were recorded: %+v", log)
		}

		// A push to another branch: recorded as "branch mismatch".
		feature := commit(t, h.work, h.bare, "feature", map[string]string{"index.html": "<h1>feature</h1>\n"}, "feature work")
		gitRun(t, h.work, "checkout", "-q", "main")
		if status, body := deliver(githubfake.Delivery{Event: "push", DeliveryID: "e2e-feature", Secret: e2eWebhookSecret,
			Body: fake.PushPayload(githubfake.Push{Installation: 77, Repo: repo, Branch: "feature", After: feature, Message: "feature work"})}); status != http.StatusOK || strings.TrimSpace(string(body)) != `{"ok":true}` {
			t.Fatalf("feature push: %d %s", status, body)
		}
		d := waitDelivery(t, ts, token, "e2e-feature")
		if len(d.Decisions) != 1 || d.Decisions[0].ProjectID != project.ID || d.Decisions[0].Decision != "branch mismatch" {
			t.Fatalf("feature push decisions = %+v", d.Decisions)
		}

		if ts.App.Deployments == nil {
			t.Skip("PENDING: the deployments module is not wired into examples/server (App.Deployments is nil); " +
				"install, callback, repositories, signature rejection and branch mismatch passed")
		}

		// The signed push to main deploys v2; delivered twice, it deploys once.
		for range 2 {
			if status, body := deliver(githubfake.Delivery{Event: "push", DeliveryID: "e2e-main", Secret: e2eWebhookSecret, Body: pushMain}); status != http.StatusOK {
				t.Fatalf("main push: %d %s", status, body)
			}
		}
		d = waitDelivery(t, ts, token, "e2e-main")
		if len(d.Decisions) != 1 || d.Decisions[0].Decision != "deployed" || d.Decisions[0].DeploymentID == "" {
			t.Fatalf("main push decisions = %+v", d.Decisions)
		}
		depID := d.Decisions[0].DeploymentID
		var status struct {
			Status       string `json:"status"`
			DeployedURL  string `json:"deployedUrl"`
			ErrorMessage string `json:"errorMessage"`
		}
		platformtest.Eventually(t, 3*time.Minute, "the push deployment to go LIVE", func() bool {
			ts.doJSON(t, http.StatusOK, "GET", "/deployments/"+depID+"/status", token, nil, &status)
			if status.Status == "FAILED" || status.Status == "CANCELLED" {
				t.Fatalf("push deployment %s: %s", status.Status, status.ErrorMessage)
			}
			return status.Status == "LIVE"
		})
		var deps []struct {
			ID        string `json:"id"`
			CommitSHA string `json:"commitSha"`
		}
		ts.doJSON(t, http.StatusOK, "GET", "/deployments?projectId="+project.ID, token, nil, &deps)
		if len(deps) != 1 || deps[0].ID != depID {
			t.Fatalf("deployments of the project = %+v, want exactly %s", deps, depID)
		}
		if gs.authOK.Load() == 0 {
			t.Fatal("the clone never authenticated with an installation token")
		}

		// The app answers at its URL through the ingress, serving the pushed commit.
		if body := getApp(t, ts, status.DeployedURL, project.Slug); !strings.Contains(body, "site v2") {
			t.Fatalf("app answered %q, want the pushed commit's page", body)
		}
	})
}

// newCodehostFakes starts the two GitHub fakes behind one origin, as
// api.github.com serves both: the OAuth side (authorize, token, /user,
// /user/emails) of auth/oauth/oauthtest, and the App side (installations,
// tokens, repositories, GET /user/installations with the OAuth side's user
// tokens) of codehost/githubfake.
func newCodehostFakes(t *testing.T) (*oauthtest.GitHub, *githubfake.Server) {
	t.Helper()
	gh := oauthtest.NewGitHub(t)
	fake := githubfake.New(githubfake.Options{AppSlug: "keelson-e2e", UserLogin: gh.LoginForToken})
	t.Cleanup(fake.Close)
	fake.URL = gh.URL // links and urls in its answers name the shared origin
	gh.SetAPI(fake.Handler())
	return gh, fake
}

// codehostConfig points the server at the fakes: the app, its webhook secret
// and the app's OAuth client (the same GitHub App).
func codehostConfig(c *Config, gh *oauthtest.GitHub, fake *githubfake.Server) {
	c.CodehostAppID = strconv.FormatInt(fake.AppID, 10)
	c.CodehostAppSlug = fake.AppSlug
	c.CodehostAppPrivateKey = fake.PrivateKeyPEM()
	c.CodehostWebhookSecret = e2eWebhookSecret
	c.CodehostClientID, c.CodehostClientSecret = gh.ClientID, gh.ClientSecret
	c.CodehostAPIURL, c.CodehostWebURL = gh.URL, gh.URL
	c.FrontendURL = oauthFrontend
}

// installState runs GET /codehost/connect as token from browser b and
// answers the install state. With linkFirst the answer must send b through
// the code host's OAuth (as whoever is signed in at gh) before the install
// page; without, straight to the install page.
func installState(t *testing.T, ts *testServer, b *oauthBrowser, token string, gh *oauthtest.GitHub, linkFirst bool) string {
	t.Helper()
	h := b.get(ts.URL+"/codehost/connect", "Authorization", "Bearer "+token)
	var conn struct {
		InstallURL string `json:"installUrl"`
		LinkFirst  bool   `json:"linkFirst"`
	}
	if h.status != http.StatusOK || json.Unmarshal([]byte(h.body), &conn) != nil || conn.LinkFirst != linkFirst {
		t.Fatalf("GET /codehost/connect: %d %s (want linkFirst %v)", h.status, h.body, linkFirst)
	}
	install := conn.InstallURL
	if linkFirst {
		u, err := url.Parse(conn.InstallURL)
		if err != nil || u.Path != "/auth/codehost/connect" || u.Query().Get("ticket") == "" {
			t.Fatalf("installUrl %q is not a connect ticket", conn.InstallURL)
		}
		cb := b.begin(u.Path + "?" + u.RawQuery)
		end := b.get(cb)
		if end.status != http.StatusFound {
			t.Fatalf("OAuth callback: %d %s", end.status, end.body)
		}
		install = end.loc.String()
	}
	iu, err := url.Parse(install)
	if err != nil || !strings.HasPrefix(install, gh.URL+"/apps/keelson-e2e/installations/new?") || iu.Query().Get("state") == "" {
		t.Fatalf("install page %q", install)
	}
	return iu.Query().Get("state")
}

type codehostDelivery struct {
	DeliveryID string `json:"deliveryId"`
	Event      string `json:"event"`
	Status     string `json:"status"`
	Decisions  []struct {
		ProjectID    string `json:"projectId"`
		Decision     string `json:"decision"`
		DeploymentID string `json:"deploymentId"`
		Detail       string `json:"detail"`
	} `json:"decisions"`
}

// callbackRedirect calls the install callback and returns its redirect target.
func callbackRedirect(t *testing.T, ts *testServer, installationID, state string) string {
	t.Helper()
	c := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	q := url.Values{"installation_id": {installationID}, "state": {state}, "setup_action": {"install"}}
	resp, err := c.Get(ts.URL + "/codehost/app/callback?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("callback: %d %s", resp.StatusCode, b)
	}
	return resp.Header.Get("Location")
}

// waitDelivery polls the caller's delivery log until deliveryID is processed.
func waitDelivery(t *testing.T, ts *testServer, token, deliveryID string) codehostDelivery {
	t.Helper()
	var found codehostDelivery
	platformtest.Eventually(t, 30*time.Second, "delivery "+deliveryID+" to be processed", func() bool {
		var log []codehostDelivery
		ts.doJSON(t, http.StatusOK, "GET", "/codehost/deliveries?limit=100", token, nil, &log)
		for _, d := range log {
			if d.DeliveryID == deliveryID && d.Status != "pending" {
				found = d
				return true
			}
		}
		return false
	})
	return found
}

// getApp fetches the deployed app's page through the ingress, addressing it
// by its public URL's host (or <slug>.<apps-domain>).
func getApp(t *testing.T, ts *testServer, deployedURL, slug string) string {
	t.Helper()
	if ts.Ingress == "" {
		t.Fatal("the server has no ingress")
	}
	host := slug + "." + ts.App.Cfg.AppsDomain
	if u, err := url.Parse(deployedURL); err == nil && u.Hostname() != "" {
		host = u.Hostname()
	}
	req, err := http.NewRequest(http.MethodGet, "http://"+ts.Ingress+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := ts.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("app at %s: %d %s", host, resp.StatusCode, b)
	}
	return string(b)
}

// codehostHarness is the set-up the code-host e2e tests share: the two GitHub
// fakes (OAuth and app) behind one origin, a git server serving the app's
// repositories only to its installation tokens (the fake's repository URLs
// point at it), and one repository owner/name with a first commit on main.
type codehostHarness struct {
	gh   *oauthtest.GitHub
	fake *githubfake.Server
	gs   *gitServer
	work string // the repository's work tree
	bare string // the bare repository the git server serves
}

func newCodehostHarness(t *testing.T, owner, name, indexHTML string) *codehostHarness {
	t.Helper()
	gh, fake := newCodehostFakes(t)
	gs := newGitServer(t, fake)
	fake.WebURL = gs.URL // repositories' html_url and clone_url point at the git server
	h := &codehostHarness{gh: gh, fake: fake, gs: gs, work: t.TempDir(), bare: filepath.Join(gs.root, owner, name+".git")}
	gitRun(t, h.work, "init", "-q", "-b", "main")
	if err := os.MkdirAll(filepath.Dir(h.bare), 0o755); err != nil {
		t.Fatal(err)
	}
	gitRun(t, gs.root, "init", "-q", "--bare", "-b", "main", h.bare)
	h.commit(t, map[string]string{"index.html": indexHTML}, "first")
	return h
}

// commit commits files on main and pushes them to the served repository; it
// returns the commit.
func (h *codehostHarness) commit(t testing.TB, files map[string]string, msg string) string {
	t.Helper()
	return commit(t, h.work, h.bare, "main", files, msg)
}

// start starts the server with the code host set to the fakes.
func (h *codehostHarness) start(t *testing.T, dbURL string) *testServer {
	t.Helper()
	return startServer(t, dbURL, func(c *Config) { codehostConfig(c, h.gh, h.fake) })
}

// addUser adds a code-host user with one verified address, login@users.example.
func (h *codehostHarness) addUser(id int64, login string) {
	h.gh.AddUser(oauthtest.GitHubUser{ID: id, Login: login,
		Emails: []oauthtest.GitHubEmail{{Email: login + "@users.example", Primary: true, Verified: true}}})
}

// connect signs login in at the code host and takes the account of token
// (with no code-host identity yet) through connect and the install callback
// with installationID; it returns the state and where the callback redirected.
func (h *codehostHarness) connect(t *testing.T, ts *testServer, token, login, installationID string) (state, loc string) {
	t.Helper()
	h.gh.SignIn(login)
	state = installState(t, ts, newOAuthBrowser(t, ts), token, h.gh, true)
	return state, callbackRedirect(t, ts, installationID, state)
}
