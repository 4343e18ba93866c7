package codehost_test

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/keelson-dev/keelson/codehost"
	"github.com/keelson-dev/keelson/codehost/githubfake"
	"github.com/keelson-dev/keelson/platform"
	"github.com/uptrace/bun"
)

// outcomes is a DeploymentResults whose answers the test sets.
type outcomes struct {
	mu sync.Mutex
	m  map[string]codehost.DeploymentResult
}

func (o *outcomes) set(id string, r codehost.DeploymentResult) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.m[id] = r
}

func (o *outcomes) DeploymentResult(_ context.Context, _, id string) (*codehost.DeploymentResult, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r, ok := o.m[id]
	if !ok {
		return &codehost.DeploymentResult{}, nil // still running
	}
	return &r, nil
}

// TestCommitStatusesReported: an app push deployment posts "pending" at once
// and its final state once, when it ends; a status GitHub keeps refusing is
// tried 3 times and then given up, never posted twice.
func TestCommitStatusesReported(t *testing.T) {
	each(t, func(t *testing.T, bdb *bun.DB) {
		res := &outcomes{m: map[string]codehost.DeploymentResult{}}
		e := newEnv(t, bdb, envOpts{noStart: true, results: res})
		owner := platform.NewID()
		repo := &githubfake.Repository{ID: 100, Owner: "octocat", Name: "repo-100", DefaultBranch: "main"}
		e.fake.AddInstallation(githubfake.Installation{ID: 9, Account: "octocat", Repositories: []*githubfake.Repository{repo}})
		e.install(owner, 9)
		e.projects.add(codehost.RepoProject{OwnerID: owner, AutoDeploy: true, RepoURL: e.fake.WebURL + "/octocat/repo-100"})
		ctx := context.Background()

		push := func(sha string) string {
			t.Helper()
			e.deliver("push", githubfake.NewDeliveryID(), e.fake.PushPayload(githubfake.Push{Installation: 9, Repo: repo, Branch: "main", After: sha}))
			if _, err := e.svc.ProcessPending(ctx); err != nil {
				t.Fatal(err)
			}
			tr := e.deployer.triggers()
			return tr[len(tr)-1].DeploymentID
		}
		report := func() int {
			t.Helper()
			n, err := e.svc.ReportStatuses(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}

		sha := githubfake.RandomSHA()
		dep := push(sha)
		got := e.fake.Statuses("octocat/repo-100", sha)
		if len(got) != 1 || got[0].State != "pending" || got[0].Context != codehost.StatusContext {
			t.Fatalf("statuses after the push = %+v", got)
		}
		if n := report(); n != 0 {
			t.Fatalf("posted %d while the deployment runs", n)
		}
		res.set(dep, codehost.DeploymentResult{Ended: true, Succeeded: true, URL: "https://app.example/"})
		if n := report(); n != 1 {
			t.Fatalf("posted %d after it ended", n)
		}
		if n := report(); n != 0 {
			t.Fatalf("posted %d again", n)
		}
		got = e.fake.Statuses("octocat/repo-100", sha)
		if len(got) != 2 || got[1].State != "success" || got[1].TargetURL == nil || *got[1].TargetURL != "https://app.example/" {
			t.Fatalf("statuses = %+v", got)
		}

		// Refused three times: given up.
		sha2 := githubfake.RandomSHA()
		dep2 := push(sha2)
		res.set(dep2, codehost.DeploymentResult{Ended: true, Error: "build failed: exit status 3"})
		e.fake.FailStatuses(http.StatusBadGateway)
		for range 4 {
			if n := report(); n != 0 {
				t.Fatalf("posted %d while refused", n)
			}
		}
		e.fake.FailStatuses(0)
		if n := report(); n != 0 {
			t.Fatalf("posted %d after giving up", n)
		}
		if got := e.fake.Statuses("octocat/repo-100", sha2); len(got) != 1 || got[0].State != "pending" {
			t.Fatalf("statuses of the refused one = %+v (only the pending one got through)", got)
		}
		if n := e.fake.Calls("POST /repos/{owner}/{repo}/statuses/{sha}"); n != 2+1+3 {
			t.Fatalf("status requests = %d, want 6 (2 + 1 + 3 tries)", n)
		}
	})
}
