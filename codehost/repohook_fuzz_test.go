package codehost_test

import (
	"context"
	"net/http"
	"os"
	"testing"

	"github.com/keelson-dev/keelson/codehost"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/dbtest"
)

// FuzzRepositoryWebhook drives arbitrary repository-webhook deliveries of each
// host (GitHub, Gitea, GitLab), signed with a project's webhookSecret or not,
// through the webhook route and the worker. It must never panic or answer
// 5xx; an unsigned one is always a 401; whatever was stored is processed.
// Seeds: the hosts' published examples (examples/server/testdata/webhooks).
func FuzzRepositoryWebhook(f *testing.F) {
	e := newEnv(f, dbtest.SQLite(f, sets...), envOpts{noStart: true})
	const secret = "fuzz-project-secret-0123"
	for _, u := range []string{"https://github.com/Codertocat/Hello-World", "http://localhost:3000/gitea/webhooks", "http://example.com/mike/diaspora"} {
		p := e.projects.add(codehost.RepoProject{OwnerID: platform.NewID(), AutoDeploy: true, RepoURL: u})
		e.projects.setSecret(p.ProjectID, secret)
	}
	for host, file := range []string{"github-push.json", "gitea-push.json", "gitlab-push.json"} {
		b, err := os.ReadFile("../examples/server/testdata/webhooks/" + file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(host), "push", b, true, "d-"+file)
		f.Add(uint8(host), "ping", b, false, "")
	}
	f.Fuzz(func(t *testing.T, host uint8, event string, body []byte, sign bool, deliveryID string) {
		hdr := map[string]string{"Content-Type": "application/json"}
		switch host % 3 {
		case 0:
			hdr["X-GitHub-Event"], hdr["X-GitHub-Delivery"] = event, deliveryID
			if sign {
				hdr["X-Hub-Signature-256"] = codehost.Sign(secret, body)
			}
		case 1:
			hdr["X-Gitea-Event"], hdr["X-Gitea-Delivery"] = event, deliveryID
			if sign {
				hdr["X-Gitea-Signature"] = hmacHex(secret, body)
			}
		default:
			hdr["X-Gitlab-Event"], hdr["X-Gitlab-Event-UUID"] = event, deliveryID
			if sign {
				hdr["X-Gitlab-Token"] = secret
			}
		}
		status := post(t, e.url+"/codehost/webhook", body, hdr)
		if status >= 500 || status < 200 || (status >= 300 && status < 400) {
			t.Fatalf("status %d for host %d event %q, %d bytes, signed %v", status, host%3, event, len(body), sign)
		}
		if !sign && status != http.StatusUnauthorized {
			t.Fatalf("unsigned delivery answered %d, want 401", status)
		}
		if _, err := e.svc.ProcessPending(context.Background()); err != nil {
			t.Fatalf("processing: %v", err)
		}
	})
}
