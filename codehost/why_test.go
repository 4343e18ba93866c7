package codehost_test

import (
	"bytes"
	"fmt"
	"net/http"
	"testing"

	"github.com/uptrace/bun"

	"github.com/keelson-dev/keelson/codehost"
	"github.com/keelson-dev/keelson/codehost/githubfake"
	"github.com/keelson-dev/keelson/platform"
)

// TestWhyAPushDeploys is the one table of why a push did or did not deploy
// a project, run through both sources: the app's delivery (an installation
// the owner linked) and a repository webhook (signed with the project's
// webhookSecret, no installation). Payloads are the fake's, shaped like
// GitHub's documented push event (docs.github.com/en/webhooks/webhook-events-and-payloads#push).
func TestWhyAPushDeploys(t *testing.T) {
	type source string
	const app, hook source = "app", "repository webhook"
	cases := []struct {
		name    string
		project codehost.RepoProject
		push    githubfake.Push
		unowned bool   // the project's owner has not linked the installation
		only    source // the case exists for one source only
		want    string
		replay  string // the decision when the same commit is pushed again
	}{
		{name: "deploys the default branch", project: codehost.RepoProject{AutoDeploy: true},
			push: githubfake.Push{Branch: "main", Message: "ship it"}, want: codehost.DecisionDeployed,
			replay: codehost.DecisionAlreadyDeployed},
		{name: "deploys its own branch", project: codehost.RepoProject{AutoDeploy: true, AutoDeployBranch: "release"},
			push: githubfake.Push{Branch: "release"}, want: codehost.DecisionDeployed},
		{name: "auto-deploy off", project: codehost.RepoProject{AutoDeploy: false},
			push: githubfake.Push{Branch: "main"}, want: codehost.DecisionAutoDeployOff},
		{name: "another branch", project: codehost.RepoProject{AutoDeploy: true, AutoDeployBranch: "release"},
			push: githubfake.Push{Branch: "main"}, want: codehost.DecisionBranchMismatch},
		{name: "a tag", project: codehost.RepoProject{AutoDeploy: true},
			push: githubfake.Push{Ref: "refs/tags/v1.0.0"}, want: codehost.DecisionBranchMismatch},
		{name: "a deleted branch", project: codehost.RepoProject{AutoDeploy: true},
			push: githubfake.Push{Branch: "main", Deleted: true}, want: codehost.DecisionBranchDeleted},
		{name: "skip marker", project: codehost.RepoProject{AutoDeploy: true},
			push: githubfake.Push{Branch: "main", Message: "docs [skip ci]"}, want: codehost.DecisionSkipMessage},
		{name: "installation not linked", only: app, unowned: true, project: codehost.RepoProject{AutoDeploy: true},
			push: githubfake.Push{Branch: "main"}, want: codehost.DecisionNotLinked},
		{name: "no commit named", only: hook, project: codehost.RepoProject{AutoDeploy: true},
			push: githubfake.Push{Branch: "main", After: "not-a-commit"}, want: codehost.DecisionFailed},
	}
	each(t, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, envOpts{})
		owner := platform.NewID()
		var all []*githubfake.Repository
		for i := range 2 * len(cases) {
			all = append(all, &githubfake.Repository{ID: int64(500 + i), Owner: "octocat", Name: fmt.Sprintf("why-%d", i), DefaultBranch: "main"})
		}
		e.fake.AddInstallation(githubfake.Installation{ID: 11, Account: "octocat", Repositories: all})
		e.install(owner, 11)
		for i, c := range cases {
			for j, src := range []source{app, hook} {
				if c.only != "" && c.only != src {
					continue
				}
				t.Run(c.name+"/"+string(src), func(t *testing.T) {
					repo := all[2*i+j]
					proj := c.project
					proj.OwnerID, proj.RepoURL = owner, e.fake.WebURL+"/octocat/"+repo.Name
					if c.unowned {
						proj.OwnerID = platform.NewID()
					}
					proj = e.projects.add(proj)
					push := c.push
					push.Repo = repo
					deliver := func() decision {
						id := githubfake.NewDeliveryID()
						if src == app {
							push.Installation = 11
							body := e.fake.PushPayload(push)
							e.deliver("push", id, body)
							return decisionOf(e.waitProcessed(id), proj.ProjectID)
						}
						body := e.fake.PushPayload(push)
						status, resp, _ := e.do(http.MethodPost, "/codehost/webhook", "", bytes.NewReader(body), map[string]string{
							"X-GitHub-Event": "push", "X-GitHub-Delivery": id,
							"X-Hub-Signature-256": "sha256=" + hmacHex("why-secret-0123456", body)})
						if status != http.StatusOK {
							t.Fatalf("webhook: %d %s", status, resp)
						}
						return decisionOf(e.waitProcessed(id), proj.ProjectID)
					}
					if src == hook {
						e.projects.setSecret(proj.ProjectID, "why-secret-0123456")
					}
					if push.After == "" {
						push.After = githubfake.RandomSHA()
					}
					if got := deliver(); got.Decision != c.want {
						t.Fatalf("decision %q (%s), want %q", got.Decision, got.Detail, c.want)
					}
					if c.replay != "" {
						if got := deliver(); got.Decision != c.replay {
							t.Fatalf("the same commit again: decision %q (%s), want %q", got.Decision, got.Detail, c.replay)
						}
					}
				})
			}
		}
		// Every deployed decision triggered exactly one deployment.
		deployed := 0
		for _, c := range cases {
			if c.want == codehost.DecisionDeployed {
				deployed += 2
			}
		}
		if n := len(e.deployer.triggers()); n != deployed {
			t.Errorf("%d deployments triggered, want %d", n, deployed)
		}
	})
}
