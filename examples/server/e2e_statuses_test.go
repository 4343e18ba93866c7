package main

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/codehost/githubfake"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

// TestCommitStatusesE2E: push deployments of an app-installed repository post
// GitHub commit statuses (POST /repos/{owner}/{repo}/statuses/{sha}, checked
// by the fake in GitHub's wire format, docs.github.com/rest/commits/statuses):
// "pending" when the deployment starts, then "success" with the deployed URL
// or "failure" with the error. When GitHub refuses the statuses the
// deployment still goes live and the failure is logged.
func TestCommitStatusesE2E(t *testing.T) {
	eachDB(t, func(t *testing.T, dbURL string) {
		// A private repository octocat/shop with a static site on main.
		h := newCodehostHarness(t, "octocat", "shop", "<h1>shop v1</h1>\n")
		fake, gs := h.fake, h.gs
		repo := &githubfake.Repository{ID: 5151, Owner: "octocat", Name: "shop", Private: true, DefaultBranch: "main"}
		fake.AddInstallation(githubfake.Installation{ID: 91, Account: "octocat", Repositories: []*githubfake.Repository{repo}})
		h.addUser(583231, "octocat")

		ts := h.start(t, dbURL)
		token := ts.signup(t, "octocat@example.com")
		if _, loc := h.connect(t, ts, token, "octocat", "91"); !strings.Contains(loc, "codehost=connected") {
			t.Fatalf("callback redirected to %q", loc)
		}
		var project webhookProject
		ts.doJSON(t, http.StatusCreated, "POST", "/projects", token, map[string]any{
			"name": "shop", "repoUrl": gs.URL + "/octocat/shop.git", "framework": "static", "port": 8080,
			"isPrivate": true, "autoDeploy": true, "codehostRepositoryId": "5151",
		}, &project)

		push := func(sha, msg string) string {
			t.Helper()
			id := githubfake.NewDeliveryID()
			status, body, err := fake.Deliver(context.Background(), ts.Client, ts.URL+"/codehost/webhook", githubfake.Delivery{
				Event: "push", DeliveryID: id, Secret: e2eWebhookSecret,
				Body: fake.PushPayload(githubfake.Push{Installation: 91, Repo: repo, Branch: "main", After: sha, Message: msg}),
			})
			if err != nil || status != http.StatusOK {
				t.Fatalf("push: %d %s %v", status, body, err)
			}
			d := waitDelivery(t, ts, token, id)
			if len(d.Decisions) != 1 || d.Decisions[0].Decision != "deployed" {
				t.Fatalf("push decisions = %+v", d.Decisions)
			}
			return d.Decisions[0].DeploymentID
		}
		statuses := func(sha string, n int) []githubfake.Status {
			t.Helper()
			var got []githubfake.Status
			platformtest.Eventually(t, 30*time.Second, strconv.Itoa(n)+" commit statuses for "+sha[:7], func() bool {
				got = fake.Statuses("octocat/shop", sha)
				return len(got) >= n
			})
			if len(got) != n {
				t.Fatalf("statuses for %s = %+v, want %d", sha[:7], got, n)
			}
			for _, st := range got {
				if st.Context != "keelson/deploy" {
					t.Fatalf("status context %q", st.Context)
				}
			}
			return got
		}
		str := func(p *string) string {
			if p == nil {
				return ""
			}
			return *p
		}

		// A push that deploys: pending, then success linking the app.
		v2 := h.commit(t, map[string]string{"index.html": "<h1>shop v2</h1>\n"}, "second")
		dep := push(v2, "second")
		st, _ := waitDeployment(t, ts, token, dep)
		if st.Status != "LIVE" {
			t.Fatalf("deployment %s: %s", st.Status, st.ErrorMessage)
		}
		got := statuses(v2, 2)
		if got[0].State != "pending" || got[1].State != "success" || str(got[1].TargetURL) != st.DeployedURL || st.DeployedURL == "" {
			t.Fatalf("statuses for a live deployment = %+v (deployed at %q)", got, st.DeployedURL)
		}

		// A push whose build fails: pending, then failure with the error.
		ts.doJSON(t, http.StatusOK, "PATCH", "/projects/"+project.ID+"/settings", token, map[string]any{
			"region": "local", "planName": "free", "envVars": []any{}, "buildCommand": "echo broken build; exit 3",
		}, nil)
		v3 := h.commit(t, map[string]string{"index.html": "<h1>shop v3</h1>\n"}, "third")
		st, _ = waitDeployment(t, ts, token, push(v3, "third"))
		if st.Status != "FAILED" || st.ErrorMessage == "" {
			t.Fatalf("broken build: %s %q", st.Status, st.ErrorMessage)
		}
		got = statuses(v3, 2)
		if got[0].State != "pending" || got[1].State != "failure" || !strings.Contains(str(got[1].Description), "Deployment failed") ||
			got[1].TargetURL != nil {
			t.Fatalf("statuses for a failed deployment = %+v (error %q)", got, st.ErrorMessage)
		}

		// GitHub refuses statuses: the deployment goes live all the same and
		// the failure is logged.
		fake.FailStatuses(http.StatusInternalServerError)
		ts.doJSON(t, http.StatusOK, "PATCH", "/projects/"+project.ID+"/settings", token, map[string]any{
			"region": "local", "planName": "free", "envVars": []any{}, "buildCommand": "",
		}, nil)
		v4 := h.commit(t, map[string]string{"index.html": "<h1>shop v4</h1>\n"}, "fourth")
		st, _ = waitDeployment(t, ts, token, push(v4, "fourth"))
		if st.Status != "LIVE" {
			t.Fatalf("deployment with statuses refused: %s %s", st.Status, st.ErrorMessage)
		}
		platformtest.Eventually(t, 30*time.Second, "the refused final status to be logged", func() bool {
			return strings.Contains(ts.Logs.String(), "codehost: post final commit status")
		})
		if !strings.Contains(ts.Logs.String(), "codehost: post pending commit status") {
			t.Fatal("the refused pending status was not logged")
		}
		if got := fake.Statuses("octocat/shop", v4); len(got) != 0 {
			t.Fatalf("statuses recorded while refusing: %+v", got)
		}
		if strings.Contains(ts.Logs.String(), "ghs_") {
			t.Fatal("an installation token reached the log")
		}
	})
}
