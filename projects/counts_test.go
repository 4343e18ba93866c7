package projects_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/danielgtaylor/huma/v2/humatest"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/keelson-dev/keelson/platform/secret"
	"github.com/keelson-dev/keelson/projects"
	"github.com/uptrace/bun"
)

// The maxProjects counter of a database that had projects before migration
// 0002 is filled from its rows (DELETED ones not counted), and a teardown
// that records DELETED gives the slot back.
func TestQuotaCounterBackfilledFromExistingRows(t *testing.T) {
	t.Parallel()
	first := projects.Migrations()
	first.Migrations = first.Migrations[:1]
	dbtest.Each(t, []db.MigrationSet{first}, func(t *testing.T, bdb *bun.DB) {
		ctx := context.Background()
		now := time.Now().UTC()
		for i, st := range []string{"ACTIVE", "FAILED", "DELETED", "DELETED"} {
			_, err := bdb.ExecContext(ctx, `INSERT INTO projects (id, owner_id, name, slug, repo_url, repo_key, framework, port,
is_private, auto_deploy, auto_deploy_branch, codehost_repository_id, webhook_secret, region, plan_name, env_vars,
start_command, build_command, status, error_message, created_at, updated_at)
VALUES (?, ?, ?, ?, 'https://github.com/a/b', 'github.com/a/b', 'node', 3000, false, false, '', '', '', 'local', '', '[]', '', '', ?, '', ?, ?)`,
				platform.NewID(), users["alice"], fmt.Sprint("old", i), fmt.Sprint("old", i), st, now, now)
			if err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Migrate(ctx, bdb, projects.Migrations()); err != nil {
			t.Fatal(err)
		}
		e := setup(t, bdb, opts{})
		// 2 of 3 used (ACTIVE + FAILED): one more, then the 403 names 3 of 3.
		p := e.create("alice", validCreate("third"))
		resp := e.api.Post("/projects", as("alice"), validCreate("fourth"))
		if resp.Code != 403 || !strings.Contains(resp.Body.String(), "maxProjects quota reached: 3 of 3 projects used on plan free") {
			t.Fatalf("4th create: %d %s", resp.Code, resp.Body)
		}
		if got := countRows(t, bdb); got != 5 {
			t.Fatalf("rows after refused create: %d", got)
		}
		// Deleting one frees exactly one slot; a DELETE of the DELETED one frees nothing more.
		e.api.Delete("/projects/"+p.ID, as("alice"))
		e.waitStatus("alice", p.ID, "DELETED")
		if resp := e.api.Delete("/projects/"+p.ID, as("alice")); resp.Code != 404 {
			t.Fatalf("delete of a deleted project: %d", resp.Code)
		}
		e.create("alice", validCreate("again"))
		if resp := e.api.Post("/projects", as("alice"), validCreate("fifth")); resp.Code != 403 {
			t.Fatalf("create over the quota after delete+create: %d %s", resp.Code, resp.Body)
		}
	})
}

type quietTB struct{}

func (quietTB) Helper()             {}
func (quietTB) Log(...any)          {}
func (quietTB) Logf(string, ...any) {}

// BenchmarkCreateWith1000Owned measures POST /projects by an owner who
// already has 1,000 projects (SQLite): the quota check reads one counter row,
// so the cost must not grow with the projects owned.
func BenchmarkCreateWith1000Owned(b *testing.B) {
	bdb := dbtest.SQLite(b, sets()...)
	sealer, _ := secret.New("bench-seal-key-0123456789abcdef")
	_, api := humatest.New(quietTB{}, platform.APIConfig("bench", "1"))
	plans := newPlanBook()
	plans.plans["unlimited"] = &projects.Plan{Name: "unlimited", Tier: "ENTERPRISE", TierRank: 3, MaxDeployments: 1, MaxMemoryMi: 512, MaxCpuM: 500, MaxStorageGi: 1, BuildTimeoutMins: 10}
	plans.setAccount(users["alice"], "unlimited")
	svc, err := projects.New(projects.Deps{
		DB: bdb, Auth: tokenAuth{}, Sealer: sealer, Plans: plans,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := svc.Register(api); err != nil {
		b.Fatal(err)
	}
	defer svc.Close(context.Background())
	for i := 0; i < 1000; i++ {
		if resp := api.Post("/projects", as("alice"), validCreate(fmt.Sprint("seed", i))); resp.Code != 201 {
			b.Fatalf("seed: %d %s", resp.Code, resp.Body)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if resp := api.Post("/projects", as("alice"), validCreate(fmt.Sprint("b", i))); resp.Code != 201 {
			b.Fatalf("create: %d %s", resp.Code, resp.Body)
		}
	}
}
