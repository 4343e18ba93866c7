package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/codehost/githubfake"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

// TestCodehostTrustE2E runs the three code-host attacks of issue 14 against
// the whole server, as the attacker would, with the two GitHub fakes behind
// one origin and a git server that serves acme's private repository only to
// an installation token of acme's installation:
//
//  1. Eve, not in acme, gets a state from GET /codehost/connect (after linking
//     her own code-host account) and calls the install callback with acme's
//     installation id: refused (installation_not_yours), nothing linked, her
//     repository listing is a 404 and her deployment of acme's repository
//     never gets a token (the clone is refused, the deployment fails).
//  2. Eve's project with acme's repository URL does not show acme's pushes in
//     her delivery log; ?projectId=<alice's project> is a 404.
//  3. Mallory's connect ticket opened in Victor's browser links nothing, and
//     Victor's later code-host login does not land in Mallory's account.
func TestCodehostTrustE2E(t *testing.T) {
	eachDB(t, func(t *testing.T, dbURL string) {
		// A private repository acme/secret with a static site on main.
		h := newCodehostHarness(t, "acme", "secret", "<h1>acme's secret</h1>\n")
		gh, fake, gs := h.gh, h.fake, h.gs
		secret := &githubfake.Repository{ID: 9100, Owner: "acme", Name: "secret", Private: true, DefaultBranch: "main"}
		fake.AddInstallation(githubfake.Installation{ID: 900, Account: "acme", AccountType: "Organization",
			Members: []string{"alice-gh"}, Repositories: []*githubfake.Repository{secret}})
		for i, login := range []string{"alice-gh", "eve-gh", "victor-gh"} {
			h.addUser(int64(7000+i), login)
		}
		ts := h.start(t, dbURL)
		alice, eve := ts.signup(t, "alice@acme.example"), ts.signup(t, "eve@evil.example")

		// Alice, an acme member, links acme's installation.
		if _, loc := h.connect(t, ts, alice, "alice-gh", "900"); !strings.HasSuffix(loc, "codehost=connected") {
			t.Fatalf("alice's install: %s", loc)
		}
		var aliceProject, eveProject struct {
			ID string `json:"id"`
		}
		project := map[string]any{"name": "site", "repoUrl": gs.URL + "/acme/secret.git", "framework": "static", "port": 8080, "autoDeploy": true}
		ts.doJSON(t, http.StatusCreated, "POST", "/projects", alice, project, &aliceProject)
		project["name"] = "loot"
		ts.doJSON(t, http.StatusCreated, "POST", "/projects", eve, project, &eveProject)

		// 1. Eve's hijack through the callback.
		var links int
		count := func() int {
			n, err := ts.App.DB.NewSelect().Table("codehost_links").Count(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			return int(n)
		}
		links = count()
		mints := fake.TokenMints(900)
		gh.SignIn("eve-gh")
		state := installState(t, ts, newOAuthBrowser(t, ts), eve, gh, true)
		if loc := callbackRedirect(t, ts, "900", state); !strings.HasSuffix(loc, "codehost=error&reason=installation_not_yours") {
			t.Fatalf("Eve's callback with acme's installation: %s", loc)
		}
		if n := count(); n != links {
			t.Fatalf("links %d, want %d", n, links)
		}
		status, body, _ := ts.do(t, "GET", "/codehost/repositories", eve, nil)
		if status != http.StatusNotFound || strings.Contains(string(body), "acme") {
			t.Fatalf("Eve's repositories: %d %s", status, body)
		}
		{
			var dep struct {
				DeploymentID string `json:"deploymentId"`
			}
			ts.doJSON(t, http.StatusCreated, "POST", "/deployments", eve, map[string]string{"projectId": eveProject.ID}, &dep)
			var st struct {
				Status string `json:"status"`
			}
			platformtest.Eventually(t, 2*time.Minute, "Eve's deployment of acme's repository to end", func() bool {
				ts.doJSON(t, http.StatusOK, "GET", "/deployments/"+dep.DeploymentID+"/status", eve, nil, &st)
				return st.Status == "FAILED" || st.Status == "LIVE"
			})
			if st.Status != "FAILED" || gs.authOK.Load() != 0 || gs.rejected.Load() == 0 {
				t.Fatalf("Eve's deployment %s; clones with a token %d, refused %d", st.Status, gs.authOK.Load(), gs.rejected.Load())
			}
		}
		if n := fake.TokenMints(900); n != mints {
			t.Fatalf("acme's installation minted %d tokens during Eve's attempts", n-mints)
		}

		// 2. acme's push does not show in Eve's delivery log.
		v2 := h.commit(t, map[string]string{"index.html": "<h1>v2</h1>\n"}, "second")
		status, body, err := fake.Deliver(context.Background(), ts.Client, ts.URL+"/codehost/webhook", githubfake.Delivery{
			Event: "push", DeliveryID: "acme-push", Secret: e2eWebhookSecret,
			Body: fake.PushPayload(githubfake.Push{Installation: 900, Repo: secret, Branch: "main", After: v2, Message: "acme internal"}),
		})
		if err != nil || status != http.StatusOK {
			t.Fatalf("push: %d %s %v", status, body, err)
		}
		if d := waitDelivery(t, ts, alice, "acme-push"); len(d.Decisions) != 1 || d.Decisions[0].ProjectID != aliceProject.ID {
			t.Fatalf("alice's view: %+v", d)
		}
		for _, q := range []string{"", "?projectId=" + eveProject.ID} {
			var log []codehostDelivery
			ts.doJSON(t, http.StatusOK, "GET", "/codehost/deliveries"+q, eve, nil, &log)
			if len(log) != 0 {
				t.Fatalf("Eve's deliveries%s: %+v", q, log)
			}
		}
		status, body, _ = ts.do(t, "GET", "/codehost/deliveries?projectId="+aliceProject.ID, eve, nil)
		if status != http.StatusNotFound || strings.Contains(string(body), "acme") {
			t.Fatalf("Eve filtering by alice's project: %d %s", status, body)
		}

		// 3. Forced linking: Mallory's ticket in Victor's browser.
		mallory, victor := ts.signup(t, "mallory@evil.example"), ts.signup(t, "victor@example.com")
		attacker := newOAuthBrowser(t, ts)
		ticket := attacker.connectTicket(mallory)
		gh.SignIn("victor-gh") // Victor's browser is signed in to the code host
		victim := newOAuthBrowser(t, ts)
		if h := victim.get(ts.URL + ticket); h.status != http.StatusBadRequest || h.loc != nil || !strings.Contains(h.body, "ticket") {
			t.Fatalf("Mallory's ticket in Victor's browser: %d %s", h.status, h.body)
		}
		victim.connectTicket(victor) // with a connect cookie of its own: still refused
		if h := victim.get(ts.URL + ticket); h.status != http.StatusBadRequest {
			t.Fatalf("Mallory's ticket with Victor's own cookie: %d %s", h.status, h.body)
		}
		if h := victim.get(ts.URL + "/auth/codehost/connect?token=" + mallory); h.status != http.StatusBadRequest {
			t.Fatalf("the old ?token= link: %d %s", h.status, h.body)
		}
		for _, tok := range []string{mallory, victor} {
			if me := oauthMe(t, ts, tok); me["codehostUsername"] != nil {
				t.Fatalf("an account got linked: %v", me)
			}
		}
		u := newOAuthBrowser(t, ts).flow("/auth/codehost")
		if a := u.Query().Get("accessToken"); a != "" && oauthMe(t, ts, a)["email"] == "mallory@evil.example" {
			t.Fatal("Victor's code-host login landed in Mallory's account")
		}
	})
}

// TestCodehostConnectNeedsOAuthClient: with the app configured but not its
// OAuth client, nobody's access can be verified: GET /codehost/connect for a
// user without a code-host identity is a 503 naming the missing settings (no
// install state is handed out).
func TestCodehostConnectNeedsOAuthClient(t *testing.T) {
	gh, fake := newCodehostFakes(t)
	fake.AddInstallation(githubfake.Installation{ID: 31, Account: "octocat"})
	ts := startServer(t, "", func(c *Config) {
		codehostConfig(c, gh, fake)
		c.CodehostClientID, c.CodehostClientSecret = "", ""
	})
	tok := ts.signup(t, "octocat@example.com")
	status, body, _ := ts.do(t, "GET", "/codehost/connect", tok, nil)
	if status != http.StatusServiceUnavailable || !strings.Contains(string(body), "KEELSON_CODEHOST_CLIENT_ID") {
		t.Fatalf("GET /codehost/connect: %d %s", status, body)
	}
}

// TestCodehostOrgCollaboratorE2E (issue 23, org installations), against the
// whole server: acme's installation reaches acme/secret (private, served by
// the git server to acme's installation tokens only) and acme/shared. Eve is
// an outside collaborator on acme/shared alone, so GitHub lists acme's
// installation to her and she can link it. The fake answers her, with her
// own user token, GET /user/installations/{installation_id}/repositories
// ("List repositories accessible to the user access token",
// docs.github.com/en/rest/apps/installations#list-repositories-accessible-to-the-user-access-token):
// acme/shared only. So her listing holds acme/shared only, and her
// deployment of acme/secret is refused at POST /deployments with a 403
// naming it (nothing queued, nothing cloned), while Alice, a member, deploys
// it LIVE. With Alice's code-host token revoked, her listing and deployments
// answer 409 telling her to link her code-host account again.
func TestCodehostOrgCollaboratorE2E(t *testing.T) {
	eachDB(t, func(t *testing.T, dbURL string) {
		h := newCodehostHarness(t, "acme", "secret", "<h1>acme's secret</h1>\n")
		gh, fake, gs := h.gh, h.fake, h.gs
		secret := &githubfake.Repository{ID: 9200, Owner: "acme", Name: "secret", Private: true, DefaultBranch: "main"}
		shared := &githubfake.Repository{ID: 9201, Owner: "acme", Name: "shared", Private: true, DefaultBranch: "main",
			Collaborators: []string{"eve-gh"}}
		fake.AddInstallation(githubfake.Installation{ID: 920, Account: "acme", AccountType: "Organization",
			Members: []string{"alice-gh"}, Repositories: []*githubfake.Repository{secret, shared}})
		h.addUser(7100, "alice-gh")
		h.addUser(7101, "eve-gh")
		ts := h.start(t, dbURL)
		alice, eve := ts.signup(t, "alice@acme.example"), ts.signup(t, "eve@evil.example")
		for tok, login := range map[string]string{alice: "alice-gh", eve: "eve-gh"} {
			if _, loc := h.connect(t, ts, tok, login, "920"); !strings.HasSuffix(loc, "codehost=connected") {
				t.Fatalf("%s's install: %s", login, loc)
			}
		}
		listing := func(tok string) string {
			t.Helper()
			var repos []struct {
				FullName string `json:"fullName"`
			}
			ts.doJSON(t, http.StatusOK, "GET", "/codehost/repositories", tok, nil, &repos)
			var names []string
			for _, r := range repos {
				names = append(names, r.FullName)
			}
			return strings.Join(names, ",")
		}
		if got := listing(eve); got != "acme/shared" {
			t.Fatalf("Eve's repositories: %s", got)
		}
		if got := listing(alice); got != "acme/secret,acme/shared" {
			t.Fatalf("Alice's repositories: %s", got)
		}

		project := map[string]any{"name": "site", "repoUrl": gs.URL + "/acme/secret.git", "framework": "static", "port": 8080}
		var aliceProject, eveProject struct {
			ID string `json:"id"`
		}
		ts.doJSON(t, http.StatusCreated, "POST", "/projects", alice, project, &aliceProject)
		project["name"] = "loot"
		ts.doJSON(t, http.StatusCreated, "POST", "/projects", eve, project, &eveProject)

		status, body, _ := ts.do(t, "POST", "/deployments", eve, map[string]string{"projectId": eveProject.ID})
		if status != http.StatusForbidden || !strings.Contains(string(body), "acme/secret") ||
			!strings.Contains(string(body), "CODEHOST_NO_REPOSITORY_ACCESS") {
			t.Fatalf("Eve's deployment of acme/secret: %d %s", status, body)
		}
		var eveDeps []any
		ts.doJSON(t, http.StatusOK, "GET", "/deployments?projectId="+eveProject.ID, eve, nil, &eveDeps)
		if len(eveDeps) != 0 || gs.authOK.Load() != 0 {
			t.Fatalf("Eve's refused deployment: %d deployments, %d authenticated clones", len(eveDeps), gs.authOK.Load())
		}

		var dep struct {
			DeploymentID string `json:"deploymentId"`
		}
		ts.doJSON(t, http.StatusCreated, "POST", "/deployments", alice, map[string]string{"projectId": aliceProject.ID}, &dep)
		var st struct {
			Status       string `json:"status"`
			ErrorMessage string `json:"errorMessage"`
		}
		platformtest.Eventually(t, 3*time.Minute, "Alice's deployment of acme/secret to go LIVE", func() bool {
			ts.doJSON(t, http.StatusOK, "GET", "/deployments/"+dep.DeploymentID+"/status", alice, nil, &st)
			if st.Status == "FAILED" || st.Status == "CANCELLED" {
				t.Fatalf("Alice's deployment %s: %s", st.Status, st.ErrorMessage)
			}
			return st.Status == "LIVE"
		})
		if gs.authOK.Load() == 0 {
			t.Fatal("Alice's clone never authenticated with an installation token")
		}

		// Alice's code-host token revoked: told to link again, nothing queued.
		for _, tok := range gh.IssuedTokens() {
			if login, _ := gh.LoginForToken(tok); login == "alice-gh" {
				gh.RevokeToken(tok)
			}
		}
		for _, c := range []struct {
			method, path string
			body         any
		}{{"GET", "/codehost/repositories", nil}, {"POST", "/deployments", map[string]string{"projectId": aliceProject.ID}}} {
			status, body, _ := ts.do(t, c.method, c.path, alice, c.body)
			if status != http.StatusConflict || !strings.Contains(string(body), "CODEHOST_RELINK") ||
				!strings.Contains(string(body), "GET /codehost/connect") {
				t.Fatalf("%s %s with Alice's token revoked: %d %s", c.method, c.path, status, body)
			}
		}
	})
}
