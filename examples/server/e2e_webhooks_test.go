package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Repository webhooks (no code-host app configured): each host's published
// example payload (examples/server/testdata/webhooks, sources in SOURCES.md),
// with its repository URLs, branch and commit ids replaced by those of a
// local git repository, sent with the headers that host sends.

// openGitServer serves the bare repositories under its root over git's smart
// HTTP protocol without authentication (a public repository).
func openGitServer(t *testing.T) (url, root string) {
	t.Helper()
	execPath, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Skipf("git is not installed: %v", err)
	}
	backend := filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend")
	if _, err := os.Stat(backend); err != nil {
		t.Skip("git-http-backend is not installed")
	}
	root = t.TempDir()
	srv := httptest.NewServer(&cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}})
	t.Cleanup(srv.Close)
	return srv.URL, root
}

// hostRepo is a repository on the local git server: a work tree, its bare
// remote and the URL projects use.
type hostRepo struct {
	work, bare, url string
}

func newHostRepo(t *testing.T, gitURL, root, path string) hostRepo {
	t.Helper()
	r := hostRepo{work: t.TempDir(), bare: filepath.Join(root, path+".git"), url: gitURL + "/" + path + ".git"}
	if err := os.MkdirAll(filepath.Dir(r.bare), 0o755); err != nil {
		t.Fatal(err)
	}
	gitRun(t, root, "init", "-q", "--bare", "-b", "main", r.bare)
	gitRun(t, r.work, "init", "-q", "-b", "main")
	commit(t, r.work, r.bare, "main", map[string]string{"index.html": "<h1>v1</h1>\n"}, "first")
	return r
}

func fixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "webhooks", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func hexHMAC(secret string, body []byte, sha256ing bool) string {
	h := sha1.New
	if sha256ing {
		h = sha256.New
	}
	mac := hmac.New(h, []byte(secret))
	mac.Write(body)
	return hex.EncodeToString(mac.Sum(nil))
}

func uuid(t *testing.T) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// hostKind builds one host's deliveries.
type hostKind struct {
	name string
	// push returns the body of a push of sha to branch of repo.
	push func(t *testing.T, repo hostRepo, branch, sha string) []byte
	// headers returns the headers the host sends with body, signed with
	// secret ("" for an unsigned delivery), for event and delivery id.
	headers func(body []byte, secret, event, delivery string) map[string]string
	// ping returns a ping-style event and its body ("" when the host has none).
	ping func(t *testing.T, repo hostRepo) (string, []byte)
}

var webhookHosts = []hostKind{
	{
		name: "github",
		// octokit/webhooks push/with-new-branch.payload.json: the app's
		// format; a repository webhook sends it without "installation".
		push: func(t *testing.T, repo hostRepo, branch, sha string) []byte {
			s := fixture(t, "github-push.json")
			s = strings.ReplaceAll(s, "https://github.com/Codertocat/Hello-World", strings.TrimSuffix(repo.url, ".git"))
			s = strings.ReplaceAll(s, "6113728f27ae82c7b1a177c8d03f9e96e0adf246", sha)
			s = strings.ReplaceAll(s, `"refs/heads/master"`, `"refs/heads/`+branch+`"`)
			var m map[string]any
			if err := json.Unmarshal([]byte(s), &m); err != nil {
				t.Fatal(err)
			}
			if _, ok := m["installation"]; !ok {
				t.Fatal("fixture changed: no installation to remove")
			}
			delete(m, "installation")
			b, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		// docs.github.com "Webhook events and payloads": delivery headers.
		headers: func(body []byte, secret, event, delivery string) map[string]string {
			h := map[string]string{
				"User-Agent": "GitHub-Hookshot/044aadd", "Content-Type": "application/json",
				"X-GitHub-Event": event, "X-GitHub-Delivery": delivery, "X-GitHub-Hook-ID": "292430182",
				"X-GitHub-Hook-Installation-Target-Type": "repository", "X-GitHub-Hook-Installation-Target-ID": "186853002",
			}
			if secret != "" {
				h["X-Hub-Signature"] = "sha1=" + hexHMAC(secret, body, false)
				h["X-Hub-Signature-256"] = "sha256=" + hexHMAC(secret, body, true)
			}
			return h
		},
		ping: func(t *testing.T, repo hostRepo) (string, []byte) {
			s := fixture(t, "github-ping.json")
			s = strings.ReplaceAll(s, "https://github.com/Octocoders/Hello-World", strings.TrimSuffix(repo.url, ".git"))
			return "ping", []byte(s)
		},
	},
	{
		name: "gitea",
		// Gitea's documentation example, pretty-printed as Gitea sends it.
		push: func(t *testing.T, repo hostRepo, branch, sha string) []byte {
			s := fixture(t, "gitea-push.json")
			s = strings.ReplaceAll(s, "http://localhost:3000/gitea/webhooks", strings.TrimSuffix(repo.url, ".git"))
			s = strings.ReplaceAll(s, "bffeb74224043ba2feb48d137756c8a9331c449a", sha)
			s = strings.ReplaceAll(s, `"refs/heads/develop"`, `"refs/heads/`+branch+`"`)
			return []byte(s)
		},
		// The headers of a real Gitea 1.26 push (issue 16).
		headers: func(body []byte, secret, event, delivery string) map[string]string {
			h := map[string]string{"Content-Type": "application/json", "User-Agent": "Go-http-client/1.1"}
			for _, p := range []string{"X-GitHub", "X-Gitea", "X-Gogs"} {
				h[p+"-Delivery"], h[p+"-Event"], h[p+"-Event-Type"] = delivery, event, event
			}
			h["X-GitHub-Hook-Installation-Target-Type"] = "repository"
			if secret != "" {
				sig := hexHMAC(secret, body, true)
				h["X-Gitea-Signature"], h["X-Gogs-Signature"] = sig, sig
				h["X-Hub-Signature-256"] = "sha256=" + sig
				h["X-Hub-Signature"] = "sha1=" + hexHMAC(secret, body, false)
			}
			return h
		},
	},
	{
		name: "forgejo",
		push: func(t *testing.T, repo hostRepo, branch, sha string) []byte {
			s := fixture(t, "gitea-push.json")
			s = strings.ReplaceAll(s, "http://localhost:3000/gitea/webhooks", strings.TrimSuffix(repo.url, ".git"))
			s = strings.ReplaceAll(s, "bffeb74224043ba2feb48d137756c8a9331c449a", sha)
			s = strings.ReplaceAll(s, `"refs/heads/develop"`, `"refs/heads/`+branch+`"`)
			return []byte(s)
		},
		// Forgejo sends Gitea's headers plus X-Forgejo-* twins; only the
		// Forgejo signature is sent here, to prove it is read.
		headers: func(body []byte, secret, event, delivery string) map[string]string {
			h := map[string]string{"Content-Type": "application/json"}
			for _, p := range []string{"X-GitHub", "X-Gitea", "X-Gogs", "X-Forgejo"} {
				h[p+"-Delivery"], h[p+"-Event"], h[p+"-Event-Type"] = delivery, event, event
			}
			if secret != "" {
				h["X-Forgejo-Signature"] = hexHMAC(secret, body, true)
			}
			return h
		},
	},
	{
		name: "gitlab",
		// GitLab's doc/user/project/integrations/webhook_events.md push example.
		push: func(t *testing.T, repo hostRepo, branch, sha string) []byte {
			s := fixture(t, "gitlab-push.json")
			s = strings.ReplaceAll(s, "http://example.com/mike/diaspora", strings.TrimSuffix(repo.url, ".git"))
			s = strings.ReplaceAll(s, "da1560886d4f094c3e6c9ef40349f7d38b5d27d7", sha)
			s = strings.ReplaceAll(s, `"refs/heads/master"`, `"refs/heads/`+branch+`"`)
			return []byte(s)
		},
		// GitLab's webhooks.md: X-Gitlab-Event, X-Gitlab-Token (the secret
		// itself), X-Gitlab-Event-UUID, X-Gitlab-Webhook-UUID, X-Gitlab-Instance.
		headers: func(body []byte, secret, event, delivery string) map[string]string {
			name := map[string]string{"push": "Push Hook"}[event]
			h := map[string]string{
				"Content-Type": "application/json", "User-Agent": "GitLab/17.5.0",
				"X-Gitlab-Event": name, "X-Gitlab-Event-UUID": delivery, "X-Gitlab-Webhook-UUID": "f1b0a3c2-6e1d-4b7a-9a55-0c1d2e3f4a5b",
				"X-Gitlab-Instance": "http://example.com", "Idempotency-Key": delivery,
			}
			if secret != "" {
				h["X-Gitlab-Token"] = secret
			}
			return h
		},
	},
}

// postHook sends a delivery to the webhook route.
func postHook(t *testing.T, ts *testServer, body []byte, headers map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, ts.URL+"/codehost/webhook", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := ts.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

type webhookProject struct{ ID, Slug string }

func createHookProject(t *testing.T, ts *testServer, token, name, repoURL, secret string) webhookProject {
	t.Helper()
	var p webhookProject
	body := map[string]any{"name": name, "repoUrl": repoURL, "framework": "static", "port": 8080,
		"autoDeploy": true, "autoDeployBranch": "main"}
	if secret != "" {
		body["webhookSecret"] = secret
	}
	ts.doJSON(t, http.StatusCreated, "POST", "/projects", token, body, &p)
	return p
}

func deploymentsOf(t *testing.T, ts *testServer, token, projectID string) []struct {
	ID        string `json:"id"`
	CommitSHA string `json:"commitSha"`
	Status    string `json:"status"`
} {
	t.Helper()
	var deps []struct {
		ID        string `json:"id"`
		CommitSHA string `json:"commitSha"`
		Status    string `json:"status"`
	}
	ts.doJSON(t, http.StatusOK, "GET", "/deployments?projectId="+projectID, token, nil, &deps)
	return deps
}

func deliveryLog(t *testing.T, ts *testServer, token string) []codehostDelivery {
	t.Helper()
	var log []codehostDelivery
	ts.doJSON(t, http.StatusOK, "GET", "/codehost/deliveries?limit=100", token, nil, &log)
	return log
}

// TestRepositoryWebhooksE2E: without the code-host app, a repository webhook
// of each host deploys the project whose webhookSecret signed it, once, even
// replayed; unsigned and mis-signed deliveries are 401 and store nothing; a
// second project on the same repository with another secret (and a third
// without one) deploys nothing and sees nothing; a push to another branch
// records "branch mismatch"; a ping records "not a push".
func TestRepositoryWebhooksE2E(t *testing.T) {
	eachDB(t, func(t *testing.T, dbURL string) {
		gitURL, root := openGitServer(t)
		ts := startServer(t, dbURL, nil) // no KEELSON_CODEHOST_* at all
		// The app routes still say the app is not configured.
		someone := ts.signup(t, "someone@example.com")
		if status, body, _ := ts.do(t, "GET", "/codehost/connect", someone, nil); status != http.StatusServiceUnavailable {
			t.Fatalf("connect without the app: %d %s", status, body)
		}

		for _, host := range webhookHosts {
			t.Run(host.name, func(t *testing.T) {
				alice := ts.signup(t, "alice-"+host.name+"@example.com")
				bob := ts.signup(t, "bob-"+host.name+"@example.com")
				carol := ts.signup(t, "carol-"+host.name+"@example.com")
				repo := newHostRepo(t, gitURL, root, host.name+"/site")
				secretA, secretB := "whsec-"+host.name+"-alice-0123456789", "whsec-"+host.name+"-bob-9876543210"
				pa := createHookProject(t, ts, alice, host.name+" site", repo.url, secretA)
				pb := createHookProject(t, ts, bob, host.name+" mirror", repo.url, secretB)
				pc := createHookProject(t, ts, carol, host.name+" nosecret", repo.url, "")

				v2 := commit(t, repo.work, repo.bare, "main", map[string]string{"index.html": "<h1>" + host.name + " v2</h1>\n"}, "second")
				body := host.push(t, repo, "main", v2)
				aliceBefore := len(deliveryLog(t, ts, alice))

				// Unsigned, wrongly signed, signed over another body: 401, nothing stored.
				refused := map[string]map[string]string{
					"unsigned":     host.headers(body, "", "push", uuid(t)),
					"wrong secret": host.headers(body, "not-the-secret-0000", "push", uuid(t)),
				}
				if host.name != "gitlab" { // GitLab's token does not sign the body
					refused["signed over another body"] = host.headers(host.push(t, repo, "main", strings.Repeat("a", 40)), secretA, "push", uuid(t))
				}
				for name, hdr := range refused {
					if status, resp := postHook(t, ts, body, hdr); status != http.StatusUnauthorized || !strings.Contains(resp, "webhookSecret") {
						t.Fatalf("%s: %d %s, want 401 saying why", name, status, resp)
					}
				}
				if n := len(deliveryLog(t, ts, alice)); n != aliceBefore {
					t.Fatalf("refused deliveries were recorded: %d entries, had %d", n, aliceBefore)
				}

				// Signed with alice's secret, delivered twice (a redelivery
				// keeps its id): one deployment, of alice's project only.
				id := uuid(t)
				for range 2 {
					if status, resp := postHook(t, ts, body, host.headers(body, secretA, "push", id)); status != http.StatusOK || resp != `{"ok":true}` {
						t.Fatalf("signed push: %d %s", status, resp)
					}
				}
				d := waitDelivery(t, ts, alice, id)
				if len(d.Decisions) != 1 || d.Decisions[0].ProjectID != pa.ID || d.Decisions[0].Decision != "deployed" || d.Decisions[0].DeploymentID == "" {
					t.Fatalf("alice's decisions = %+v", d.Decisions)
				}
				st, _ := waitDeployment(t, ts, alice, d.Decisions[0].DeploymentID)
				if st.Status != "LIVE" {
					t.Fatalf("push deployment %s: %s", st.Status, st.ErrorMessage)
				}
				if page := getApp(t, ts, st.DeployedURL, pa.Slug); !strings.Contains(page, host.name+" v2") {
					t.Fatalf("app answered %q, want the pushed commit", page)
				}
				// Replayed once more after processing: still one deployment.
				if status, _ := postHook(t, ts, body, host.headers(body, secretA, "push", id)); status != http.StatusOK {
					t.Fatalf("replay: %d", status)
				}
				if _, err := ts.App.Codehost.ProcessPending(context.Background()); err != nil {
					t.Fatal(err)
				}
				deps := deploymentsOf(t, ts, alice, pa.ID)
				if len(deps) != 1 || deps[0].CommitSHA != v2 {
					t.Fatalf("alice's deployments = %+v, want exactly one of %s", deps, v2)
				}
				// Bob's project (another secret) and carol's (none) on the
				// same repository: nothing deployed, nothing in their logs.
				for _, who := range []struct {
					token string
					p     webhookProject
				}{{bob, pb}, {carol, pc}} {
					if deps := deploymentsOf(t, ts, who.token, who.p.ID); len(deps) != 0 {
						t.Fatalf("a delivery signed with alice's secret deployed %s: %+v", who.p.Slug, deps)
					}
					for _, e := range deliveryLog(t, ts, who.token) {
						if e.DeliveryID == id {
							t.Fatalf("%s sees alice's delivery: %+v", who.p.Slug, e)
						}
					}
				}

				// A push to another branch: recorded, and says why.
				feature := commit(t, repo.work, repo.bare, "feature", map[string]string{"index.html": "<h1>feature</h1>\n"}, "feature work")
				gitRun(t, repo.work, "checkout", "-q", "main")
				fbody := host.push(t, repo, "feature", feature)
				fid := uuid(t)
				if status, resp := postHook(t, ts, fbody, host.headers(fbody, secretA, "push", fid)); status != http.StatusOK {
					t.Fatalf("feature push: %d %s", status, resp)
				}
				d = waitDelivery(t, ts, alice, fid)
				if len(d.Decisions) != 1 || d.Decisions[0].Decision != "branch mismatch" ||
					d.Decisions[0].Detail != "pushed to feature; the project deploys main" {
					t.Fatalf("feature push decisions = %+v", d.Decisions)
				}

				// Signed with bob's secret: bob's project deploys, not alice's.
				bid := uuid(t)
				if status, resp := postHook(t, ts, body, host.headers(body, secretB, "push", bid)); status != http.StatusOK {
					t.Fatalf("bob's push: %d %s", status, resp)
				}
				d = waitDelivery(t, ts, bob, bid)
				if len(d.Decisions) != 1 || d.Decisions[0].ProjectID != pb.ID || d.Decisions[0].Decision != "deployed" {
					t.Fatalf("bob's decisions = %+v", d.Decisions)
				}
				if st, _ := waitDeployment(t, ts, bob, d.Decisions[0].DeploymentID); st.Status != "LIVE" {
					t.Fatalf("bob's deployment %s: %s", st.Status, st.ErrorMessage)
				}
				if deps := deploymentsOf(t, ts, alice, pa.ID); len(deps) != 1 {
					t.Fatalf("bob's delivery deployed alice's project: %+v", deps)
				}

				if host.ping != nil {
					event, pbody := host.ping(t, repo)
					pid := uuid(t)
					if status, resp := postHook(t, ts, pbody, host.headers(pbody, secretA, event, pid)); status != http.StatusOK || resp != `{"ok":true}` {
						t.Fatalf("ping: %d %s", status, resp)
					}
					d = waitDelivery(t, ts, alice, pid)
					if len(d.Decisions) != 1 || d.Decisions[0].Decision != "not a push" || d.Decisions[0].DeploymentID != "" {
						t.Fatalf("ping decisions = %+v", d.Decisions)
					}
				}
				if deps := deploymentsOf(t, ts, alice, pa.ID); len(deps) != 1 {
					t.Fatalf("alice's deployments at the end = %+v, want 1", deps)
				}
			})
		}
		// No goroutine of a delivery outlives the server: the worker stops.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := ts.App.Codehost.Close(ctx); err != nil {
			t.Fatalf("codehost worker did not stop: %v", err)
		}
	})
}
