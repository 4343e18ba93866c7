package projects_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/keelson-dev/keelson/platform/platformtest"
	"github.com/keelson-dev/keelson/projects"
	"github.com/uptrace/bun"
)

// startCached starts e's service and waits until its list cache serves (on
// Postgres once the listener has proven its connection).
func (e *env) startCached() {
	e.t.Helper()
	if err := e.svc.Start(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	platformtest.Eventually(e.t, 20*time.Second, "the list cache to go live",
		func() bool { return projects.ListCacheLive(e.svc) && projects.RowCacheLive(e.svc) })
}

// summary is what a list shows of each project: id, status, plan and env
// var keys and values.
func (e *env) summary(user, query string) string {
	e.t.Helper()
	resp := e.api.Get("/projects"+query, as(user))
	if resp.Code != 200 {
		e.t.Fatalf("list %s: %d %s", query, resp.Code, resp.Body)
	}
	if ct := resp.Header().Get("Content-Type"); ct != "application/json" {
		e.t.Fatalf("list %s: Content-Type %q", query, ct)
	}
	var out []string
	for _, p := range decode[[]projects.Project](e.t, resp.Body.Bytes()) {
		s := p.ID + ":" + p.Status + ":" + p.PlanName
		for _, v := range p.EnvVars {
			s += ":" + v.Key + "=" + v.Value
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

// cachedWhile shows that user's list query is answered from the cache: with
// the account plan moved to plan behind the service's back, it still answers
// want. (On Postgres the notification of one's own earlier write may arrive
// late and drop the page between the two reads; then the try starts again,
// from an emptied cache, or the page the second read stored, under plan,
// would answer every later try.)
func (e *env) cachedWhile(user, query, want, plan string) {
	e.t.Helper()
	var got string
	platformtest.Eventually(e.t, 20*time.Second, "the cache to serve "+query, func() bool {
		e.svc.AccountPlanChanged(users[user]) // each try starts from no cached page
		e.plans.setAccount(users[user], "")
		e.summary(user, query)
		e.plans.setAccount(users[user], plan)
		got = e.summary(user, query)
		return got == want
	})
}

// The list cache serves repeated lists, and every write that changes what a
// list shows drops it before the write answers: a new project, a settings
// change, a deletion and the teardown that ends it, an account plan change
// and a change of the plans (the two the host forwards from the plans
// module). The plan source here is a fake changed behind the service's back,
// which shows the cache really serves until told.
func TestListCacheSeesEveryWrite(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets(), func(t *testing.T, bdb *bun.DB) {
		e := setup(t, bdb, opts{})
		e.startCached()
		carol := users["carol"]
		if got := e.summary("carol", ""); got != "" {
			t.Fatalf("empty list: %q", got)
		}
		p1 := e.create("carol", validCreate("first"))
		if got, want := e.summary("carol", ""), p1.ID+":ACTIVE:free"; got != want {
			t.Fatalf("after create: %q, want %q", got, want)
		}
		if got := e.summary("bob", ""); got != "" {
			t.Fatalf("bob lists carol's: %q", got)
		}
		set := validSettings()
		set["envVars"] = []any{map[string]any{"key": "MODE", "value": "fast"}}
		if resp := e.api.Patch("/projects/"+p1.ID+"/settings", as("carol"), set); resp.Code != 200 {
			t.Fatalf("settings: %d %s", resp.Code, resp.Body)
		}
		if got, want := e.summary("carol", ""), p1.ID+":ACTIVE:free:MODE=fast"; got != want {
			t.Fatalf("after settings: %q, want %q", got, want)
		}
		// Back to following the account plan: planName stored "" again is not
		// possible through settings, so a second project follows it.
		p2 := e.create("carol", validCreate("second"))
		want := p2.ID + ":ACTIVE:free " + p1.ID + ":ACTIVE:free:MODE=fast"
		if got := e.summary("carol", ""); got != want {
			t.Fatalf("after second create: %q, want %q", got, want)
		}
		// Behind the service's back: the cached page still says free.
		e.cachedWhile("carol", "", want, "starter")
		e.svc.AccountPlanChanged(carol)
		if got, want := e.summary("carol", ""), p2.ID+":ACTIVE:starter "+p1.ID+":ACTIVE:free:MODE=fast"; got != want {
			t.Fatalf("after account plan change: %q, want %q", got, want)
		}
		e.plans.setAccount(carol, "pro")
		e.svc.PlansChanged()
		if got, want := e.summary("carol", ""), p2.ID+":ACTIVE:pro "+p1.ID+":ACTIVE:free:MODE=fast"; got != want {
			t.Fatalf("after plans change: %q, want %q", got, want)
		}
		// Pages are cached by size and cursor: the second page of one.
		resp := e.api.Get("/projects?limit=1", as("carol"))
		cur := resp.Header().Get("X-Next-Cursor")
		if got, want := e.summary("carol", "?limit=1&cursor="+cur), p1.ID+":ACTIVE:free:MODE=fast"; got != want {
			t.Fatalf("second page: %q, want %q", got, want)
		}
		hold := make(chan struct{})
		e.teardown.setHold(hold)
		if resp := e.api.Delete("/projects/"+p1.ID, as("carol")); resp.Code != 202 {
			t.Fatalf("delete: %d %s", resp.Code, resp.Body)
		}
		if got, want := e.summary("carol", "?limit=1&cursor="+cur), p1.ID+":DELETING:free:MODE=fast"; got != want {
			t.Fatalf("second page after delete: %q, want %q", got, want)
		}
		if got, want := e.summary("carol", "?status=ACTIVE"), p2.ID+":ACTIVE:pro"; got != want {
			t.Fatalf("ACTIVE after delete: %q, want %q", got, want)
		}
		close(hold)
		e.waitStatus("carol", p1.ID, projects.StatusDeleted)
		if got, want := e.summary("carol", ""), p2.ID+":ACTIVE:pro"; got != want {
			t.Fatalf("after the teardown: %q, want %q", got, want)
		}
		if got := e.summary("carol", "?limit=1&cursor="+cur); got != "" {
			t.Fatalf("second page after the teardown: %q", got)
		}
	})
}

// Two replicas (two services on one Postgres database) see each other's
// writes through the list cache's listener: creates, settings, deletes, and
// the plans channel's account plan changes. The window is the notification's
// trip, so the other replica's list is awaited.
func TestListCacheAcrossReplicas(t *testing.T) {
	t.Parallel()
	bdb := dbtest.Postgres(t, sets()...)
	planChannel := "test_plans_" + strings.ReplaceAll(platform.NewID(), "-", "")
	a, b := setup(t, bdb, opts{planChannel: planChannel}), setup(t, bdb, opts{planChannel: planChannel})
	a.startCached()
	b.startCached()
	eventually := func(e *env, query, want string) {
		t.Helper()
		var got string
		platformtest.Eventually(t, 20*time.Second, "the list "+query+" to show "+want,
			func() bool { got = e.summary("dave", query); return got == want })
	}
	if got := b.summary("dave", ""); got != "" {
		t.Fatalf("empty list: %q", got)
	}
	p1 := a.create("dave", validCreate("first"))
	eventually(b, "", p1.ID+":ACTIVE:free")
	set := validSettings()
	set["envVars"] = []any{map[string]any{"key": "MODE", "value": "fast"}}
	if resp := b.api.Patch("/projects/"+p1.ID+"/settings", as("dave"), set); resp.Code != 200 {
		t.Fatalf("settings: %d %s", resp.Code, resp.Body)
	}
	eventually(a, "", p1.ID+":ACTIVE:free:MODE=fast")
	p2 := b.create("dave", validCreate("second"))
	eventually(a, "", p2.ID+":ACTIVE:free "+p1.ID+":ACTIVE:free:MODE=fast")
	// The plans module's triggers name the user on its channel.
	b.cachedWhile("dave", "?status=ACTIVE", p2.ID+":ACTIVE:free "+p1.ID+":ACTIVE:free:MODE=fast", "starter")
	if _, err := bdb.ExecContext(context.Background(), "SELECT pg_notify(?, ?)", planChannel, users["dave"]); err != nil {
		t.Fatal(err)
	}
	eventually(b, "?status=ACTIVE", p2.ID+":ACTIVE:starter "+p1.ID+":ACTIVE:free:MODE=fast")
	// A write behind both services' backs (another process) is named by the trigger too.
	if _, err := bdb.NewUpdate().Table("projects").Set("name = 'renamed'").Set("region = 'elsewhere'").
		Where("id = ?", p2.ID).Exec(context.Background()); err != nil {
		t.Fatal(err)
	}
	platformtest.Eventually(t, 20*time.Second, "a's list to show the region written behind its back", func() bool {
		resp := a.api.Get("/projects", as("dave"))
		return strings.Contains(resp.Body.String(), `"region":"elsewhere"`)
	})
	if resp := a.api.Delete("/projects/"+p1.ID, as("dave")); resp.Code != 202 {
		t.Fatalf("delete: %d %s", resp.Code, resp.Body)
	}
	a.waitStatus("dave", p1.ID, projects.StatusDeleted)
	eventually(b, "?status=ACTIVE", p2.ID+":ACTIVE:starter")
}

// shown is what user's GET /projects/{id} shows: its code, and the
// project's name, status and env var keys and values.
func (e *env) shown(user, id string) (int, string) {
	e.t.Helper()
	resp := e.api.Get("/projects/"+id, as(user))
	if resp.Code != 200 {
		return resp.Code, ""
	}
	p := decode[projects.Project](e.t, resp.Body.Bytes())
	s := p.Name + ":" + p.Status
	for _, v := range p.EnvVars {
		s += ":" + v.Key + "=" + v.Value
	}
	return 200, s
}

// rename renames project id behind the service's back (another process).
func rename(t *testing.T, bdb *bun.DB, id, name string) {
	t.Helper()
	if _, err := bdb.NewUpdate().Table("projects").Set("name = ?", name).Where("id = ?", id).
		Exec(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// The project row that GET /projects/{id} and every project-scoped route is
// authorised by is served from memory, and every write to it drops it
// before the write answers: settings, a deletion and the teardown that ends
// it. Who may read it is decided per request. A rename behind the service's
// back shows the cache serves (SQLite), or that the trigger tells it
// (Postgres).
func TestProjectCacheSeesEveryWrite(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets(), func(t *testing.T, bdb *bun.DB) {
		e := setup(t, bdb, opts{})
		e.startCached()
		p := e.create("carol", validCreate("first"))
		show := func(user, want string) {
			t.Helper()
			if code, got := e.shown(user, p.ID); code != 200 || got != want {
				t.Fatalf("GET as %s: %d %q, want %q", user, code, got, want)
			}
		}
		show("carol", "first:ACTIVE")
		if code, _ := e.shown("bob", p.ID); code != 404 {
			t.Fatalf("bob reads carol's project: %d", code)
		}
		if db.IsPostgres(bdb) {
			rename(t, bdb, p.ID, "renamed")
			platformtest.Eventually(t, 20*time.Second, "the trigger to tell the cache",
				func() bool { _, got := e.shown("carol", p.ID); return got == "renamed:ACTIVE" })
		} else {
			rename(t, bdb, p.ID, "renamed")
			show("carol", "first:ACTIVE") // served from memory
			if code, _ := e.shown("bob", p.ID); code != 404 {
				t.Fatalf("bob reads carol's cached project: %d", code)
			}
		}
		set := validSettings()
		set["envVars"] = []any{map[string]any{"key": "MODE", "value": "fast"}}
		if resp := e.api.Patch("/projects/"+p.ID+"/settings", as("carol"), set); resp.Code != 200 {
			t.Fatalf("settings: %d %s", resp.Code, resp.Body)
		}
		show("carol", "renamed:ACTIVE:MODE=fast")
		hold := make(chan struct{})
		e.teardown.setHold(hold)
		if resp := e.api.Delete("/projects/"+p.ID, as("carol")); resp.Code != 202 {
			t.Fatalf("delete: %d %s", resp.Code, resp.Body)
		}
		show("carol", "renamed:DELETING:MODE=fast")
		close(hold)
		e.waitStatus("carol", p.ID, projects.StatusDeleted)
		if code, _ := e.shown("carol", p.ID); code != 404 {
			t.Fatalf("GET a deleted project: %d", code)
		}
	})
}

// Two replicas see each other's writes to a project's row through the
// listener: settings, a write of another process, a deletion.
func TestProjectCacheAcrossReplicas(t *testing.T) {
	t.Parallel()
	bdb := dbtest.Postgres(t, sets()...)
	a, b := setup(t, bdb, opts{}), setup(t, bdb, opts{})
	a.startCached()
	b.startCached()
	eventually := func(e *env, id string, code int, want string) {
		t.Helper()
		platformtest.Eventually(t, 20*time.Second, "GET /projects/"+id+" to show "+want, func() bool {
			c, got := e.shown("dave", id)
			return c == code && got == want
		})
	}
	p := a.create("dave", validCreate("first"))
	eventually(b, p.ID, 200, "first:ACTIVE")
	set := validSettings()
	set["envVars"] = []any{map[string]any{"key": "MODE", "value": "fast"}}
	if resp := a.api.Patch("/projects/"+p.ID+"/settings", as("dave"), set); resp.Code != 200 {
		t.Fatalf("settings: %d %s", resp.Code, resp.Body)
	}
	eventually(b, p.ID, 200, "first:ACTIVE:MODE=fast")
	rename(t, bdb, p.ID, "renamed")
	eventually(b, p.ID, 200, "renamed:ACTIVE:MODE=fast")
	if resp := a.api.Delete("/projects/"+p.ID, as("dave")); resp.Code != 202 {
		t.Fatalf("delete: %d %s", resp.Code, resp.Body)
	}
	a.waitStatus("dave", p.ID, projects.StatusDeleted)
	eventually(b, p.ID, 404, "")
}
