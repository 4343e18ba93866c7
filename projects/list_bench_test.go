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
)

// listBench is an owner with 20 projects (SQLite), as in examples/bench's
// GET /projects row.
func listBench(b *testing.B) (*projects.Service, humatest.TestAPI) {
	bdb := dbtest.SQLite(b, sets()...)
	sealer, _ := secret.New("bench-seal-key-0123456789abcdef")
	_, api := humatest.New(quietTB{}, platform.APIConfig("bench", "1"))
	plans := newPlanBook()
	plans.plans["unlimited"] = &projects.Plan{Name: "unlimited", Tier: "ENTERPRISE", TierRank: 3}
	plans.setAccount(users["alice"], "unlimited")
	svc, err := projects.New(projects.Deps{
		DB: bdb, Auth: tokenAuth{}, Sealer: sealer, Plans: plans, Teardown: newTeardown(),
		Logger: slog.New(slog.DiscardHandler),
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
	svc, _ := listBench(b)
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
// handler, the store read and JSON encoding; the bearer check is a stub).
func BenchmarkListHTTP(b *testing.B) {
	_, api := listBench(b)
	b.ReportAllocs()
	for b.Loop() {
		if resp := api.Get("/projects", as("alice")); resp.Code != 200 {
			b.Fatalf("list: %d %s", resp.Code, resp.Body)
		}
	}
}
