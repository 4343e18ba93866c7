package projects_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/keelson-dev/keelson/projects"
	"github.com/keelson-dev/keelson/projects/slugs"
	"github.com/uptrace/bun"
)

func TestCreateGetList(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets(), func(t *testing.T, bdb *bun.DB) {
		e := setup(t, bdb, opts{regions: []string{"eu-west", "us-east"}})
		body := validCreate("My Shiny App!")
		body["isPrivate"], body["autoDeploy"], body["autoDeployBranch"] = true, true, "main"
		body["codehostRepositoryId"], body["webhookSecret"] = "12345", "hook-secret-value"
		p := e.create("alice", body)
		if !platform.ValidID(p.ID) || p.Name != "My Shiny App!" || p.Slug != "my-shiny-app" || p.Port != 3000 ||
			p.Region != "eu-west" || p.Status != "ACTIVE" || !p.HasWebhookSecret || !p.IsPrivate || !p.AutoDeploy ||
			p.AutoDeployBranch != "main" || p.CodehostRepositoryID != "12345" || p.PlanName != "free" || len(p.EnvVars) != 0 {
			t.Fatalf("created: %+v", p)
		}
		resp := e.api.Get("/projects/"+p.ID, as("alice"))
		if resp.Code != 200 || decode[projects.Project](t, resp.Body.Bytes()).Slug != p.Slug {
			t.Fatalf("get: %d %s", resp.Code, resp.Body)
		}
		// The same name gets a distinct slug with a suffix.
		p2 := e.create("bob", validCreate("my-shiny-app"))
		if p2.Slug == p.Slug || !strings.HasPrefix(p2.Slug, "my-shiny-app-") || len(p2.Slug) > projects.MaxSlugLen {
			t.Fatalf("second slug %q", p2.Slug)
		}
		long := e.create("alice", validCreate(strings.Repeat("Long Name ", 9)))
		if len(long.Slug) > projects.MaxSlugLen || strings.HasSuffix(long.Slug, "-") {
			t.Fatalf("long slug %q", long.Slug)
		}
		if ps := e.list("alice"); len(ps) != 2 || ps[0].ID != long.ID || ps[1].ID != p.ID {
			t.Fatalf("list: %+v", ps)
		}
		// Without a token: 401.
		if resp := e.api.Get("/projects"); resp.Code != 401 {
			t.Fatalf("no token: %d", resp.Code)
		}
	})
}

func TestListPagination(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets(), func(t *testing.T, bdb *bun.DB) {
		e := setup(t, bdb, opts{})
		e.plans.setAccount(users["alice"], "starter")
		var want []string
		for i := 0; i < 5; i++ {
			want = append([]string{e.create("alice", validCreate(fmt.Sprintf("app%d", i))).ID}, want...)
		}
		var got []string
		cursor := ""
		for pages := 0; pages < 10; pages++ {
			resp := e.api.Get("/projects?limit=2&cursor="+cursor, as("alice"))
			if resp.Code != 200 {
				t.Fatalf("page: %d %s", resp.Code, resp.Body)
			}
			for _, p := range decode[[]projects.Project](t, resp.Body.Bytes()) {
				got = append(got, p.ID)
			}
			if cursor = resp.Header().Get("X-Next-Cursor"); cursor == "" {
				break
			}
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("pages: got %v want %v", got, want)
		}
		if resp := e.api.Get("/projects?cursor=garbage", as("alice")); resp.Code != 400 {
			t.Fatalf("bad cursor: %d", resp.Code)
		}
	})
}

func TestValidationChangesNothing(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets(), func(t *testing.T, bdb *bun.DB) {
		e := setup(t, bdb, opts{regions: []string{"local", "eu"}})
		with := func(k string, v any) map[string]any { b := validCreate("shop"); b[k] = v; return b }
		without := func(k string) map[string]any { b := validCreate("shop"); delete(b, k); return b }
		for _, c := range []struct {
			name  string
			body  map[string]any
			field string
		}{
			{"missing name", without("name"), "name"},
			{"missing repoUrl", without("repoUrl"), "repoUrl"},
			{"missing framework", without("framework"), "framework"},
			{"missing port", without("port"), "port"},
			{"port 0", with("port", 0), "port"},
			{"port 65536", with("port", 65536), "port"},
			{"port fraction", with("port", 80.5), "port"},
			{"port string", with("port", "80"), "port"},
			{"blank name", with("name", "   "), "name"},
			{"NUL in name", with("name", "a\x00b"), "name"},
			{"http url", with("repoUrl", "http://github.com/acme/app"), "repoUrl"},
			{"ssh url", with("repoUrl", "git@github.com:acme/app.git"), "repoUrl"},
			{"no path", with("repoUrl", "https://github.com"), "repoUrl"},
			{"credentials", with("repoUrl", "https://user:token@github.com/acme/app"), "repoUrl"},
			{"query", with("repoUrl", "https://github.com/acme/app?x=1"), "repoUrl"},
			{"localhost", with("repoUrl", "https://localhost/acme/app"), "repoUrl"},
			{"loopback ip", with("repoUrl", "https://127.0.0.1/acme/app"), "repoUrl"},
			{"private ip", with("repoUrl", "https://10.1.2.3/acme/app"), "repoUrl"},
			{"link-local ip", with("repoUrl", "https://169.254.169.254/latest"), "repoUrl"},
			{"ipv6 loopback", with("repoUrl", "https://[::1]/acme/app"), "repoUrl"},
			{"decimal ip", with("repoUrl", "https://2130706433/acme/app"), "repoUrl"},
			{"file url", with("repoUrl", "file:///srv/git/app"), "repoUrl"},
			{"local path", with("repoUrl", "/srv/git/app"), "repoUrl"},
			{"bad framework", with("framework", "node; rm -rf"), "framework"},
			{"option-like branch", with("autoDeployBranch", "-upload-pack=evil"), "autoDeployBranch"},
			{"branch with ..", with("autoDeployBranch", "a..b"), "autoDeployBranch"},
			{"unknown field", with("ownerId", users["bob"]), "ownerId"},
			{"status field", with("status", "DELETED"), "status"},
		} {
			resp := e.api.Post("/projects", as("alice"), c.body)
			if resp.Code != 400 || !strings.Contains(resp.Body.String(), c.field) {
				t.Errorf("%s: %d %s", c.name, resp.Code, resp.Body)
			}
		}
		if n := countRows(t, bdb); n != 0 {
			t.Fatalf("rejected creates stored %d projects", n)
		}

		p := e.create("alice", validCreate("shop"))
		ok := validSettings()
		ok["envVars"] = []any{map[string]any{"key": "A", "value": "1"}, map[string]any{"key": "S", "value": "s3cret-value", "isSecret": true}}
		if resp := e.api.Patch("/projects/"+p.ID+"/settings", as("alice"), ok); resp.Code != 200 {
			t.Fatalf("settings: %d %s", resp.Code, resp.Body)
		}
		before := rawRow(t, bdb, p.ID)
		set := func(k string, v any) map[string]any { b := validSettings(); b[k] = v; return b }
		envs := func(vs ...map[string]any) map[string]any {
			l := make([]any, len(vs))
			for i, v := range vs {
				l[i] = v
			}
			return set("envVars", l)
		}
		kv := func(k, v string) map[string]any { return map[string]any{"key": k, "value": v} }
		many := make([]map[string]any, 101)
		for i := range many {
			many[i] = kv(fmt.Sprintf("K%d", i), "v")
		}
		noRegion := validSettings()
		delete(noRegion, "region")
		noEnv := validSettings()
		delete(noEnv, "envVars")
		for _, c := range []struct {
			name  string
			body  map[string]any
			field string
		}{
			{"missing region", noRegion, "region"},
			{"missing envVars", noEnv, "envVars"},
			{"unknown region", set("region", "mars"), "region"},
			{"unknown plan", set("planName", "gold"), "planName"},
			{"bad key", envs(kv("1ABC", "x")), "key"},
			{"key with dash", envs(kv("MY-KEY", "x")), "key"},
			{"duplicate key", envs(kv("A", "1"), kv("A", "2")), "envVars[1].key"},
			{"PORT reserved", envs(kv("PORT", "8080")), "PORT is reserved"},
			{"too many", envs(many...), "envVars"},
			{"value too long", envs(kv("BIG", strings.Repeat("x", projects.MaxEnvValueLen+1))), "value"},
			{"NUL in value", envs(kv("A", "x\x00y")), "envVars[0].value"},
			{"mask without secret", envs(map[string]any{"key": "NEW", "value": projects.Mask, "isSecret": true}), "envVars[0].value"},
			// Too short to mask in logs safely ("x" would mask every x): refused.
			{"one-character secret", envs(kv("A", "1"), map[string]any{"key": "S", "value": "x", "isSecret": true}), "envVars[1].value: a secret value must be at least 8 characters"},
			{"short secret padded", envs(map[string]any{"key": "S", "value": "  abc12  \n", "isSecret": true}), "cannot be masked in deployment logs"},
			{"bad branch", set("autoDeployBranch", "--evil"), "autoDeployBranch"},
			{"repoUrl not settable", set("repoUrl", "https://github.com/x/y"), "repoUrl"},
		} {
			resp := e.api.Patch("/projects/"+p.ID+"/settings", as("alice"), c.body)
			if resp.Code != 400 || !strings.Contains(resp.Body.String(), c.field) {
				t.Errorf("%s: %d %s", c.name, resp.Code, resp.Body)
			}
		}
		after := rawRow(t, bdb, p.ID)
		if fmt.Sprint(before) != fmt.Sprint(after) {
			t.Fatalf("rejected settings changed the project:\nbefore %v\nafter  %v", before, after)
		}
	})
}

func TestCrossUserIsNotFoundEverywhere(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets(), func(t *testing.T, bdb *bun.DB) {
		e := setup(t, bdb, opts{})
		p := e.create("alice", validCreate("alice-app"))
		for _, c := range []struct {
			method, path string
			body         any
		}{
			{http.MethodGet, "/projects/" + p.ID, nil},
			{http.MethodPatch, "/projects/" + p.ID + "/settings", validSettings()},
			{http.MethodGet, "/projects/" + p.ID + "/delete-status", nil},
			{http.MethodDelete, "/projects/" + p.ID, nil},
		} {
			args := []any{as("bob")}
			if c.body != nil {
				args = append(args, c.body)
			}
			resp := e.api.Do(c.method, c.path, args...)
			if resp.Code != 404 {
				t.Errorf("bob %s %s: %d %s", c.method, c.path, resp.Code, resp.Body)
			}
			// Absent and malformed ids answer the same.
			absent := e.api.Do(c.method, strings.Replace(c.path, p.ID, platform.NewID(), 1), args...)
			malformed := e.api.Do(c.method, strings.Replace(c.path, p.ID, "x", 1), args...)
			if absent.Code != 404 || malformed.Code != 404 || absent.Body.String() != resp.Body.String() {
				t.Errorf("%s %s: absent %d %s, malformed %d, bob %s", c.method, c.path, absent.Code, absent.Body, malformed.Code, resp.Body)
			}
		}
		for _, q := range []string{"", "?status=ACTIVE"} {
			resp := e.api.Get("/projects"+q, as("bob"))
			if resp.Code != 200 || strings.TrimSpace(resp.Body.String()) != "[]" {
				t.Errorf("bob list%s: %d %s", q, resp.Code, resp.Body)
			}
		}
		// Alice's project is untouched by bob's attempts.
		if st := e.deleteStatus("alice", p.ID); st.Status != "ACTIVE" || e.teardown.callsFor(p.ID) != 0 {
			t.Fatalf("after bob: %+v, teardowns %d", st, e.teardown.callsFor(p.ID))
		}
		if got := e.list("alice"); len(got) != 1 {
			t.Fatalf("alice list: %+v", got)
		}
	})
}

func TestSecretsNeverAppear(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets(), func(t *testing.T, bdb *bun.DB) {
		e := setup(t, bdb, opts{})
		const hook, dbPass, apiKey = "whsec-7f3a-hook", "db-pass-9c1e-secret", "api-key-55aa-secret"
		body := validCreate("shop")
		body["webhookSecret"] = hook
		var bodies []string
		resp := e.api.Post("/projects", as("alice"), body)
		if resp.Code != 201 {
			t.Fatal(resp.Code, resp.Body)
		}
		bodies = append(bodies, resp.Body.String())
		p := decode[projects.Project](t, resp.Body.Bytes())

		settings := validSettings()
		settings["envVars"] = []any{
			map[string]any{"key": "DATABASE_PASSWORD", "value": dbPass, "isSecret": true},
			map[string]any{"key": "API_KEY", "value": apiKey, "isSecret": true},
			map[string]any{"key": "NODE_ENV", "value": "production"},
		}
		resp = e.api.Patch("/projects/"+p.ID+"/settings", as("alice"), settings)
		if resp.Code != 200 {
			t.Fatal(resp.Code, resp.Body)
		}
		bodies = append(bodies, resp.Body.String())
		got := decode[projects.Project](t, resp.Body.Bytes())
		want := []projects.EnvVarOut{{Key: "DATABASE_PASSWORD", Value: projects.Mask, IsSecret: true},
			{Key: "API_KEY", Value: projects.Mask, IsSecret: true}, {Key: "NODE_ENV", Value: "production"}}
		if fmt.Sprint(got.EnvVars) != fmt.Sprint(want) || !got.HasWebhookSecret {
			t.Fatalf("env vars answered: %+v", got)
		}

		// Send the masked secrets back, change one, add one: masked ones keep their value.
		settings["envVars"] = []any{
			map[string]any{"key": "DATABASE_PASSWORD", "value": projects.Mask, "isSecret": true},
			map[string]any{"key": "API_KEY", "value": "rotated-key-secret", "isSecret": true},
			map[string]any{"key": "NODE_ENV", "value": "production"},
		}
		resp = e.api.Patch("/projects/"+p.ID+"/settings", as("alice"), settings)
		if resp.Code != 200 {
			t.Fatal(resp.Code, resp.Body)
		}
		bodies = append(bodies, resp.Body.String())
		for _, path := range []string{"/projects/" + p.ID, "/projects", "/projects/" + p.ID + "/delete-status", "/usage"} {
			resp := e.api.Get(path, as("alice"))
			if resp.Code != 200 {
				t.Fatalf("GET %s: %d", path, resp.Code)
			}
			bodies = append(bodies, resp.Body.String())
		}
		// A bad update that names the secret fails without echoing it.
		settings["envVars"] = []any{map[string]any{"key": "PORT", "value": dbPass, "isSecret": true}}
		resp = e.api.Patch("/projects/"+p.ID+"/settings", as("alice"), settings)
		if resp.Code != 400 {
			t.Fatal(resp.Code)
		}
		bodies = append(bodies, resp.Body.String())

		for _, b := range bodies {
			mustNotContain(t, "response", b, hook, dbPass, apiKey, "rotated-key-secret")
			if strings.Contains(b, "webhookSecret") {
				t.Errorf("response names webhookSecret: %s", b)
			}
		}
		// At rest: sealed, not plaintext.
		row := fmt.Sprint(rawRow(t, bdb, p.ID))
		mustNotContain(t, "stored row", row, hook, dbPass, apiKey, "rotated-key-secret")

		// The runtime gets the plaintext, masked secret kept, rotated one changed.
		info, err := e.svc.ProjectForDeploy(context.Background(), p.ID)
		if err != nil {
			t.Fatal(err)
		}
		plain := map[string]string{}
		for _, v := range info.Env {
			plain[v.Key] = v.Value
		}
		if plain["DATABASE_PASSWORD"] != dbPass || plain["API_KEY"] != "rotated-key-secret" || plain["NODE_ENV"] != "production" {
			t.Fatalf("deploy env: %v", plain)
		}
		if sec, err := e.svc.WebhookSecret(context.Background(), p.ID); err != nil || sec != hook {
			t.Fatalf("webhook secret: %q %v", sec, err)
		}
		// Clearing the webhook secret.
		settings["envVars"] = []any{}
		settings["webhookSecret"] = ""
		resp = e.api.Patch("/projects/"+p.ID+"/settings", as("alice"), settings)
		if resp.Code != 200 || decode[projects.Project](t, resp.Body.Bytes()).HasWebhookSecret {
			t.Fatalf("clear webhook secret: %d %s", resp.Code, resp.Body)
		}

		// Delete: nothing secret outlives the project, and nothing was logged.
		e.api.Delete("/projects/"+p.ID, as("alice"))
		e.waitStatus("alice", p.ID, "DELETED")
		mustNotContain(t, "stored row after delete", fmt.Sprint(rawRow(t, bdb, p.ID)), "v1:")
		logs := e.logs.String()
		if !strings.Contains(logs, p.ID) {
			t.Fatalf("expected the service to log about the project; logs: %s", logs)
		}
		mustNotContain(t, "logs", logs, hook, dbPass, apiKey, "rotated-key-secret")
	})
}

func TestDeletionLifecycle(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets(), func(t *testing.T, bdb *bun.DB) {
		e := setup(t, bdb, opts{})
		ctx := context.Background()
		p := e.create("alice", validCreate("doomed"))
		if e.deleteStatus("alice", p.ID).Status != "ACTIVE" {
			t.Fatal("new project not ACTIVE")
		}

		// Hold the teardown to observe DELETING.
		e.teardown.setHold(make(chan struct{}))
		resp := e.api.Delete("/projects/"+p.ID, as("alice"))
		if resp.Code != 202 {
			t.Fatalf("delete: %d %s", resp.Code, resp.Body)
		}
		if st := decode[projects.DeleteStatus](t, resp.Body.Bytes()); st.ID != p.ID || st.Status != "DELETING" {
			t.Fatalf("delete answer: %+v", st)
		}
		<-e.teardown.entered
		if st := e.deleteStatus("alice", p.ID); st.Status != "DELETING" {
			t.Fatalf("during teardown: %+v", st)
		}
		// A second DELETE meanwhile does not start a second teardown.
		if resp := e.api.Delete("/projects/"+p.ID, as("alice")); resp.Code != 202 {
			t.Fatalf("second delete: %d", resp.Code)
		}
		if got, _ := e.svc.ProjectForDeploy(ctx, p.ID); got != nil {
			t.Fatal("a DELETING project is deployable")
		}
		if _, err := e.svc.ProjectBySlug(ctx, p.Slug); !errors.Is(err, platform.ErrNotFound) {
			t.Fatalf("a DELETING project found by its slug (the ingress would meter it): %v", err)
		}
		if resp := e.api.Patch("/projects/"+p.ID+"/settings", as("alice"), validSettings()); resp.Code != 409 {
			t.Fatalf("settings while deleting: %d %s", resp.Code, resp.Body)
		}
		if ps := e.list("alice"); len(ps) != 1 || ps[0].Status != "DELETING" {
			t.Fatalf("list while deleting: %+v", ps)
		}
		close(e.teardown.holdCh())
		e.waitStatus("alice", p.ID, "DELETED")
		if n := e.teardown.callsFor(p.ID); n != 1 {
			t.Fatalf("teardown calls: %d", n)
		}

		// Gone from every other route; its owner still reads DELETED.
		for _, c := range []struct{ method, path string }{
			{http.MethodGet, "/projects/" + p.ID}, {http.MethodDelete, "/projects/" + p.ID},
		} {
			if resp := e.api.Do(c.method, c.path, as("alice")); resp.Code != 404 {
				t.Errorf("%s %s after delete: %d", c.method, c.path, resp.Code)
			}
		}
		if resp := e.api.Patch("/projects/"+p.ID+"/settings", as("alice"), validSettings()); resp.Code != 404 {
			t.Errorf("settings after delete: %d", resp.Code)
		}
		if ps := e.list("alice"); len(ps) != 0 {
			t.Fatalf("list after delete: %+v", ps)
		}
		if _, err := e.svc.ProjectForDeploy(ctx, p.ID); !errors.Is(err, platform.ErrNotFound) {
			t.Fatalf("deploy after delete: %v", err)
		}
		if resp := e.api.Get("/projects/"+p.ID+"/delete-status", as("bob")); resp.Code != 404 {
			t.Fatalf("bob reads delete-status: %d", resp.Code)
		}
		// The slug is free again, and the deleted project no longer counts.
		again := e.create("alice", validCreate("doomed"))
		if again.Slug != p.Slug {
			t.Fatalf("slug not reused: %q vs %q", again.Slug, p.Slug)
		}
		if pp, err := e.svc.ProjectBySlug(ctx, p.Slug); err != nil || pp.ID != again.ID || pp.OwnerID != users["alice"] {
			t.Fatalf("the slug's project is the new one: %+v %v", pp, err)
		}

		// A failing teardown: FAILED with the reason; DELETE again retries.
		e.teardown.setHold(nil)
		e.teardown.setFail(1)
		if resp := e.api.Delete("/projects/"+again.ID, as("alice")); resp.Code != 202 {
			t.Fatalf("delete: %d", resp.Code)
		}
		st := e.waitStatus("alice", again.ID, "FAILED")
		if !strings.Contains(st.ErrorMessage, "process table busy") {
			t.Fatalf("failed status: %+v", st)
		}
		resp = e.api.Get("/projects/"+again.ID, as("alice"))
		if resp.Code != 200 || decode[projects.Project](t, resp.Body.Bytes()).Status != "FAILED" {
			t.Fatalf("get failed project: %d %s", resp.Code, resp.Body)
		}
		if resp := e.api.Delete("/projects/"+again.ID, as("alice")); resp.Code != 202 {
			t.Fatalf("retry: %d", resp.Code)
		}
		if st := e.waitStatus("alice", again.ID, "DELETED"); st.ErrorMessage != "" {
			t.Fatalf("deleted with message: %+v", st)
		}
		if n := e.teardown.callsFor(again.ID); n != 2 {
			t.Fatalf("teardown calls after retry: %d", n)
		}
	})
}

func TestDeletionResumesAfterRestart(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets(), func(t *testing.T, bdb *bun.DB) {
		e := setup(t, bdb, opts{})
		p := e.create("alice", validCreate("shop"))
		e.teardown.setHold(make(chan struct{})) // never released: the process "stops" mid-teardown
		if resp := e.api.Delete("/projects/"+p.ID, as("alice")); resp.Code != 202 {
			t.Fatal(resp.Code)
		}
		<-e.teardown.entered
		// Shutdown with no grace: the teardown is cancelled, the project stays DELETING.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := e.svc.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if st := e.deleteStatus("alice", p.ID); st.Status != "DELETING" {
			t.Fatalf("after shutdown: %+v", st)
		}
		// A new process resumes it at Start.
		e2 := setup(t, bdb, opts{})
		if err := e2.svc.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		e2.waitStatus("alice", p.ID, "DELETED")
		if e2.teardown.callsFor(p.ID) != 1 {
			t.Fatalf("resumed teardown calls: %d", e2.teardown.callsFor(p.ID))
		}
	})
}

func TestMaxProjectsQuota(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets(), func(t *testing.T, bdb *bun.DB) {
		e := setup(t, bdb, opts{})
		var ids []string
		for i := 0; i < 3; i++ {
			ids = append(ids, e.create("alice", validCreate(fmt.Sprintf("app%d", i))).ID)
		}
		resp := e.api.Post("/projects", as("alice"), validCreate("one-too-many"))
		if resp.Code != 403 || !strings.Contains(resp.Body.String(), "maxProjects quota reached: 3 of 3 projects used on plan free") {
			t.Fatalf("4th create: %d %s", resp.Code, resp.Body)
		}
		if n := countRows(t, bdb); n != 3 {
			t.Fatalf("rows: %d", n)
		}
		// Bob has his own quota.
		e.create("bob", validCreate("bobs"))
		// A FAILED deletion still counts; a DELETED one frees the slot.
		e.teardown.setFail(1)
		e.api.Delete("/projects/"+ids[0], as("alice"))
		e.waitStatus("alice", ids[0], "FAILED")
		if resp := e.api.Post("/projects", as("alice"), validCreate("x")); resp.Code != 403 {
			t.Fatalf("create with FAILED project: %d", resp.Code)
		}
		e.api.Delete("/projects/"+ids[0], as("alice"))
		e.waitStatus("alice", ids[0], "DELETED")
		e.create("alice", validCreate("x"))
		// Upgrading the account lifts the limit.
		e.plans.setAccount(users["alice"], "starter")
		e.create("alice", validCreate("y"))
	})
}

func TestConcurrentCreatesCannotPassTheLastSlot(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets(), func(t *testing.T, bdb *bun.DB) {
		e := setup(t, bdb, opts{})
		e.create("alice", validCreate("existing")) // 1 of 3 used
		const n = 12
		var wg sync.WaitGroup
		codes := make([]int, n)
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				// Same name on purpose: slugs race too.
				codes[i] = e.api.Post("/projects", as("alice"), validCreate("racer")).Code
			}(i)
		}
		wg.Wait()
		created, refused := 0, 0
		for _, c := range codes {
			switch c {
			case 201:
				created++
			case 403:
				refused++
			default:
				t.Errorf("unexpected status %d", c)
			}
		}
		if created != 2 || refused != n-2 {
			t.Fatalf("created %d refused %d: %v", created, refused, codes)
		}
		ps := e.list("alice")
		slugs := map[string]bool{}
		for _, p := range ps {
			slugs[p.Slug] = true
		}
		if len(ps) != 3 || len(slugs) != 3 {
			t.Fatalf("projects: %+v", ps)
		}
	})
}

// TestSettingsRoundTrip: what GET /projects/{id} answers, sent back to PATCH
// /projects/{id}/settings unchanged, is accepted and changes nothing; a
// project that follows its owner's account plan keeps following it.
func TestSettingsRoundTrip(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets(), func(t *testing.T, bdb *bun.DB) {
		e := setup(t, bdb, opts{regions: []string{"eu-west", "us-east"}})
		ctx := context.Background()
		p := e.create("alice", validCreate("roundtrip"))
		resp := e.api.Get("/projects/"+p.ID, as("alice"))
		if resp.Code != 200 {
			t.Fatalf("get: %d %s", resp.Code, resp.Body)
		}
		var got map[string]any
		if err := json.Unmarshal(resp.Body.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		if got["planName"] != "free" || got["region"] != "eu-west" {
			t.Fatalf("a project shows its plan and region: %v %v", got["planName"], got["region"])
		}
		settings := map[string]any{}
		for _, f := range []string{"region", "planName", "envVars", "startCommand", "buildCommand", "isPrivate",
			"autoDeploy", "autoDeployBranch", "codehostRepositoryId", "httpsRedirect"} {
			settings[f] = got[f]
		}
		resp = e.api.Patch("/projects/"+p.ID+"/settings", as("alice"), settings)
		if resp.Code != 200 {
			t.Fatalf("settings sent back unchanged: %d %s", resp.Code, resp.Body)
		}
		after := decode[projects.Project](t, resp.Body.Bytes())
		if after.PlanName != "free" || after.Region != "eu-west" {
			t.Fatalf("after round trip: %+v", after)
		}
		before := decode[projects.Project](t, []byte(mustJSON(t, got)))
		before.UpdatedAt = after.UpdatedAt
		if fmt.Sprint(before) != fmt.Sprint(after) {
			t.Fatalf("round trip changed the project:\nbefore %+v\nafter  %+v", before, after)
		}
		_ = ctx
	})
}

// httpsRedirect: true by default and in lists; false is stored, shown, and
// names the project's slug in KeepHTTPSlugs (the ingress's list); each
// change is told to HTTPSRedirectChanged once; a bad value is a 400 that
// changes nothing.
func TestHTTPSRedirect(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets(), func(t *testing.T, bdb *bun.DB) {
		var mu sync.Mutex
		var told []string
		e := setup(t, bdb, opts{redirect: func(id string) { mu.Lock(); told = append(told, id); mu.Unlock() }})
		ctx := context.Background()
		p := e.create("alice", validCreate("keep"))
		other := e.create("alice", validCreate("other"))
		if !p.HTTPSRedirect || !e.list("alice")[0].HTTPSRedirect {
			t.Fatalf("a new project redirects: %+v", p)
		}
		patch := func(v any) *httptest.ResponseRecorder {
			body := validSettings()
			body["httpsRedirect"] = v
			return e.api.Patch("/projects/"+p.ID+"/settings", as("alice"), body)
		}
		if resp := patch("no"); resp.Code != 422 && resp.Code != 400 {
			t.Fatalf("httpsRedirect \"no\": %d %s", resp.Code, resp.Body)
		}
		if resp := patch(false); resp.Code != 200 || decode[projects.Project](t, resp.Body.Bytes()).HTTPSRedirect {
			t.Fatalf("httpsRedirect false: %d %s", resp.Code, resp.Body)
		}
		got := decode[projects.Project](t, e.api.Get("/projects/"+p.ID, as("alice")).Body.Bytes())
		keep, err := e.svc.KeepHTTPSlugs(ctx)
		if got.HTTPSRedirect || err != nil || !slices.Equal(keep, []string{p.Slug}) {
			t.Fatalf("after httpsRedirect false: %+v; KeepHTTPSlugs %q %v", got, keep, err)
		}
		for _, l := range e.list("alice") {
			if l.HTTPSRedirect != (l.ID == other.ID) {
				t.Fatalf("listed: %+v", l)
			}
		}
		if resp := patch(false); resp.Code != 200 { // unchanged: not told again
			t.Fatalf("again: %d %s", resp.Code, resp.Body)
		}
		// Left out: kept.
		if resp := e.api.Patch("/projects/"+p.ID+"/settings", as("alice"), validSettings()); resp.Code != 200 ||
			decode[projects.Project](t, resp.Body.Bytes()).HTTPSRedirect {
			t.Fatalf("left out: %d %s", resp.Code, resp.Body)
		}
		if resp := patch(true); resp.Code != 200 || !decode[projects.Project](t, resp.Body.Bytes()).HTTPSRedirect {
			t.Fatalf("httpsRedirect true: %d %s", resp.Code, resp.Body)
		}
		if keep, err := e.svc.KeepHTTPSlugs(ctx); err != nil || len(keep) != 0 {
			t.Fatalf("KeepHTTPSlugs after true: %q %v", keep, err)
		}
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(told, []string{p.ID, p.ID}) {
			t.Fatalf("HTTPSRedirectChanged calls: %q", told)
		}
	})
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestPlanChoice(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets(), func(t *testing.T, bdb *bun.DB) {
		e := setup(t, bdb, opts{})
		ctx := context.Background()
		p := e.create("alice", validCreate("shop"))
		info, err := e.svc.ProjectForDeploy(ctx, p.ID)
		if err != nil || info.PlanName != "free" || info.MaxDeployments != 100 || info.MaxMemoryMi != 512 ||
			info.MaxCpuM != 500 || info.MaxStorageGi != 1 || info.BuildTimeoutMins != 10 || info.PriorityBuilds {
			t.Fatalf("default limits: %+v %v", info, err)
		}
		s := validSettings()
		s["planName"] = "pro"
		resp := e.api.Patch("/projects/"+p.ID+"/settings", as("alice"), s)
		if resp.Code != 403 || !strings.Contains(resp.Body.String(), "plan pro is tier PRO, above the limit of your account plan free (tier FREE)") {
			t.Fatalf("pro on free account: %d %s", resp.Code, resp.Body)
		}
		if inUse, _ := e.svc.PlanInUse(ctx, "pro"); inUse {
			t.Fatal("refused plan recorded")
		}
		// A plan that is not public, even within the account's tier, serves
		// only the accounts it is assigned to.
		s["planName"] = "partner"
		resp = e.api.Patch("/projects/"+p.ID+"/settings", as("alice"), s)
		if resp.Code != 403 || !strings.Contains(resp.Body.String(), "plan partner is not public") {
			t.Fatalf("private plan: %d %s", resp.Code, resp.Body)
		}
		e.plans.setAccount(users["alice"], "partner")
		if resp := e.api.Patch("/projects/"+p.ID+"/settings", as("alice"), s); resp.Code != 200 {
			t.Fatalf("assigned private plan: %d %s", resp.Code, resp.Body)
		}
		s["planName"] = "pro"
		e.plans.setAccount(users["alice"], "pro")
		resp = e.api.Patch("/projects/"+p.ID+"/settings", as("alice"), s)
		if resp.Code != 200 || decode[projects.Project](t, resp.Body.Bytes()).PlanName != "pro" {
			t.Fatalf("pro on pro account: %d %s", resp.Code, resp.Body)
		}
		info, _ = e.svc.ProjectForDeploy(ctx, p.ID)
		if info.PlanName != "pro" || info.MaxMemoryMi != 4096 || !info.PriorityBuilds || info.BuildTimeoutMins != 30 {
			t.Fatalf("pro limits: %+v", info)
		}
		if pp, err := e.svc.ProjectBySlug(ctx, p.Slug); err != nil || pp.ID != p.ID || pp.Plan.Name != "pro" {
			t.Fatalf("by slug on pro: %+v %v", pp, err)
		}
		if inUse, _ := e.svc.PlanInUse(ctx, "pro"); !inUse {
			t.Fatal("PlanInUse(pro) false")
		}
		// After a downgrade the project keeps its plan name, but its limits are
		// capped at the account plan; other settings can still change.
		e.plans.setAccount(users["alice"], "starter")
		info, _ = e.svc.ProjectForDeploy(ctx, p.ID)
		if info.PlanName != "starter" || info.MaxMemoryMi != 1024 {
			t.Fatalf("capped limits: %+v", info)
		}
		s["envVars"] = []any{map[string]any{"key": "A", "value": "b"}}
		if resp := e.api.Patch("/projects/"+p.ID+"/settings", as("alice"), s); resp.Code != 200 {
			t.Fatalf("settings after downgrade: %d %s", resp.Code, resp.Body)
		}
		// Once deleted, the plan is no longer in use.
		e.api.Delete("/projects/"+p.ID, as("alice"))
		e.waitStatus("alice", p.ID, "DELETED")
		if inUse, _ := e.svc.PlanInUse(ctx, "pro"); inUse {
			t.Fatal("deleted project keeps plan in use")
		}
	})
}

func TestLocalRepos(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets(), func(t *testing.T, bdb *bun.DB) {
		e := setup(t, bdb, opts{allowLocal: true})
		e.plans.setAccount(users["alice"], "starter")
		for _, u := range []string{"file:///srv/git/app", "/srv/git/app.git", "http://127.0.0.1:3000/acme/app", "https://localhost/a/b"} {
			b := validCreate("shop")
			b["repoUrl"] = u
			if resp := e.api.Post("/projects", as("alice"), b); resp.Code != 201 {
				t.Errorf("%s: %d %s", u, resp.Code, resp.Body)
			}
		}
		for _, u := range []string{"srv/git/app", "file://relative", "https://u:p@github.com/a/b"} {
			b := validCreate("shop")
			b["repoUrl"] = u
			if resp := e.api.Post("/projects", as("alice"), b); resp.Code != 400 {
				t.Errorf("%s: %d %s", u, resp.Code, resp.Body)
			}
		}
	})
}

func TestProjectsForRepository(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets(), func(t *testing.T, bdb *bun.DB) {
		e := setup(t, bdb, opts{})
		ctx := context.Background()
		b := validCreate("web")
		b["repoUrl"], b["autoDeploy"], b["autoDeployBranch"] = "https://GitHub.com/Acme/Web.git/", true, "main"
		web := e.create("alice", b)
		b2 := validCreate("other")
		b2["codehostRepositoryId"] = "987"
		other := e.create("bob", b2)
		gone := e.create("bob", validCreate("web2"))
		e.api.Delete("/projects/"+gone.ID, as("bob"))
		e.waitStatus("bob", gone.ID, "DELETED")

		links, err := e.svc.ProjectsForRepository(ctx, []string{"https://github.com/Acme/Web"}, "")
		if err != nil || len(links) != 1 || links[0].ProjectID != web.ID || links[0].OwnerID != users["alice"] ||
			!links[0].AutoDeploy || links[0].AutoDeployBranch != "main" || links[0].Slug != "web" {
			t.Fatalf("by url: %+v %v", links, err)
		}
		links, _ = e.svc.ProjectsForRepository(ctx, []string{"https://github.com/acme/nothing"}, "987")
		if len(links) != 1 || links[0].ProjectID != other.ID {
			t.Fatalf("by id: %+v", links)
		}
		links, _ = e.svc.ProjectsForRepository(ctx, []string{"https://github.com/acme/web2", "git@github.com:x/y"}, "")
		if len(links) != 0 {
			t.Fatalf("deleted project linked: %+v", links)
		}
		if links, _ := e.svc.ProjectsForRepository(ctx, nil, ""); len(links) != 0 {
			t.Fatalf("empty query: %+v", links)
		}
	})
}

func TestUsage(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets(), func(t *testing.T, bdb *bun.DB) {
		c := counter{}
		e := setup(t, bdb, opts{deployments: c, logs: logBytes{users["alice"]: 4096}})
		a := e.create("alice", validCreate("a"))
		b := e.create("alice", validCreate("b"))
		e.create("bob", validCreate("c"))
		c[a.ID] = 7
		resp := e.api.Get("/usage", as("alice"))
		if resp.Code != 200 {
			t.Fatalf("usage: %d %s", resp.Code, resp.Body)
		}
		u := decode[projects.Usage](t, resp.Body.Bytes())
		if u.Plan.Name != "free" || u.Projects != (projects.Quota{Used: 2, Limit: 3}) || !u.Counted || len(u.Deployments) != 2 ||
			u.Deployments[0] != (projects.ProjectDeploys{ProjectID: a.ID, Slug: "a", PlanName: "free", Used: 7, Limit: 100}) ||
			u.Deployments[1].ProjectID != b.ID || u.Deployments[1].Used != 0 || u.PeriodStart.Day() != 1 ||
			!u.PeriodEnd.After(u.PeriodStart) || u.Logs == nil || *u.Logs != (projects.LogQuota{UsedBytes: 4096, LimitBytes: 1 << 20}) {
			t.Fatalf("usage: %+v", u)
		}
		if !strings.Contains(resp.Body.String(), `"logs":{"usedBytes":4096,"limitBytes":1048576}`) {
			t.Fatalf("usage body: %s", resp.Body)
		}
		if resp := e.api.Get("/usage"); resp.Code != 401 {
			t.Fatalf("usage without token: %d", resp.Code)
		}
	})
}

func TestDepsAndOpenAPI(t *testing.T) {
	t.Parallel()
	if _, err := projects.New(projects.Deps{}); err == nil {
		t.Fatal("empty deps accepted")
	}
	e := setup(t, dbtest.SQLite(t, sets()...), opts{})
	oa := e.api.OpenAPI()
	create := oa.Components.Schemas.SchemaFromRef(oa.Paths["/projects"].Post.RequestBody.Content["application/json"].Schema.Ref)
	for _, f := range []string{"name", "repoUrl", "framework", "port"} {
		if !contains(create.Required, f) {
			t.Errorf("create: %s not required", f)
		}
	}
	port := create.Properties["port"]
	if port.Type != "integer" || port.Minimum == nil || *port.Minimum != 1 || port.Maximum == nil || *port.Maximum != 65535 {
		t.Errorf("port schema: %+v", port)
	}
	if !create.Properties["webhookSecret"].WriteOnly {
		t.Error("webhookSecret not writeOnly")
	}
	settings := oa.Components.Schemas.SchemaFromRef(oa.Paths["/projects/{id}/settings"].Patch.RequestBody.Content["application/json"].Schema.Ref)
	for _, f := range []string{"region", "planName", "envVars"} {
		if !contains(settings.Required, f) {
			t.Errorf("settings: %s not required", f)
		}
	}
	item := oa.Components.Schemas.SchemaFromRef(settings.Properties["envVars"].Items.Ref)
	if item.Properties["key"].Pattern == "" || item.Properties["value"].MaxLength == nil {
		t.Errorf("env var schema: %+v", item)
	}
	if oa.Paths["/projects/{id}"].Delete.Responses["202"] == nil {
		t.Error("DELETE does not document 202")
	}
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// Reserved slugs (issue 22): a name whose slug would serve an app at one of
// the platform's own hosts (api.<apps-domain>, www., the API's or frontend's
// host) is refused with a 400 naming the rule, and nothing is stored.
func TestReservedSlugs(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets(), func(t *testing.T, bdb *bun.DB) {
		e := setup(t, bdb, opts{reserved: slugs.OfHosts("apps.example.com",
			"https://console.example.com", "https://keelson.apps.example.com/")})
		for _, name := range []string{"api", "Admin", " WWW! ", "app", "docs", "mail", "console", "keelson"} {
			resp := e.api.Post("/projects", as("alice"), validCreate(name))
			if resp.Code != 400 || !strings.Contains(resp.Body.String(), "reserved slug") ||
				!strings.Contains(resp.Body.String(), strings.ToLower(strings.Trim(name, " !"))) {
				t.Fatalf("%q: %d %s", name, resp.Code, resp.Body)
			}
		}
		if ps := e.list("alice"); len(ps) != 0 {
			t.Fatalf("a refused create stored %+v", ps)
		}
		// Names that merely contain a reserved word are fine.
		for _, name := range []string{"api-gateway", "my app", "webmail"} {
			if p := e.create("alice", validCreate(name)); p.Slug == "api" || p.Slug == "app" || p.Slug == "mail" {
				t.Fatalf("%q got slug %q", name, p.Slug)
			}
		}
	})
}

// host: only the platform ADMIN pins a project (a 403 first, so no one
// else learns which host ids exist), to a registered host (an unknown one
// is a 400 naming it); the pin is shown, listed, audited, read by
// PinnedHost for placement, kept when left out or sent back unchanged by
// anyone, and "" unpins.
func TestHostPin(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets(), func(t *testing.T, bdb *bun.DB) {
		e := setup(t, bdb, opts{hosts: []string{"host-a"}})
		ctx := context.Background()
		own := e.create("alice", validCreate("mine"))
		p := e.create("root", validCreate("pinned"))
		patch := func(who, id string, v any) *httptest.ResponseRecorder {
			body := validSettings()
			if v != nil {
				body["host"] = v
			}
			return e.api.Patch("/projects/"+id+"/settings", as(who), body)
		}
		for _, host := range []string{"host-a", "nope"} {
			if resp := patch("alice", own.ID, host); resp.Code != 403 || !strings.Contains(resp.Body.String(), "platform ADMIN") {
				t.Fatalf("alice pins to %s: %d %s", host, resp.Code, resp.Body)
			}
		}
		if resp := patch("root", p.ID, "nope"); resp.Code != 400 || !strings.Contains(resp.Body.String(), `host \"nope\" is not registered`) {
			t.Fatalf("unknown host: %d %s", resp.Code, resp.Body)
		}
		if resp := patch("root", p.ID, "bad host!"); resp.Code != 422 && resp.Code != 400 {
			t.Fatalf("bad id: %d %s", resp.Code, resp.Body)
		}
		if resp := patch("root", p.ID, "host-a"); resp.Code != 200 || decode[projects.Project](t, resp.Body.Bytes()).Host != "host-a" {
			t.Fatalf("pin: %d %s", resp.Code, resp.Body)
		}
		if h, err := e.svc.PinnedHost(ctx, p.ID); h != "host-a" || err != nil {
			t.Fatalf("PinnedHost: %q %v", h, err)
		}
		if resp := patch("root", p.ID, nil); resp.Code != 200 || decode[projects.Project](t, resp.Body.Bytes()).Host != "host-a" {
			t.Fatalf("left out: %d %s", resp.Code, resp.Body)
		}
		for _, l := range e.list("root") {
			if l.ID == p.ID && l.Host != "host-a" {
				t.Fatalf("listed: %+v", l)
			}
		}
		if resp := patch("root", p.ID, ""); resp.Code != 200 || decode[projects.Project](t, resp.Body.Bytes()).Host != "" {
			t.Fatalf("unpin: %d %s", resp.Code, resp.Body)
		}
		if h, err := e.svc.PinnedHost(ctx, own.ID); h != "" || err != nil {
			t.Fatalf("PinnedHost of an unpinned project: %q %v", h, err)
		}
	})
}
