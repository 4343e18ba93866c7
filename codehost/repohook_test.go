package codehost_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	neturl "net/url"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform/dbtest"

	"github.com/keelson-dev/keelson/codehost"
	"github.com/keelson-dev/keelson/codehost/githubfake"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/platformtest"
	"github.com/uptrace/bun"
)

func hmacHex(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// waitOwn polls owner's delivery log until deliveryID is processed.
func (e *env) waitOwn(owner, deliveryID string) delivery {
	e.t.Helper()
	var got delivery
	platformtest.Eventually(e.t, 20*time.Second, "delivery "+deliveryID+" for "+owner, func() bool {
		all, _ := e.deliveries(owner, "?limit=100")
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

// TestRepositoryWebhooksWithApp: with the app configured, a repository
// webhook (no installation) signed with a project's webhookSecret deploys
// that project only, in each host's signature scheme; the app's secret keeps
// the app's rules (no installation: not linked); anything else is a 401.
func TestRepositoryWebhooksWithApp(t *testing.T) {
	each(t, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, envOpts{})
		alice, bob, carol := platform.NewID(), platform.NewID(), platform.NewID()
		repo := &githubfake.Repository{ID: 300, Owner: "acme", Name: "web", DefaultBranch: "main"}
		url := e.fake.WebURL + "/acme/web"
		pa := e.projects.add(codehost.RepoProject{OwnerID: alice, AutoDeploy: true, RepoURL: url + ".git"})
		pb := e.projects.add(codehost.RepoProject{OwnerID: bob, AutoDeploy: true, RepoURL: url})
		e.projects.add(codehost.RepoProject{OwnerID: carol, AutoDeploy: true, RepoURL: url}) // no secret
		e.projects.setSecret(pa.ProjectID, "alice-secret-0123")
		e.projects.setSecret(pb.ProjectID, "bob-secret-4567")

		post := func(body []byte, hdr map[string]string) (int, string) {
			t.Helper()
			status, resp, _ := e.do(http.MethodPost, "/codehost/webhook", "", bytes.NewReader(body), hdr)
			return status, strings.TrimSpace(string(resp))
		}
		sha := githubfake.RandomSHA()
		body := e.fake.PushPayload(githubfake.Push{Repo: repo, Branch: "main", After: sha, Message: "ship it"})

		// GitHub's scheme, alice's secret, delivered twice.
		id := githubfake.NewDeliveryID()
		for range 2 {
			if st, resp := post(body, map[string]string{"X-GitHub-Event": "push", "X-GitHub-Delivery": id,
				"X-Hub-Signature-256": "sha256=" + hmacHex("alice-secret-0123", body)}); st != 200 || resp != `{"ok":true}` {
				t.Fatalf("alice's push: %d %s", st, resp)
			}
		}
		d := e.waitOwn(alice, id)
		if len(d.Decisions) != 1 || d.Decisions[0].ProjectID != pa.ProjectID || d.Decisions[0].Decision != codehost.DecisionDeployed {
			t.Fatalf("alice's decisions = %+v", d.Decisions)
		}
		if _, err := e.svc.ProcessPending(context.Background()); err != nil {
			t.Fatal(err)
		}
		if tr := e.deployer.triggers(); len(tr) != 1 || tr[0].ProjectID != pa.ProjectID || tr[0].SHA != sha || tr[0].OwnerID != alice {
			t.Fatalf("triggers = %+v", tr)
		}
		for _, who := range []string{bob, carol} {
			if log, _ := e.deliveries(who, ""); len(log) != 0 {
				t.Fatalf("%s sees alice's delivery: %+v", who, log)
			}
		}

		// Gitea's bare hex signature; Forgejo's, prefixed; GitLab's token: bob's.
		for name, hdr := range map[string]map[string]string{
			"gitea":   {"X-Gitea-Event": "push", "X-Gitea-Delivery": githubfake.NewDeliveryID(), "X-Gitea-Signature": hmacHex("bob-secret-4567", body)},
			"forgejo": {"X-Forgejo-Event": "push", "X-Forgejo-Delivery": githubfake.NewDeliveryID(), "X-Forgejo-Signature": "sha256=" + hmacHex("bob-secret-4567", body)},
			"gitlab":  {"X-Gitlab-Event": "Push Hook", "X-Gitlab-Event-UUID": githubfake.NewDeliveryID(), "X-Gitlab-Token": "bob-secret-4567"},
		} {
			if st, resp := post(body, hdr); st != 200 {
				t.Fatalf("%s: %d %s", name, st, resp)
			}
		}
		// Each scheme authenticates; the push (one branch and commit) deploys
		// bob's project once, and the other two record it as deployed already.
		platformtest.Eventually(t, 20*time.Second, "bob's three deliveries", func() bool {
			log, _ := e.deliveries(bob, "")
			n := map[string]int{}
			for _, d := range log {
				if d.Status == codehost.DeliveryProcessed && len(d.Decisions) == 1 && d.Decisions[0].ProjectID == pb.ProjectID {
					n[d.Decisions[0].Decision]++
				}
			}
			return n[codehost.DecisionDeployed] == 1 && n[codehost.DecisionAlreadyDeployed] == 2
		})

		// Refused: unsigned, wrong secret, GitLab token of the wrong case, a
		// GitLab token sent as a GitHub signature, bob's Gitea signature of
		// another body.
		before := e.count("codehost_deliveries")
		other := e.fake.PushPayload(githubfake.Push{Repo: repo, Branch: "main", After: githubfake.RandomSHA()})
		for name, hdr := range map[string]map[string]string{
			"unsigned":          {"X-GitHub-Event": "push"},
			"wrong secret":      {"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + hmacHex("guess", body)},
			"gitlab case":       {"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": "BOB-SECRET-4567"},
			"gitlab prefix":     {"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": "bob-secret-456"},
			"token as sig":      {"X-GitHub-Event": "push", "X-Hub-Signature-256": "bob-secret-4567"},
			"gitea other body":  {"X-Gitea-Event": "push", "X-Gitea-Signature": hmacHex("bob-secret-4567", other)},
			"carol's no secret": {"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + hmacHex("", body)},
		} {
			if st, resp := post(body, hdr); st != http.StatusUnauthorized || !strings.Contains(resp, "webhookSecret") {
				t.Errorf("%s: %d %s, want 401", name, st, resp)
			}
		}
		if n := e.count("codehost_deliveries"); n != before {
			t.Fatalf("refused deliveries stored %d rows", n-before)
		}

		// The app's secret takes the app's path: without an installation
		// nobody is linked, so nothing deploys.
		appID := githubfake.NewDeliveryID()
		e.deliver("push", appID, body)
		d = e.waitProcessed(appID)
		for _, dec := range d.Decisions {
			if dec.Decision != codehost.DecisionNotLinked {
				t.Fatalf("app-signed push without installation: %+v", d.Decisions)
			}
		}
		if tr := e.deployer.triggers(); len(tr) != 2 {
			t.Fatalf("triggers = %d, want 2 (alice once, bob once)", len(tr))
		}

		// GitHub's default content type for repository webhooks is
		// form-encoded: payload=<json>, signed as sent.
		sha3 := githubfake.RandomSHA()
		form := []byte("payload=" + neturl.QueryEscape(string(e.fake.PushPayload(githubfake.Push{Repo: repo, Branch: "main", After: sha3}))))
		formID := githubfake.NewDeliveryID()
		if st, resp := post(form, map[string]string{"Content-Type": "application/x-www-form-urlencoded", "X-GitHub-Event": "push",
			"X-GitHub-Delivery": formID, "X-Hub-Signature-256": "sha256=" + hmacHex("alice-secret-0123", form)}); st != 200 {
			t.Fatalf("form-encoded push: %d %s", st, resp)
		}
		if d := e.waitOwn(alice, formID); len(d.Decisions) != 1 || d.Decisions[0].Decision != codehost.DecisionDeployed {
			t.Fatalf("form-encoded push decisions = %+v", d.Decisions)
		}
		if tr := e.deployer.triggers(); len(tr) != 3 || tr[2].SHA != sha3 {
			t.Fatalf("triggers after the form-encoded push = %+v", tr)
		}
	})
}

// TestRepositoryWebhookWorkBeforeAuth (issue 23): an unsigned delivery is
// refused before the payload is decoded or any project looked up; a signed one
// is checked against at most 8 project secrets (the oldest projects using the
// repository with a webhookSecret), whatever others point at it; ?projectId=
// names the one project to check.
func TestRepositoryWebhookWorkBeforeAuth(t *testing.T) {
	e := newEnv(t, dbtest.SQLite(t, sets...), envOpts{})
	repo := &githubfake.Repository{ID: 400, Owner: "acme", Name: "popular", DefaultBranch: "main"}
	url := e.fake.WebURL + "/acme/popular"
	var ps []codehost.RepoProject
	for i := range 12 {
		p := e.projects.add(codehost.RepoProject{OwnerID: platform.NewID(), AutoDeploy: true, RepoURL: url})
		e.projects.setSecret(p.ProjectID, fmt.Sprintf("secret-of-project-%02d", i))
		ps = append(ps, p)
	}
	e.projects.add(codehost.RepoProject{OwnerID: platform.NewID(), AutoDeploy: true, RepoURL: url}) // no secret: never tried
	body := e.fake.PushPayload(githubfake.Push{Repo: repo, Branch: "main", After: githubfake.RandomSHA()})
	post := func(query string, hdr map[string]string) int {
		t.Helper()
		status, _, _ := e.do(http.MethodPost, "/codehost/webhook"+query, "", bytes.NewReader(body), hdr)
		return status
	}

	// Unsigned: 401 with no lookup and no secret read.
	if st := post("", map[string]string{"X-GitHub-Event": "push"}); st != http.StatusUnauthorized {
		t.Fatalf("unsigned: %d", st)
	}
	if lookups, reads := e.projects.counts(); lookups != 0 || reads != 0 {
		t.Fatalf("an unsigned delivery cost %d lookups and %d secret reads", lookups, reads)
	}
	// Signed with a wrong secret: at most 8 secrets read.
	if st := post("", map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + hmacHex("guess", body)}); st != http.StatusUnauthorized {
		t.Fatalf("wrong secret: %d", st)
	}
	if _, reads := e.projects.counts(); reads != 8 {
		t.Fatalf("a wrongly signed delivery read %d secrets, want 8", reads)
	}
	// The oldest project's secret works as is; the 12th project's only when
	// its webhook URL names it.
	sign := func(i int) map[string]string {
		return map[string]string{"X-GitHub-Event": "push", "X-GitHub-Delivery": githubfake.NewDeliveryID(),
			"X-Hub-Signature-256": "sha256=" + hmacHex(fmt.Sprintf("secret-of-project-%02d", i), body)}
	}
	if st := post("", sign(0)); st != http.StatusOK {
		t.Fatalf("first project's signature: %d", st)
	}
	if st := post("", sign(11)); st != http.StatusUnauthorized {
		t.Fatalf("12th project's signature without ?projectId: %d, want 401", st)
	}
	if st := post("?projectId="+ps[11].ProjectID, sign(11)); st != http.StatusOK {
		t.Fatalf("12th project's signature with ?projectId: %d", st)
	}
	if st := post("?projectId="+ps[10].ProjectID, sign(11)); st != http.StatusUnauthorized {
		t.Fatalf("signature of another project than ?projectId names: %d, want 401", st)
	}
}
