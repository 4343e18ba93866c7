package projects_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/danielgtaylor/huma/v2/humatest"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/keelson-dev/keelson/platform/secret"
	"github.com/keelson-dev/keelson/projects"
	"github.com/uptrace/bun"
)

// listBench is an owner with 20 projects (SQLite), as in examples/bench's
// GET /projects row.
// cacheBytes is Deps.ListCacheBytes (-1: the cache off).
func listBench(b *testing.B, cacheBytes int64) (*projects.Service, humatest.TestAPI) {
	bdb := dbtest.SQLite(b, sets()...)
	sealer, _ := secret.New("bench-seal-key-0123456789abcdef")
	_, api := humatest.New(quietTB{}, platform.APIConfig("bench", "1"))
	plans := newPlanBook()
	plans.plans["unlimited"] = &projects.Plan{Name: "unlimited", Tier: "ENTERPRISE", TierRank: 3}
	plans.setAccount(users["alice"], "unlimited")
	svc, err := projects.New(projects.Deps{
		DB: bdb, Auth: tokenAuth{}, Sealer: sealer, Plans: plans,
		Logger: slog.New(slog.DiscardHandler), ListCacheBytes: cacheBytes,
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := svc.Register(api); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = svc.Close(context.Background()) })
	for i := 0; i < 20; i++ {
		if resp := api.Post("/projects", as("alice"), validCreate(fmt.Sprint("list", i))); resp.Code != 201 {
			b.Fatalf("seed: %d %s", resp.Code, resp.Body)
		}
	}
	return svc, api
}

// BenchmarkList measures the store read of GET /projects: one page of 20
// projects through (*Service).List.
func BenchmarkList(b *testing.B) {
	svc, _ := listBench(b, -1)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		ps, _, err := svc.List(ctx, users["alice"], projects.ListParams{Limit: platform.DefaultPageSize})
		if err != nil || len(ps) != 20 {
			b.Fatalf("list: %d, %v", len(ps), err)
		}
	}
}

// BenchmarkListHTTP measures GET /projects through Huma (routing, the
// handler, the store read and JSON encoding; the bearer check is a stub),
// with the list cache off.
func BenchmarkListHTTP(b *testing.B) {
	_, api := listBench(b, -1)
	b.ReportAllocs()
	for b.Loop() {
		if resp := api.Get("/projects", as("alice")); resp.Code != 200 {
			b.Fatalf("list: %d %s", resp.Code, resp.Body)
		}
	}
}

// BenchmarkListHTTPCached is BenchmarkListHTTP answered from the list cache
// (nothing changes between requests): routing, the handler, the cache
// lookup and the write of the encoded page.
func BenchmarkListHTTPCached(b *testing.B) {
	_, api := listBench(b, 0)
	b.ReportAllocs()
	for b.Loop() {
		if resp := api.Get("/projects", as("alice")); resp.Code != 200 || resp.Body.Len() < 1000 {
			b.Fatalf("list: %d %s", resp.Code, resp.Body)
		}
	}
}

// Lists read through prepared statements see every write at once, from this
// service or another one on the same database (another replica): a new
// project, a settings change and a deletion show in the very next list, with
// each filter combination (status, cursor, both). The list cache is off here
// (this is the read path under it; listcache_test.go covers the cache).
func TestListSeesWritesAtOnceAcrossReplicas(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets(), func(t *testing.T, bdb *bun.DB) {
		a, b := setup(t, bdb, opts{listCache: -1}), setup(t, bdb, opts{listCache: -1})
		for _, e := range []*env{a, b} {
			e.plans.setAccount(users["alice"], "starter")
		}
		ids := func(e *env, query string) []string {
			t.Helper()
			resp := e.api.Get("/projects"+query, as("alice"))
			if resp.Code != 200 {
				t.Fatalf("list %s: %d %s", query, resp.Code, resp.Body)
			}
			var out []string
			for _, p := range decode[[]projects.Project](t, resp.Body.Bytes()) {
				out = append(out, p.ID+":"+p.Status)
			}
			return out
		}
		p1 := a.create("alice", validCreate("first"))
		if got := ids(b, ""); len(got) != 1 || got[0] != p1.ID+":ACTIVE" {
			t.Fatalf("b lists %v after a created %s", got, p1.ID)
		}
		p2 := b.create("alice", validCreate("second"))
		if got := ids(a, "?status=ACTIVE"); len(got) != 2 || got[0] != p2.ID+":ACTIVE" {
			t.Fatalf("a lists %v after b created %s", got, p2.ID)
		}
		// The cursor after the newest page item: the older one follows.
		resp := a.api.Get("/projects?limit=1", as("alice"))
		cur := resp.Header().Get("X-Next-Cursor")
		if got := ids(b, "?limit=1&cursor="+cur); len(got) != 1 || got[0] != p1.ID+":ACTIVE" {
			t.Fatalf("second page on b: %v", got)
		}
		if got := ids(b, "?limit=1&status=ACTIVE&cursor="+cur); len(got) != 1 || got[0] != p1.ID+":ACTIVE" {
			t.Fatalf("second ACTIVE page on b: %v", got)
		}
		set := validSettings()
		set["envVars"] = []any{map[string]any{"key": "MODE", "value": "fast"}}
		if resp := b.api.Patch("/projects/"+p1.ID+"/settings", as("alice"), set); resp.Code != 200 {
			t.Fatalf("settings: %d %s", resp.Code, resp.Body)
		}
		resp = a.api.Get("/projects", as("alice"))
		if ps := decode[[]projects.Project](t, resp.Body.Bytes()); len(ps) != 2 || len(ps[1].EnvVars) != 1 || ps[1].EnvVars[0].Value != "fast" {
			t.Fatalf("a lists %+v after b's settings change", ps)
		}
		if resp := a.api.Delete("/projects/"+p2.ID, as("alice")); resp.Code != 202 {
			t.Fatalf("delete: %d %s", resp.Code, resp.Body)
		}
		if got := ids(b, "?status=DELETING"); len(got) != 1 || got[0] != p2.ID+":DELETING" {
			// The teardown may already have finished: then p2 is gone from the list.
			if got := ids(b, ""); len(got) != 1 || got[0] != p1.ID+":ACTIVE" {
				t.Fatalf("b lists %v after a deleted %s", got, p2.ID)
			}
		}
	})
}
