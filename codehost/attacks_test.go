package codehost_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/keelson-dev/keelson/codehost"
	"github.com/keelson-dev/keelson/codehost/githubfake"
	"github.com/keelson-dev/keelson/platform"
	"github.com/uptrace/bun"
)

// TestInstallationHijackRefused is attack 1 of issue 14, as Eve ran it: she
// takes a state from GET /codehost/connect (her own: it proves only who asked)
// and calls the install callback with the installation id of acme's
// organisation, where she is not a member. Before the fix the callback said
// "connected", her repository listing showed acme's private repositories and
// her deployment cloned one with acme's installation token. Now the code host,
// asked with Eve's own token, does not list the installation: the callback
// redirects with installation_not_yours and nothing is linked, listed,
// minted or deployed. Eve with no code-host identity at all, or with a token
// the code host no longer accepts, is refused too.
func TestInstallationHijackRefused(t *testing.T) {
	each(t, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, envOpts{})
		ctx := context.Background()
		alice, eve := platform.NewID(), platform.NewID()
		acme := e.fake.AddInstallation(githubfake.Installation{ID: 500, Account: "acme", AccountType: "Organization",
			Members: []string{"alice-gh"}, Repositories: repos("acme", 2, 4)})
		e.fake.AddInstallation(githubfake.Installation{ID: 501, Account: "alice-gh", Repositories: repos("alice-gh", 6)})
		e.linkIdentity(alice, "alice-gh")
		e.install(alice, 500) // acme's member links it: fine
		secret := acme.Repositories[0]
		eveProject := e.projects.add(codehost.RepoProject{OwnerID: eve, AutoDeploy: true, RepoURL: secret.CloneURL})
		linksBefore, instBefore := e.count("codehost_links"), e.count("codehost_installations")
		mintsBefore := e.fake.TokenMints(500)

		refused := func(name, installationID, state, want string) {
			t.Helper()
			u := e.callback(installationID, state)
			if u.Query().Get("codehost") != "error" || u.Query().Get("reason") != want {
				t.Fatalf("%s: redirected to %s, want reason %s", name, u, want)
			}
		}

		// Eve with a code-host identity of her own, not in acme.
		e.linkIdentity(eve, "eve-gh")
		refused("org installation", "500", e.connect(eve), codehost.ReasonNotYours)
		// Alice's personal installation: not Eve's either.
		refused("personal installation", "501", e.connect(eve), codehost.ReasonNotYours)
		// Eve's token no longer accepted (revoked, expired).
		st := e.connect(eve)
		e.fake.RevokeUserToken(e.ids.tokens[eve])
		refused("revoked token", "500", st, codehost.ReasonAuthorizationExpired)
		// Eve with no code-host identity at all (the situation of the report;
		// her state was issued while she had one).
		e.linkIdentity(eve, "eve-gh")
		st = e.connect(eve)
		e.ids.set(eve, "", "")
		refused("no code-host identity", "500", st, codehost.ReasonAccountNotLinked)

		// Nothing changed: no link, no installation row, no token minted for Eve.
		if n := e.count("codehost_links"); n != linksBefore {
			t.Fatalf("links %d, want %d", n, linksBefore)
		}
		if n := e.count("codehost_installations"); n != instBefore {
			t.Fatalf("installations %d, want %d", n, instBefore)
		}
		status, body, _ := e.do(http.MethodGet, "/codehost/repositories", eve, nil, nil)
		if status != http.StatusNotFound || strings.Contains(string(body), "acme") {
			t.Fatalf("Eve's repositories: %d %s", status, body)
		}
		if auth, err := e.svc.GitAuthFor(ctx, eveProject.ProjectID, secret.CloneURL); err != nil || auth != nil {
			t.Fatalf("clone credentials for Eve's project on acme's repository: %+v %v", auth, err)
		}
		if n := e.fake.TokenMints(500); n != mintsBefore {
			t.Fatalf("acme's installation minted %d tokens for Eve", n-mintsBefore)
		}
		// A push to acme's repository does not deploy Eve's project.
		id := githubfake.NewDeliveryID()
		e.deliver("push", id, e.fake.PushPayload(githubfake.Push{Installation: 500, Repo: secret, Branch: "main", Message: "secret"}))
		if d := e.waitProcessed(id); decisionOf(d, eveProject.ProjectID).Decision != codehost.DecisionNotLinked {
			t.Fatalf("Eve's project: %+v", d.Decisions)
		}
		for _, tr := range e.deployer.triggers() {
			if tr.OwnerID == eve {
				t.Fatalf("Eve's project was deployed: %+v", tr)
			}
		}

		// Once Eve joins acme at the code host, the same flow links it.
		e.fake.SetMembers(500, "alice-gh", "eve-gh")
		e.linkIdentity(eve, "eve-gh")
		e.install(eve, 500)
		var got []codehost.RepositoryOut
		e.getJSON("/codehost/repositories", eve, http.StatusOK, &got)
		if len(got) != 2 {
			t.Fatalf("Eve's repositories as a member: %+v", got)
		}
	})
}

// TestConnectSendsUnlinkedUsersThroughOAuth: GET /codehost/connect for a user
// without a usable code-host identity answers linkFirst with the connector's
// URL and cookie, whose next step is the install page carrying a state for
// that user; without a connector, a 409 saying what to do.
func TestConnectSendsUnlinkedUsersThroughOAuth(t *testing.T) {
	each(t, func(t *testing.T, bdb *bun.DB) {
		conn := &connector{}
		e := newEnv(t, bdb, envOpts{connector: conn})
		user := platform.NewID()
		var out struct {
			InstallURL string `json:"installUrl"`
			LinkFirst  bool   `json:"linkFirst"`
		}
		hdr := e.getJSON("/codehost/connect", user, http.StatusOK, &out)
		if !out.LinkFirst || out.InstallURL != "https://api.test/auth/codehost/connect?ticket=t1" ||
			!strings.Contains(hdr.Get("Set-Cookie"), "keelson_connect=bound") {
			t.Fatalf("unlinked connect: %+v, cookie %q", out, hdr.Get("Set-Cookie"))
		}
		next, err := url.Parse(conn.next)
		if err != nil || conn.user != user || !strings.HasPrefix(conn.next, e.fake.WebURL+"/apps/"+e.fake.AppSlug+"/installations/new?") {
			t.Fatalf("connector asked for %s, next %q", conn.user, conn.next)
		}
		// After linking, the state in next is accepted for this user.
		e.fake.AddInstallation(githubfake.Installation{ID: 8, Account: "octo"})
		e.linkIdentity(user, "octo")
		if u := e.callback("8", next.Query().Get("state")); u.Query().Get("codehost") != "connected" {
			t.Fatalf("callback after linking: %s", u)
		}
		// Linked with a working token: the install page directly.
		e.getJSON("/codehost/connect", user, http.StatusOK, &out)
		if out.LinkFirst || !strings.HasPrefix(out.InstallURL, e.fake.WebURL+"/apps/") {
			t.Fatalf("linked connect: %+v", out)
		}
		// A token the code host stopped accepting: through OAuth again.
		e.fake.RevokeUserToken(e.ids.tokens[user])
		e.getJSON("/codehost/connect", user, http.StatusOK, &out)
		if !out.LinkFirst {
			t.Fatalf("connect with a revoked token: %+v", out)
		}

		bare := newEnv(t, bdb, envOpts{})
		status, body, _ := bare.do(http.MethodGet, "/codehost/connect", platform.NewID(), nil, nil)
		if status != http.StatusConflict || !strings.Contains(string(body), "POST /auth/codehost/connect") {
			t.Fatalf("unlinked connect without a connector: %d %s", status, body)
		}
	})
}

type connector struct{ user, next string }

func (c *connector) ConnectFirst(_ context.Context, userID, next string) (string, *http.Cookie, error) {
	c.user, c.next = userID, next
	return "https://api.test/auth/codehost/connect?ticket=t1", &http.Cookie{Name: "keelson_connect", Value: "bound", HttpOnly: true}, nil
}

// TestDeliveriesNotByTypedURL is attack 2 of issue 14: Eve creates a project
// with acme's repository URL (she never linked acme's installation; she did
// link one of her own) and reads GET /codehost/deliveries. Before the fix
// acme's pushes (repository, installation id) showed up there. Now she sees
// none of them, not by her project's id either, and another user's project
// id is a 404.
func TestDeliveriesNotByTypedURL(t *testing.T) {
	each(t, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, envOpts{})
		alice, eve := platform.NewID(), platform.NewID()
		acme := e.fake.AddInstallation(githubfake.Installation{ID: 700, Account: "acme", AccountType: "Organization",
			Members: []string{"alice-gh"}, Repositories: repos("acme", 2)})
		e.fake.AddInstallation(githubfake.Installation{ID: 701, Account: "eve-gh", Repositories: repos("eve-gh", 3)})
		e.linkIdentity(alice, "alice-gh")
		e.install(alice, 700)
		e.install(eve, 701)
		repo := acme.Repositories[0]
		aliceProject := e.projects.add(codehost.RepoProject{OwnerID: alice, AutoDeploy: true, RepoURL: repo.CloneURL})
		eveProject := e.projects.add(codehost.RepoProject{OwnerID: eve, AutoDeploy: true, RepoURL: repo.HTMLURL})

		id := githubfake.NewDeliveryID()
		e.deliver("push", id, e.fake.PushPayload(githubfake.Push{Installation: 700, Repo: repo, Branch: "main", Message: "acme secret"}))
		d := e.waitProcessed(id)
		if decisionOf(d, aliceProject.ProjectID).Decision != codehost.DecisionDeployed ||
			decisionOf(d, eveProject.ProjectID).Decision != codehost.DecisionNotLinked {
			t.Fatalf("decisions %+v", d.Decisions)
		}

		for _, q := range []string{"", "?limit=100", "?projectId=" + eveProject.ProjectID} {
			got, _ := e.deliveries(eve, q)
			if len(got) != 0 {
				t.Fatalf("Eve GET /codehost/deliveries%s: %+v", q, got)
			}
		}
		for _, pid := range []string{aliceProject.ProjectID, platform.NewID()} {
			status, body, _ := e.do(http.MethodGet, "/codehost/deliveries?projectId="+pid, eve, nil, nil)
			if status != http.StatusNotFound || strings.Contains(string(body), "acme") {
				t.Fatalf("Eve filtering by %s: %d %s", pid, status, body)
			}
		}
		// Alice sees it, with her own project's decision only.
		got, _ := e.deliveries(alice, "?projectId="+aliceProject.ProjectID)
		if len(got) != 1 || got[0].Repository != "acme/repo-2" || len(got[0].Decisions) != 1 ||
			got[0].Decisions[0].ProjectID != aliceProject.ProjectID {
			t.Fatalf("Alice's log: %+v", got)
		}
		// Deliveries of the installation Eve linked are hers to see.
		own := &githubfake.Repository{ID: 3, Owner: "eve-gh", Name: "repo-3"}
		id2 := githubfake.NewDeliveryID()
		e.deliver("push", id2, e.fake.PushPayload(githubfake.Push{Installation: 701, Repo: own, Branch: "main"}))
		e.waitProcessed(id2)
		if got, _ := e.deliveries(eve, ""); len(got) != 1 || got[0].DeliveryID != id2 {
			t.Fatalf("Eve's own installation's log: %+v", got)
		}
	})
}
