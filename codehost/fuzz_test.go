package codehost_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"

	"github.com/keelson-dev/keelson/codehost"
	"github.com/keelson-dev/keelson/codehost/githubfake"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/dbtest"
)

// FuzzWebhook drives arbitrary deliveries through the webhook route (signature
// check, header and body validation, storage) and then the worker (payload
// decoding and every event handler). It must never panic, answer 5xx, or fail
// to process what it stored. Seeds are in testdata/fuzz/FuzzWebhook.
func FuzzWebhook(f *testing.F) {
	e := newEnv(f, dbtest.SQLite(f, sets...), envOpts{noStart: true})
	owner := platform.NewID()
	e.fake.AddInstallation(githubfake.Installation{ID: 9, Account: "octocat", Repositories: repos("octocat", 100)})
	e.install(owner, 9)
	e.projects.add(codehost.RepoProject{OwnerID: owner, AutoDeploy: true, RepoURL: "http://git.example/octocat/repo-100"}) // as in the seeds

	f.Fuzz(func(t *testing.T, event string, body []byte, sign bool, deliveryID string) {
		hdr := map[string]string{"X-GitHub-Event": event, "X-GitHub-Delivery": deliveryID, "Content-Type": "application/json"}
		if sign {
			hdr["X-Hub-Signature-256"] = codehost.Sign(webhookSecret, body)
		}
		status := post(t, e.url+"/codehost/webhook", body, hdr)
		if status >= 500 || status < 200 || (status >= 300 && status < 400) {
			t.Fatalf("status %d for event %q, %d bytes, signed %v", status, event, len(body), sign)
		}
		if !sign && status != http.StatusUnauthorized {
			t.Fatalf("unsigned delivery answered %d, want 401", status)
		}
		if _, err := e.svc.ProcessPending(context.Background()); err != nil {
			t.Fatalf("processing: %v", err)
		}
	})
}

// post is a header-exact POST for the fuzzer (net/http would refuse some
// header values; those are not reachable from a client anyway).
func post(t *testing.T, url string, body []byte, hdr map[string]string) int {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		if !validHeaderValue(v) {
			t.Skip("header value no HTTP client can send")
		}
		req.Header.Set(k, v)
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
