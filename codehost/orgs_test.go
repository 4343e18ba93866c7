package codehost_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/codehost"
	"github.com/keelson-dev/keelson/codehost/githubfake"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/platformtest"
	"github.com/uptrace/bun"
)

// TestOrgLinkUsesTheUsersOwnView is issue 23's org-installation item. GitHub
// lists an organisation's installation to anyone with explicit access to one
// of its repositories (GET /user/installations), an outside collaborator
// too, and used to give them the installation's whole view. The fake speaks
// GitHub's "List repositories accessible to the user access token", GET
// /user/installations/{installation_id}/repositories
// (docs.github.com/en/rest/apps/installations#list-repositories-accessible-to-the-user-access-token,
// operation apps/list-installation-repos-for-authenticated-user of
// github/rest-api-description): {"total_count", "repository_selection",
// "repositories": [repository with "permissions"]}, Link-paginated, 404 for an
// installation the user cannot access, 401 "Bad credentials" for a revoked
// token.
//
// acme's installation reaches acme/repo-2, -4 and -6 (private). Alice and Bob
// are members; Eve is an outside collaborator on acme/repo-4 only.
//   - Eve lists acme/repo-4 only; Alice all three.
//   - Eve's project on acme/repo-2 gets no clone token (403 naming the
//     repository), nor does a push to it deploy; her project on acme/repo-4
//     does both. Her delivery log shows the acme/repo-4 push only.
//   - Removed from acme/repo-4, Eve can no longer list or deploy it and her
//     link is gone at its next use.
//   - Alice's revoked token: listing and deployments answer 409 naming what
//     to do; a push records why it did not deploy; linking again restores her.
//   - Bob, removed from acme and never using the link, loses it at the daily
//     re-check, driven on the injected clock.
func TestOrgLinkUsesTheUsersOwnView(t *testing.T) {
	each(t, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, envOpts{poll: 20 * time.Millisecond, pageSize: 2})
		ctx := context.Background()
		alice, bob, eve := platform.NewID(), platform.NewID(), platform.NewID()
		acme := e.fake.AddInstallation(githubfake.Installation{ID: 800, Account: "acme", AccountType: "Organization",
			Members: []string{"alice-gh", "bob-gh"}, Repositories: repos("acme", 2, 4, 6)})
		r2, r4 := acme.Repositories[0], acme.Repositories[1]
		e.fake.SetCollaborators(800, 4, "eve-gh")
		for user, login := range map[string]string{alice: "alice-gh", bob: "bob-gh", eve: "eve-gh"} {
			e.linkIdentity(user, login)
			e.install(user, 800)
		}
		names := func(user string) []string {
			t.Helper()
			var got []codehost.RepositoryOut
			e.getJSON("/codehost/repositories", user, http.StatusOK, &got)
			var out []string
			for _, r := range got {
				out = append(out, r.FullName)
			}
			return out
		}
		if got := strings.Join(names(eve), ","); got != "acme/repo-4" {
			t.Fatalf("Eve, a collaborator on acme/repo-4, lists %s", got)
		}
		if got := strings.Join(names(alice), ","); got != "acme/repo-2,acme/repo-4,acme/repo-6" {
			t.Fatalf("Alice, an acme member, lists %s", got)
		}

		// Clones and pushes follow the same view.
		eveOn2 := e.projects.add(codehost.RepoProject{OwnerID: eve, AutoDeploy: true, RepoURL: r2.CloneURL})
		eveOn4 := e.projects.add(codehost.RepoProject{OwnerID: eve, AutoDeploy: true, RepoURL: r4.HTMLURL})
		aliceOn2 := e.projects.add(codehost.RepoProject{OwnerID: alice, AutoDeploy: true, RepoURL: r2.CloneURL})
		auth, err := e.svc.GitAuthFor(ctx, eveOn2.ProjectID, r2.CloneURL)
		wantRefusal(t, "Eve's clone of acme/repo-2", auth, err, http.StatusForbidden, codehost.CodeNoRepoAccess, "acme/repo-2")
		if err := e.svc.CheckRepoAccess(ctx, eveOn2.ProjectID, r2.CloneURL); refusalStatus(err) != http.StatusForbidden {
			t.Fatalf("CheckRepoAccess of Eve's acme/repo-2: %v", err)
		}
		if auth, err := e.svc.GitAuthFor(ctx, eveOn4.ProjectID, r4.HTMLURL); err != nil || auth == nil ||
			!e.fake.CanAccess(auth.Password, "acme/repo-4") {
			t.Fatalf("Eve's clone of acme/repo-4: %v, %v", auth, err)
		}
		d := e.push(800, r2)
		if got := decisionOf(d, eveOn2.ProjectID); got.Decision != codehost.DecisionNoAccess || !strings.Contains(got.Detail, "acme/repo-2") {
			t.Fatalf("push to acme/repo-2, Eve's project: %+v", got)
		}
		if got := decisionOf(d, aliceOn2.ProjectID); got.Decision != codehost.DecisionDeployed {
			t.Fatalf("push to acme/repo-2, Alice's project: %+v", got)
		}
		on4 := e.push(800, r4)
		if got := decisionOf(on4, eveOn4.ProjectID); got.Decision != codehost.DecisionDeployed {
			t.Fatalf("push to acme/repo-4, Eve's project: %+v", got)
		}
		if log, _ := e.deliveries(eve, "?limit=100"); len(log) != 1 || log[0].Repository != "acme/repo-4" {
			t.Fatalf("Eve's delivery log: %+v", log)
		}
		if log, _ := e.deliveries(alice, "?limit=100"); len(log) != 2 {
			t.Fatalf("Alice's delivery log: %+v", log)
		}
		for _, tr := range e.deployer.triggers() {
			if tr.ProjectID == eveOn2.ProjectID {
				t.Fatalf("Eve's acme/repo-2 project was deployed: %+v", tr)
			}
		}

		// Eve removed from acme/repo-4: a push does not deploy it, and the
		// link is gone (GitHub no longer lists acme's installation to her).
		e.fake.SetCollaborators(800, 4)
		d = e.push(800, r4)
		if got := decisionOf(d, eveOn4.ProjectID); got.Decision != codehost.DecisionNoAccess {
			t.Fatalf("push to acme/repo-4 after Eve's removal: %+v", got)
		}
		status, body, _ := e.do(http.MethodGet, "/codehost/repositories", eve, nil, nil)
		if status != http.StatusNotFound || strings.Contains(string(body), "acme") {
			t.Fatalf("Eve's repositories after her removal: %d %s", status, body)
		}
		if auth, err := e.svc.GitAuthFor(ctx, eveOn4.ProjectID, r4.HTMLURL); err != nil || auth != nil {
			t.Fatalf("Eve's clone of acme/repo-4 after her removal: %v, %v", auth, err)
		}
		if log, _ := e.deliveries(eve, "?limit=100"); len(log) != 0 {
			t.Fatalf("Eve's delivery log after her removal: %+v", log)
		}

		// Alice's token revoked: every use answers what to do.
		e.fake.RevokeUserToken(e.ids.tokens[alice])
		status, body, _ = e.do(http.MethodGet, "/codehost/repositories", alice, nil, nil)
		if status != http.StatusConflict || !strings.Contains(string(body), "GET /codehost/connect") ||
			!strings.Contains(string(body), codehost.CodeRelink) {
			t.Fatalf("Alice's repositories with a revoked token: %d %s", status, body)
		}
		auth, err = e.svc.GitAuthFor(ctx, aliceOn2.ProjectID, r2.CloneURL)
		wantRefusal(t, "Alice's clone with a revoked token", auth, err, http.StatusConflict, codehost.CodeRelink, "GET /codehost/connect")
		d = e.push(800, r2)
		if got := decisionOf(d, aliceOn2.ProjectID); got.Decision != codehost.DecisionNoAccess || !strings.Contains(got.Detail, "link their code-host account again") {
			t.Fatalf("push with Alice's token revoked: %+v", got)
		}
		e.linkIdentity(alice, "alice-gh") // linked again: the same link works
		if got := len(names(alice)); got != 3 {
			t.Fatalf("Alice linked again lists %d repositories", got)
		}

		// Bob, removed from acme, never uses his link: the daily re-check,
		// not a use, takes it.
		bobLinks := func() int {
			t.Helper()
			n, err := e.db.NewSelect().Table("codehost_links").Where("user_id = ?", bob).Count(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return int(n)
		}
		e.fake.SetMembers(800, "alice-gh")
		if n, err := e.svc.RecheckLinks(ctx); err != nil || n != 0 || bobLinks() != 1 {
			t.Fatalf("re-check within the day: checked %d (%v); Bob's links %d", n, err, bobLinks())
		}
		e.clock.advance(25 * time.Hour)
		platformtest.Eventually(t, 20*time.Second, "the worker's daily re-check to drop Bob's link", func() bool { return bobLinks() == 0 })
		status, _, _ = e.do(http.MethodGet, "/codehost/repositories", bob, nil, nil)
		if status != http.StatusNotFound {
			t.Fatalf("Bob's repositories after the re-check: %d", status)
		}
		if log, _ := e.deliveries(bob, "?limit=100"); len(log) != 0 {
			t.Fatalf("Bob's delivery log after the re-check: %+v", log)
		}
		// Alice still a member: the re-check kept her link and view.
		if got := len(names(alice)); got != 3 {
			t.Fatalf("Alice after the re-check lists %d repositories", got)
		}
	})
}

// push delivers a push of repo's main branch through installation id and
// returns the processed delivery.
func (e *env) push(id int64, repo *githubfake.Repository) delivery {
	e.t.Helper()
	did := githubfake.NewDeliveryID()
	e.deliver("push", did, e.fake.PushPayload(githubfake.Push{Installation: id, Repo: repo, Branch: "main"}))
	return e.waitProcessed(did)
}

// wantRefusal checks that a clone credential was refused with a
// *platform.Error of status and code whose message names want.
func wantRefusal(t *testing.T, name string, auth *codehost.GitAuth, err error, status int, code, want string) {
	t.Helper()
	var pe *platform.Error
	if auth != nil || !errors.As(err, &pe) || pe.Status != status || pe.Code != code || !strings.Contains(pe.Message, want) {
		t.Fatalf("%s: %v, %v; want a %d %s naming %q", name, auth, err, status, code, want)
	}
}

func refusalStatus(err error) int {
	var pe *platform.Error
	if errors.As(err, &pe) {
		return pe.Status
	}
	return 0
}
