package codehost_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/codehost"
	"github.com/keelson-dev/keelson/codehost/githubfake"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/uptrace/bun"
	"go.uber.org/goleak"
)

func repos(owner string, ids ...int64) []*githubfake.Repository {
	var out []*githubfake.Repository
	for _, id := range ids {
		out = append(out, &githubfake.Repository{ID: id, Owner: owner, Name: fmt.Sprintf("repo-%d", id), Private: id%2 == 0})
	}
	return out
}

func TestConnectCallbackRepositories(t *testing.T) {
	each(t, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, envOpts{pageSize: 2})
		user := platform.NewID()
		e.fake.AddInstallation(githubfake.Installation{ID: 42, Account: "octocat", Repositories: repos("octocat", 5, 3, 1, 4, 2)})

		// No installation yet: a clear 404 naming what to do.
		status, body, _ := e.do(http.MethodGet, "/codehost/repositories", user, nil, nil)
		if status != http.StatusNotFound || !strings.Contains(string(body), "connect one with GET /codehost/connect") {
			t.Fatalf("repositories before install: %d %s", status, body)
		}

		e.install(user, 42)

		var got []codehost.RepositoryOut
		pages := e.fake.Calls("GET /user/installations/{id}/repositories")
		e.getJSON("/codehost/repositories", user, http.StatusOK, &got)
		if len(got) != 5 {
			t.Fatalf("got %d repositories over 3 pages of 2, want 5: %+v", len(got), got)
		}
		for i, r := range got {
			wantName := fmt.Sprintf("octocat/repo-%d", i+1)
			if r.FullName != wantName || r.InstallationID != 42 || r.DefaultBranch != "main" ||
				r.CloneURL != e.fake.WebURL+"/"+wantName+".git" || r.Private != (r.ID%2 == 0) {
				t.Fatalf("repository %d = %+v, want %s", i, r, wantName)
			}
		}
		// Asked with the user's own token (their view), not the installation's.
		if n := e.fake.Calls("GET /user/installations/{id}/repositories") - pages; n != 3 {
			t.Fatalf("listing made %d page requests, want 3 (Link pagination)", n)
		}
		if n := e.fake.Calls("GET /installation/repositories"); n != 0 {
			t.Fatalf("listing used the installation's own view (%d requests)", n)
		}

		// Another user sees nothing of it.
		status, _, _ = e.do(http.MethodGet, "/codehost/repositories", platform.NewID(), nil, nil)
		if status != http.StatusNotFound {
			t.Fatalf("other user: status %d, want 404", status)
		}
		// Without a token: 401.
		status, _, _ = e.do(http.MethodGet, "/codehost/repositories", "", nil, nil)
		if status != http.StatusUnauthorized {
			t.Fatalf("no token: status %d, want 401", status)
		}
	})
}

func TestInstallationTokenCached(t *testing.T) {
	each(t, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, envOpts{})
		user := platform.NewID()
		in := e.fake.AddInstallation(githubfake.Installation{ID: 7, Account: "octocat", Repositories: repos("octocat", 2)})
		e.install(user, 7)
		p := e.projects.add(codehost.RepoProject{OwnerID: user, RepoURL: in.Repositories[0].CloneURL})
		clone := func() {
			t.Helper()
			if auth, err := e.svc.GitAuthFor(context.Background(), p.ProjectID, p.RepoURL); err != nil || auth == nil {
				t.Fatalf("GitAuthFor = %v, %v", auth, err)
			}
		}
		for range 3 {
			clone()
		}
		if n := e.fake.TokenMints(7); n != 1 {
			t.Fatalf("3 clones minted %d tokens, want 1 (cached)", n)
		}
		// 54 minutes on, the 1-hour token has 6 minutes left: still used.
		e.clock.advance(54 * time.Minute)
		clone()
		if n := e.fake.TokenMints(7); n != 1 {
			t.Fatalf("token with 6 minutes left was replaced (%d mints)", n)
		}
		// Within 5 minutes of expiry it is replaced.
		e.clock.advance(2 * time.Minute)
		clone()
		if n := e.fake.TokenMints(7); n != 2 {
			t.Fatalf("token 4 minutes from expiry: %d mints, want 2", n)
		}
	})
}

func TestCallbackRejects(t *testing.T) {
	each(t, func(t *testing.T, bdb *bun.DB) {
		alice, bob, carol := platform.NewID(), platform.NewID(), platform.NewID()
		e := newEnv(t, bdb, envOpts{})
		e.fake.AddInstallation(githubfake.Installation{ID: 1, Account: "alice", Repositories: repos("alice", 1)})
		e.fake.AddInstallation(githubfake.Installation{ID: 2, Account: "alice", Suspended: true})
		e.fake.AddInstallation(githubfake.Installation{ID: 3, Account: "acme", AccountType: "Organization",
			Members: []string{"alice", "bob"}, Repositories: repos("acme", 9)})
		e.linkIdentity(alice, "alice")
		e.linkIdentity(bob, "bob")
		e.linkIdentity(carol, "someone-else")

		expectError := func(name, installationID, state, want string) {
			t.Helper()
			u := e.callback(installationID, state)
			if u.Query().Get("codehost") != "error" || u.Query().Get("reason") != want {
				t.Fatalf("%s: redirected to %s, want codehost=error&reason=%s", name, u, want)
			}
		}

		good := e.connect(alice)
		expectError("tampered", "1", good[:len(good)-4]+"AAAA", codehost.ReasonInvalidState)
		expectError("garbage", "1", "not-a-state", codehost.ReasonInvalidState)
		expectError("unknown installation", "999", e.connect(alice), codehost.ReasonNotFound)
		expectError("suspended", "2", e.connect(alice), codehost.ReasonSuspended)
		expectError("not the linked login", "1", e.connect(carol), codehost.ReasonNotYours)

		old := e.connect(alice)
		e.clock.advance(11 * time.Minute)
		expectError("expired", "1", old, codehost.ReasonExpiredState)

		if n := e.count("codehost_links"); n != 0 {
			t.Fatalf("bad callbacks linked %d installations", n)
		}

		// The good state works once; replayed, it links nothing more.
		if u := e.callback("1", good); u.Query().Get("codehost") == "connected" {
			// good was issued 11 minutes ago: it has expired too.
			t.Fatalf("an expired state linked: %s", u)
		}
		fresh := e.connect(alice)
		if u := e.callback("1", fresh); u.Query().Get("codehost") != "connected" {
			t.Fatalf("fresh state: %s", u)
		}
		expectError("replayed", "1", fresh, codehost.ReasonStateUsed)
		// Bob cannot take over alice's personal installation with his own state:
		// the code host, asked with bob's token, does not list it.
		expectError("personal installation of another user", "1", e.connect(bob), codehost.ReasonNotYours)
		if n := e.count("codehost_links"); n != 1 {
			t.Fatalf("links = %d, want alice's only", n)
		}
		// An organisation installation may be shared by its members.
		e.install(alice, 3)
		e.install(bob, 3)
		var got []codehost.RepositoryOut
		e.getJSON("/codehost/repositories", bob, http.StatusOK, &got)
		if len(got) != 1 || got[0].FullName != "acme/repo-9" {
			t.Fatalf("bob's repositories = %+v", got)
		}

		// Malformed query: a 400 naming the field.
		status, body, _ := e.do(http.MethodGet, "/codehost/app/callback?installation_id=-3&state=x", "", nil, nil)
		if status != http.StatusBadRequest || !strings.Contains(string(body), "installation_id") {
			t.Fatalf("negative installation_id: %d %s", status, body)
		}
		status, body, _ = e.do(http.MethodGet, "/codehost/app/callback?installation_id=1", "", nil, nil)
		if status != http.StatusBadRequest || !strings.Contains(string(body), "state") {
			t.Fatalf("missing state: %d %s", status, body)
		}
	})
}

func TestNotConfigured(t *testing.T) {
	e := newEnv(t, dbtest.SQLite(t, sets...), envOpts{missing: []string{"KEELSON_CODEHOST_APP_ID", "KEELSON_CODEHOST_WEBHOOK_SECRET"}})
	user := platform.NewID()
	for _, c := range []struct{ method, path, token string }{
		{http.MethodGet, "/codehost/connect", user},
		{http.MethodGet, "/codehost/repositories", user},
		{http.MethodGet, "/codehost/app/callback?installation_id=1&state=x", ""},
	} {
		body := bytes.NewReader([]byte(`{"zen":"hi"}`))
		status, resp, _ := e.do(c.method, c.path, c.token, body, map[string]string{
			"X-GitHub-Event": "ping", "X-Hub-Signature-256": codehost.Sign("", []byte(`{"zen":"hi"}`)),
		})
		if status != http.StatusServiceUnavailable || !strings.Contains(string(resp), "KEELSON_CODEHOST_APP_ID") ||
			!strings.Contains(string(resp), "KEELSON_CODEHOST_WEBHOOK_SECRET") {
			t.Errorf("%s %s: %d %s, want 503 naming the missing settings", c.method, c.path, status, resp)
		}
	}
	// The webhook still takes repository webhooks; one no project's secret
	// signs is a 401 that stores nothing.
	status, resp, _ := e.do(http.MethodPost, "/codehost/webhook", "", bytes.NewReader([]byte(`{"zen":"hi"}`)), map[string]string{
		"X-GitHub-Event": "ping", "X-Hub-Signature-256": codehost.Sign("", []byte(`{"zen":"hi"}`)),
	})
	if status != http.StatusUnauthorized || !strings.Contains(string(resp), "webhookSecret") {
		t.Errorf("unconfigured webhook: %d %s, want 401 naming the project's webhookSecret", status, resp)
	}
	if n := e.count("codehost_deliveries"); n != 0 {
		t.Fatalf("unconfigured webhook stored %d deliveries", n)
	}
}

func TestWebhookRejectsBadSignatures(t *testing.T) {
	each(t, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, envOpts{})
		owner := platform.NewID()
		e.fake.AddInstallation(githubfake.Installation{ID: 5, Account: "octocat", Repositories: repos("octocat", 1)})
		e.install(owner, 5)
		repo := &githubfake.Repository{ID: 1, Owner: "octocat", Name: "repo-1"}
		e.projects.add(codehost.RepoProject{OwnerID: owner, AutoDeploy: true, RepoURL: e.fake.WebURL + "/octocat/repo-1"})
		body := e.fake.PushPayload(githubfake.Push{Installation: 5, Repo: repo, Branch: "main", Message: "ship it"})
		for name, d := range map[string]githubfake.Delivery{
			"unsigned":       {Event: "push", Body: body},
			"wrong secret":   {Event: "push", Body: body, Secret: "not-the-secret"},
			"sha1 only":      {Event: "push", Body: body, Signature: "sha1=0123456789abcdef0123456789abcdef01234567"},
			"other body":     {Event: "push", Body: body, Signature: codehost.Sign(webhookSecret, append(body, ' '))},
			"garbage header": {Event: "push", Body: body, Signature: "sha256=zz"},
		} {
			status, resp, err := e.fake.Deliver(context.Background(), nil, e.url+"/codehost/webhook", d)
			if err != nil {
				t.Fatal(err)
			}
			if status != http.StatusUnauthorized || !strings.Contains(string(resp), "x-hub-signature-256") {
				t.Errorf("%s: %d %s, want 401 naming x-hub-signature-256", name, status, resp)
			}
		}
		if n := e.count("codehost_deliveries"); n != 0 {
			t.Fatalf("rejected deliveries stored %d rows", n)
		}
		if n := len(e.deployer.triggers()); n != 0 {
			t.Fatalf("rejected deliveries triggered %d deployments", n)
		}
		// A signed delivery with a bad event header or body is a 400, stored nowhere.
		for name, c := range map[string]struct {
			event string
			body  []byte
		}{
			"no event":    {"", body},
			"odd event":   {"Push!", body},
			"not JSON":    {"push", []byte("ref=main")},
			"JSON array":  {"push", []byte(`[1,2]`)},
			"broken JSON": {"push", []byte(`{"ref":`)},
		} {
			hdr := map[string]string{"X-Hub-Signature-256": codehost.Sign(webhookSecret, c.body), "Content-Type": "application/json"}
			if c.event != "" {
				hdr["x-codehost-event"] = c.event
			}
			status, resp, _ := e.do(http.MethodPost, "/codehost/webhook", "", bytes.NewReader(c.body), hdr)
			if status != http.StatusBadRequest {
				t.Errorf("%s: %d %s, want 400", name, status, resp)
			}
		}
		if n := e.count("codehost_deliveries"); n != 0 {
			t.Fatalf("bad deliveries stored %d rows", n)
		}
	})
}

func TestPushDeploys(t *testing.T) {
	each(t, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, envOpts{})
		owner, stranger := platform.NewID(), platform.NewID()
		e.fake.AddInstallation(githubfake.Installation{ID: 9, Account: "octocat", Repositories: repos("octocat", 100)})
		e.install(owner, 9)
		repo := &githubfake.Repository{ID: 100, Owner: "octocat", Name: "repo-100", DefaultBranch: "main"}
		url := e.fake.WebURL + "/octocat/repo-100"
		onMain := e.projects.add(codehost.RepoProject{OwnerID: owner, AutoDeploy: true, RepoURL: url + ".git"})
		off := e.projects.add(codehost.RepoProject{OwnerID: owner, AutoDeploy: false, RepoURL: url})
		onDevelop := e.projects.add(codehost.RepoProject{OwnerID: owner, AutoDeploy: true, AutoDeployBranch: "develop", RepoURL: url})
		strangers := e.projects.add(codehost.RepoProject{OwnerID: stranger, AutoDeploy: true, RepoURL: url})

		sha := githubfake.RandomSHA()
		id := githubfake.NewDeliveryID()
		body := e.fake.PushPayload(githubfake.Push{Installation: 9, Repo: repo, Branch: "main", After: sha, Message: "fix: the thing"})
		e.deliver("push", id, body)
		d := e.waitProcessed(id)
		// The same delivery again: acknowledged, not processed again.
		e.deliver("push", id, body)
		if _, err := e.svc.ProcessPending(context.Background()); err != nil {
			t.Fatal(err)
		}

		tr := e.deployer.triggers()
		if len(tr) != 1 || tr[0].ProjectID != onMain.ProjectID || tr[0].SHA != sha || tr[0].OwnerID != owner {
			t.Fatalf("triggers = %+v, want one of %s at %s", tr, onMain.ProjectID, sha)
		}
		if n := e.count("codehost_deliveries"); n != 1 {
			t.Fatalf("deliveries stored = %d, want 1", n)
		}
		if d.Event != "push" || !d.SignatureValid || d.Status != codehost.DeliveryProcessed || d.Repository != "octocat/repo-100" || d.InstallationID != 9 {
			t.Fatalf("delivery = %+v", d)
		}
		for p, want := range map[string]string{
			onMain.ProjectID:    codehost.DecisionDeployed,
			off.ProjectID:       codehost.DecisionAutoDeployOff,
			onDevelop.ProjectID: codehost.DecisionBranchMismatch,
			strangers.ProjectID: codehost.DecisionNotLinked,
		} {
			if got := decisionOf(d, p); got.Decision != want {
				t.Errorf("project %s: decision %+v, want %q", p, got, want)
			}
		}
		if dep := decisionOf(d, onMain.ProjectID).DeploymentID; dep != tr[0].DeploymentID {
			t.Errorf("deployed decision names deployment %q, want %q", dep, tr[0].DeploymentID)
		}

		// The owner sees the delivery with decisions about their projects only.
		mine, _ := e.deliveries(owner, "")
		if len(mine) != 1 || len(mine[0].Decisions) != 3 {
			t.Fatalf("owner's log = %+v", mine)
		}
		// The stranger typed the repository's URL into a project but never
		// linked the installation: none of its deliveries are theirs to see.
		theirs, _ := e.deliveries(stranger, "")
		if len(theirs) != 0 {
			t.Fatalf("stranger's log = %+v", theirs)
		}
		nobody, _ := e.deliveries(platform.NewID(), "")
		if len(nobody) != 0 {
			t.Fatalf("an unrelated user sees %d deliveries", len(nobody))
		}
		byProject, _ := e.deliveries(owner, "?projectId="+onDevelop.ProjectID)
		if len(byProject) != 1 {
			t.Fatalf("filtered by project: %+v", byProject)
		}

		// The same signed body under a fresh delivery id (a captured push
		// replayed): that branch and commit deployed already, so nothing is
		// deployed again (issue 23).
		replay := githubfake.NewDeliveryID()
		e.deliver("push", replay, body)
		if got := decisionOf(e.waitProcessed(replay), onMain.ProjectID); got.Decision != codehost.DecisionAlreadyDeployed ||
			!strings.Contains(got.Detail, "main@"+sha) {
			t.Fatalf("replayed push: %+v", got)
		}
		if tr := e.deployer.triggers(); len(tr) != 1 {
			t.Fatalf("a replayed push deployed again: %+v", tr)
		}

		// Skip markers, deleted branches and quota refusals are recorded too.
		send := func(p githubfake.Push) delivery {
			t.Helper()
			id := githubfake.NewDeliveryID()
			e.deliver("push", id, e.fake.PushPayload(p))
			return e.waitProcessed(id)
		}
		d = send(githubfake.Push{Installation: 9, Repo: repo, Branch: "main", Message: "docs: typo [skip ci]"})
		if got := decisionOf(d, onMain.ProjectID); got.Decision != codehost.DecisionSkipMessage {
			t.Fatalf("[skip ci]: %+v", got)
		}
		d = send(githubfake.Push{Installation: 9, Repo: repo, Branch: "main", Message: "chore [Skip Deploy]"})
		if got := decisionOf(d, onMain.ProjectID); got.Decision != codehost.DecisionSkipMessage {
			t.Fatalf("[skip deploy]: %+v", got)
		}
		d = send(githubfake.Push{Installation: 9, Repo: repo, Branch: "main", Deleted: true})
		if got := decisionOf(d, onMain.ProjectID); got.Decision != codehost.DecisionBranchDeleted {
			t.Fatalf("deleted branch: %+v", got)
		}
		d = send(githubfake.Push{Installation: 9, Repo: repo, Ref: "refs/tags/v1.0.0", Message: "release"})
		if got := decisionOf(d, onMain.ProjectID); got.Decision != codehost.DecisionBranchMismatch {
			t.Fatalf("tag push: %+v", got)
		}
		d = send(githubfake.Push{Installation: 9, Repo: repo, Branch: "feature/x", Message: "wip"})
		if got := decisionOf(d, onMain.ProjectID); got.Decision != codehost.DecisionBranchMismatch || !strings.Contains(got.Detail, "feature/x") {
			t.Fatalf("other branch: %+v", got)
		}
		e.deployer.mu.Lock()
		e.deployer.fail = func(string) error {
			return &platform.Error{Status: 403, Message: "plan FREE allows 10 deployments a month", Err: platform.ErrForbidden}
		}
		e.deployer.mu.Unlock()
		refused := githubfake.RandomSHA()
		d = send(githubfake.Push{Installation: 9, Repo: repo, Branch: "main", After: refused, Message: "more"})
		if got := decisionOf(d, onMain.ProjectID); got.Decision != codehost.DecisionQuotaExceeded || got.Detail != "plan FREE allows 10 deployments a month" {
			t.Fatalf("quota: %+v", got)
		}
		e.deployer.mu.Lock()
		e.deployer.fail = func(string) error { return fmt.Errorf("database on fire: password=hunter2") }
		e.deployer.mu.Unlock()
		d = send(githubfake.Push{Installation: 9, Repo: repo, Branch: "main", Message: "again"})
		if got := decisionOf(d, onMain.ProjectID); got.Decision != codehost.DecisionFailed || strings.Contains(got.Detail, "hunter2") {
			t.Fatalf("internal trigger error: %+v", got)
		}
		if n := len(e.deployer.triggers()); n != 1 {
			t.Fatalf("%d deployments after the first push, want still 1", n)
		}

		// A push to develop deploys the develop project.
		sha2 := githubfake.RandomSHA()
		e.deployer.mu.Lock()
		e.deployer.fail = nil
		e.deployer.mu.Unlock()
		d = send(githubfake.Push{Installation: 9, Repo: repo, Branch: "develop", After: sha2, Message: "feat"})
		if got := decisionOf(d, onDevelop.ProjectID); got.Decision != codehost.DecisionDeployed {
			t.Fatalf("develop push: %+v", got)
		}
		if tr := e.deployer.triggers(); len(tr) != 2 || tr[1].ProjectID != onDevelop.ProjectID || tr[1].SHA != sha2 {
			t.Fatalf("triggers = %+v", tr)
		}
		// A commit whose push was refused (quota) deploys when pushed again:
		// only a deployed push holds its commit.
		d = send(githubfake.Push{Installation: 9, Repo: repo, Branch: "main", After: refused, Message: "more"})
		if got := decisionOf(d, onMain.ProjectID); got.Decision != codehost.DecisionDeployed {
			t.Fatalf("push of a refused commit again: %+v", got)
		}
	})
}

func TestDeliveryLogPagination(t *testing.T) {
	each(t, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, envOpts{})
		owner := platform.NewID()
		e.fake.AddInstallation(githubfake.Installation{ID: 11, Account: "octocat", Repositories: repos("octocat", 1)})
		e.install(owner, 11)
		var ids []string
		for i := range 5 {
			id := fmt.Sprintf("delivery-%d", i)
			e.deliver("installation_repositories", id, e.fake.InstallationRepositoriesPayload("added", 11,
				repos("octocat", int64(10+i)), nil))
			ids = append(ids, id)
		}
		for _, id := range ids {
			e.waitProcessed(id)
		}
		var seen []string
		cursor := ""
		for page := 0; ; page++ {
			q := "?limit=2"
			if cursor != "" {
				q += "&cursor=" + cursor
			}
			got, next := e.deliveries(owner, q)
			for _, d := range got {
				seen = append(seen, d.DeliveryID)
				if !strings.Contains(d.Detail, "added: octocat/repo-") {
					t.Fatalf("installation_repositories detail = %q", d.Detail)
				}
			}
			if next == "" {
				break
			}
			if page > 5 {
				t.Fatal("pagination does not end")
			}
			cursor = next
		}
		want := []string{"delivery-4", "delivery-3", "delivery-2", "delivery-1", "delivery-0"}
		if fmt.Sprint(seen) != fmt.Sprint(want) {
			t.Fatalf("pages = %v, want newest first %v", seen, want)
		}
		status, body, _ := e.do(http.MethodGet, "/codehost/deliveries?cursor=garbage", owner, nil, nil)
		if status != http.StatusBadRequest || !strings.Contains(string(body), "cursor") {
			t.Fatalf("bad cursor: %d %s", status, body)
		}
	})
}

func TestInstallationLifecycle(t *testing.T) {
	each(t, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, envOpts{})
		owner := platform.NewID()
		in := e.fake.AddInstallation(githubfake.Installation{ID: 21, Account: "octocat", Repositories: repos("octocat", 1, 2)})
		repo := in.Repositories[0]
		p := e.projects.add(codehost.RepoProject{OwnerID: owner, AutoDeploy: true, RepoURL: repo.HTMLURL})

		send := func(event string, body []byte) delivery {
			t.Helper()
			id := githubfake.NewDeliveryID()
			e.deliver(event, id, body)
			return e.waitProcessed(id)
		}
		push := func() string {
			t.Helper()
			d := send("push", e.fake.PushPayload(githubfake.Push{Installation: 21, Repo: repo, Branch: "main", Message: "x"}))
			return decisionOf(d, p.ProjectID).Decision
		}
		d := send("installation", e.fake.InstallationPayload("created", 21))
		if d.Action != "created" || !strings.Contains(d.Detail, "active") || !strings.Contains(d.Detail, "octocat/repo-1") {
			t.Fatalf("created: %+v", d)
		}
		// Installed but not linked to the owner yet: no deployment.
		if got := push(); got != codehost.DecisionNotLinked {
			t.Fatalf("before callback: %q", got)
		}
		e.install(owner, 21)
		if got := push(); got != codehost.DecisionDeployed {
			t.Fatalf("after callback: %q", got)
		}

		e.fake.SetSuspended(21, true)
		send("installation", e.fake.InstallationPayload("suspend", 21))
		if got := push(); got != codehost.DecisionNotLinked {
			t.Fatalf("suspended: %q", got)
		}
		status, _, _ := e.do(http.MethodGet, "/codehost/repositories", owner, nil, nil)
		if status != http.StatusNotFound {
			t.Fatalf("repositories of a suspended installation: %d, want 404", status)
		}

		e.fake.SetSuspended(21, false)
		send("installation", e.fake.InstallationPayload("unsuspend", 21))
		if got := push(); got != codehost.DecisionDeployed {
			t.Fatalf("unsuspended: %q", got)
		}
		e.getJSON("/codehost/repositories", owner, http.StatusOK, nil)

		d = send("installation_repositories", e.fake.InstallationRepositoriesPayload("removed", 21, nil, in.Repositories[1:]))
		if d.Action != "removed" || !strings.Contains(d.Detail, "removed: octocat/repo-2") {
			t.Fatalf("installation_repositories: %+v", d)
		}

		send("installation", e.fake.InstallationPayload("deleted", 21))
		if got := push(); got != codehost.DecisionNotLinked {
			t.Fatalf("deleted: %q", got)
		}
		status, _, _ = e.do(http.MethodGet, "/codehost/repositories", owner, nil, nil)
		if status != http.StatusNotFound {
			t.Fatalf("repositories of a deleted installation: %d, want 404", status)
		}
		if n := len(e.deployer.triggers()); n != 2 {
			t.Fatalf("deployments = %d, want 2", n)
		}
		// The owner sees the installation's deliveries in their log.
		mine, _ := e.deliveries(owner, "?limit=100")
		if len(mine) < 8 {
			t.Fatalf("owner sees %d deliveries", len(mine))
		}

		// Ping: processed, answered.
		d = send("ping", e.fake.PingPayload())
		if d.Status != codehost.DeliveryProcessed || d.Detail != "pong" {
			t.Fatalf("ping: %+v", d)
		}
	})
}

// A delivery stored while no worker runs is processed when one starts, as
// after a crash between storing and processing.
func TestPendingDeliveryProcessedOnStart(t *testing.T) {
	each(t, func(t *testing.T, bdb *bun.DB) {
		first := newEnv(t, bdb, envOpts{noStart: true})
		owner := platform.NewID()
		in := first.fake.AddInstallation(githubfake.Installation{ID: 31, Account: "octocat", Repositories: repos("octocat", 1)})
		first.install(owner, 31)
		p := first.projects.add(codehost.RepoProject{OwnerID: owner, AutoDeploy: true, RepoURL: in.Repositories[0].HTMLURL})
		sha := githubfake.RandomSHA()
		first.deliver("push", "restart-1", first.fake.PushPayload(githubfake.Push{Installation: 31, Repo: in.Repositories[0], Branch: "main", After: sha}))
		all, _ := first.deliveries(first.admin, "")
		if len(all) != 1 || all[0].Status != codehost.DeliveryPending {
			t.Fatalf("before start: %+v", all)
		}

		second := newEnv(t, bdb, envOpts{fake: first.fake, projects: first.projects, deployer: first.deployer, ids: first.ids})
		d := second.waitProcessed("restart-1")
		if got := decisionOf(d, p.ProjectID); got.Decision != codehost.DecisionDeployed {
			t.Fatalf("after restart: %+v", d)
		}
		if tr := first.deployer.triggers(); len(tr) != 1 || tr[0].SHA != sha {
			t.Fatalf("triggers = %+v", tr)
		}
	})
}

func TestWorkerStopsCleanly(t *testing.T) {
	e := newEnv(t, dbtest.SQLite(t, sets...), envOpts{noStart: true})
	opts := goleak.IgnoreCurrent()
	if err := e.svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Start(context.Background()); err == nil {
		t.Fatal("second Start did not fail")
	}
	if err := e.svc.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	goleak.VerifyNone(t, opts)
}

func TestWebhookBodyLimit(t *testing.T) {
	e := newEnv(t, dbtest.SQLite(t, sets...), envOpts{})
	// 3 MiB: above the 1 MiB default, below the route's 25 MiB.
	big, _ := json.Marshal(map[string]any{"zen": strings.Repeat("z", 3<<20)})
	e.deliver("ping", "big-1", big)
	if d := e.waitProcessed("big-1"); d.Status != codehost.DeliveryProcessed {
		t.Fatalf("big ping: %+v", d)
	}
	huge := append([]byte(`{"zen":"`), bytes.Repeat([]byte("z"), codehost.MaxWebhookBytes)...)
	huge = append(huge, '"', '}')
	status, _, err := e.fake.Deliver(context.Background(), nil, e.url+"/codehost/webhook",
		githubfake.Delivery{Event: "ping", Body: huge, Secret: webhookSecret})
	if err != nil {
		t.Fatal(err)
	}
	if status != http.StatusRequestEntityTooLarge {
		t.Fatalf("26 MB delivery: status %d, want 413", status)
	}
}

func TestGitAuthFor(t *testing.T) {
	each(t, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, envOpts{})
		owner, other := platform.NewID(), platform.NewID()
		in := e.fake.AddInstallation(githubfake.Installation{ID: 41, Account: "octocat", Repositories: repos("octocat", 2)})
		e.install(owner, 41)
		private := in.Repositories[0]
		mine := e.projects.add(codehost.RepoProject{OwnerID: owner, RepoURL: private.CloneURL})
		theirs := e.projects.add(codehost.RepoProject{OwnerID: other, RepoURL: private.CloneURL})
		elsewhere := e.projects.add(codehost.RepoProject{OwnerID: owner, RepoURL: "https://evil.example/octocat/repo-2.git"})
		ctx := context.Background()

		auth, err := e.svc.GitAuthFor(ctx, mine.ProjectID, private.CloneURL)
		if err != nil || auth == nil {
			t.Fatalf("GitAuthFor(own private repo) = %v, %v", auth, err)
		}
		if auth.Username != "x-access-token" || !e.fake.CanAccess(auth.Password, "octocat/repo-2") {
			t.Fatalf("credential %q is not a valid installation token for the repository", auth.Username)
		}
		for name, c := range map[string]struct{ project, url string }{
			"another owner's project": {theirs.ProjectID, private.CloneURL},
			"same path, other host":   {elsewhere.ProjectID, elsewhere.RepoURL},
			"unknown project":         {platform.NewID(), private.CloneURL},
		} {
			if auth, err := e.svc.GitAuthFor(ctx, c.project, c.url); err != nil || auth != nil {
				t.Errorf("%s: GitAuthFor = %v, %v; want nil, nil", name, auth, err)
			}
		}
	})
}

// TestAppDeliveriesVerifiedWhileAppIncomplete (issue 23): with the app's
// webhook secret set but its id and key not yet, an app-signed ping answers
// 200 and is answered "pong" naming what is missing; an app-signed push is
// stored and fails naming it; a wrong signature is still a 401.
func TestAppDeliveriesVerifiedWhileAppIncomplete(t *testing.T) {
	e := newEnv(t, dbtest.SQLite(t, sets...), envOpts{missing: []string{"KEELSON_CODEHOST_APP_ID", "KEELSON_CODEHOST_APP_PRIVATE_KEY"}})
	post := func(event, id string, body []byte, secret string) int {
		t.Helper()
		status, _, _ := e.do(http.MethodPost, "/codehost/webhook", "", bytes.NewReader(body), map[string]string{
			"X-GitHub-Event": event, "X-GitHub-Delivery": id, "X-Hub-Signature-256": codehost.Sign(secret, body),
		})
		return status
	}
	ping := []byte(`{"zen":"Keep it logically awesome.","hook_id":1}`)
	if st := post("ping", "ping-1", ping, webhookSecret); st != http.StatusOK {
		t.Fatalf("app-signed ping: %d, want 200", st)
	}
	push := e.fake.PushPayload(githubfake.Push{Installation: 9, Repo: &githubfake.Repository{ID: 1, Owner: "o", Name: "r", DefaultBranch: "main"}, Branch: "main"})
	if st := post("push", "push-1", push, webhookSecret); st != http.StatusOK {
		t.Fatalf("app-signed push: %d, want 200", st)
	}
	if st := post("ping", "ping-2", ping, "not-the-secret"); st != http.StatusUnauthorized {
		t.Fatalf("wrongly signed ping: %d, want 401", st)
	}
	if _, err := e.svc.ProcessPending(context.Background()); err != nil {
		t.Fatal(err)
	}
	var rows []struct {
		DeliveryID string `bun:"delivery_id"`
		Status     string `bun:"status"`
		Detail     string `bun:"detail"`
	}
	if err := e.db.NewSelect().Table("codehost_deliveries").Column("delivery_id", "status", "detail").
		Order("delivery_id").Scan(context.Background(), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].DeliveryID != "ping-1" || rows[0].Status != codehost.DeliveryProcessed ||
		!strings.HasPrefix(rows[0].Detail, "pong") || !strings.Contains(rows[0].Detail, "KEELSON_CODEHOST_APP_ID") ||
		rows[1].Status != codehost.DeliveryFailed || !strings.Contains(rows[1].Detail, "KEELSON_CODEHOST_APP_PRIVATE_KEY") {
		t.Fatalf("deliveries = %+v", rows)
	}
}

// TestGitAuthForOnlyWhileTheOwnerMayDeploy: a project's owner (for a team
// project, the member who created it or moved it in) lends it their
// installations' clone credentials only while they may deploy it. Barred, a
// private repository of their installation is a 409 naming the way out,
// from CheckRepoAccess and GitAuthFor alike, and no token is minted; a
// public one is cloned without credentials; a role that cannot be read
// refuses (503), never falling back to the credentials.
func TestGitAuthForOnlyWhileTheOwnerMayDeploy(t *testing.T) {
	each(t, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, envOpts{})
		owner := platform.NewID()
		in := e.fake.AddInstallation(githubfake.Installation{ID: 43, Account: "octocat", Repositories: repos("octocat", 2, 3)})
		e.install(owner, 43)
		private, public := in.Repositories[0], in.Repositories[1]
		onPrivate := e.projects.add(codehost.RepoProject{OwnerID: owner, RepoURL: private.CloneURL})
		onPublic := e.projects.add(codehost.RepoProject{OwnerID: owner, RepoURL: public.HTMLURL})
		ctx := context.Background()
		if auth, err := e.svc.GitAuthFor(ctx, onPrivate.ProjectID, private.CloneURL); err != nil || auth == nil {
			t.Fatalf("GitAuthFor while the owner may deploy = %v, %v", auth, err)
		}

		e.projects.bar(onPrivate.ProjectID, true)
		e.projects.bar(onPublic.ProjectID, true)
		mints := e.fake.TokenMints(43)
		err := e.svc.CheckRepoAccess(ctx, onPrivate.ProjectID, private.CloneURL)
		var pe *platform.Error
		if !errors.As(err, &pe) || pe.Status != http.StatusConflict || pe.Code != codehost.CodeLinkMemberCannotDeploy ||
			!strings.Contains(pe.Message, "no longer allowed to deploy") || !strings.Contains(pe.Message, "octocat/repo-2") ||
			!strings.Contains(pe.Message, "/projects/"+onPrivate.ProjectID+"/transfer") {
			t.Fatalf("CheckRepoAccess with the owner barred: %v", err)
		}
		if auth, err := e.svc.GitAuthFor(ctx, onPrivate.ProjectID, private.CloneURL); refusalStatus(err) != http.StatusConflict || auth != nil {
			t.Fatalf("GitAuthFor with the owner barred = %v, %v", auth, err)
		}
		if auth, err := e.svc.GitAuthFor(ctx, onPublic.ProjectID, public.HTMLURL); err != nil || auth != nil {
			t.Fatalf("GitAuthFor(public repo) with the owner barred = %v, %v; want no credentials", auth, err)
		}
		if n := e.fake.TokenMints(43); n != mints {
			t.Fatalf("%d token(s) minted for a barred owner", n-mints)
		}

		e.projects.bar(onPrivate.ProjectID, false)
		e.projects.failMayDeploy(errors.New("teams table unavailable"))
		for _, p := range []codehost.RepoProject{onPrivate, onPublic} {
			if err := e.svc.CheckRepoAccess(ctx, p.ProjectID, p.RepoURL); refusalStatus(err) != http.StatusServiceUnavailable {
				t.Fatalf("CheckRepoAccess with the role unreadable: %v", err)
			}
			if auth, err := e.svc.GitAuthFor(ctx, p.ProjectID, p.RepoURL); err == nil || auth != nil {
				t.Fatalf("GitAuthFor with the role unreadable = %v, %v", auth, err)
			}
		}
		e.projects.failMayDeploy(nil)
		if err := e.svc.CheckRepoAccess(ctx, onPrivate.ProjectID, private.CloneURL); err != nil {
			t.Fatalf("CheckRepoAccess once the owner may deploy again: %v", err)
		}
	})
}
