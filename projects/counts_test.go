package projects_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
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
		// Migration 0007: each row's slot is where it was counted, under its owner.
		if n, err := bdb.NewSelect().Table("projects").Where("quota_id <> owner_id").Count(ctx); err != nil || n != 0 {
			t.Fatalf("rows whose quota_id is not their owner after the backfill: %d %v", n, err)
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

// ownedTeams stands in for the teams module: each team has one member, its
// owner.
type ownedTeams map[string]string // team id -> owner's user id

func (o ownedTeams) MemberRole(_ context.Context, teamID, userID string) (platform.MemberRole, error) {
	if o[teamID] == userID {
		return platform.MemberOwner, nil
	}
	return "", nil
}

func (o ownedTeams) TeamsOf(_ context.Context, userID string) ([]string, error) {
	var out []string
	for team, owner := range o {
		if owner == userID {
			out = append(out, team)
		}
	}
	return out, nil
}

// quotaEnv is alice (free: 3 projects) owning teams one and two, which
// borrow her plan, and own, which has a plan of its own.
type quotaEnv struct {
	*env
	one, two, own string
}

func newQuotaEnv(t *testing.T, bdb *bun.DB) *quotaEnv {
	q := &quotaEnv{one: platform.NewID(), two: platform.NewID(), own: platform.NewID()}
	q.env = setup(t, bdb, opts{teams: ownedTeams{q.one: users["alice"], q.two: users["alice"], q.own: users["alice"]}})
	q.plans.borrow(q.one, users["alice"])
	q.plans.borrow(q.two, users["alice"])
	return q
}

func (q *quotaEnv) in(team, name string) map[string]any {
	b := validCreate(name)
	if team != "" {
		b["teamId"] = team
	}
	return b
}

// refused fails unless a create in team ("": personal) is the 403 at 3 of 3.
func (q *quotaEnv) refused(team, what string) {
	q.t.Helper()
	resp := q.api.Post("/projects", as("alice"), q.in(team, "over"))
	if resp.Code != 403 || !strings.Contains(resp.Body.String(), "maxProjects quota reached: 3 of 3 projects used on plan free") {
		q.t.Fatalf("%s: %d %s", what, resp.Code, resp.Body)
	}
}

func (q *quotaEnv) used() int {
	q.t.Helper()
	resp := q.api.Get("/usage", as("alice"))
	if resp.Code != 200 {
		q.t.Fatalf("usage: %d %s", resp.Code, resp.Body)
	}
	return decode[projects.Usage](q.t, resp.Body.Bytes()).Projects.Used
}

func (q *quotaEnv) transfer(id, team string) {
	q.t.Helper()
	if resp := q.api.Post("/projects/"+id+"/transfer", as("alice"), map[string]any{"teamId": team}); resp.Code != 200 {
		q.t.Fatalf("transfer to %q: %d %s", team, resp.Code, resp.Body)
	}
}

// The projects of a user and of the teams borrowing their plan count
// together against the plan's maxProjects; a team with a plan of its own
// counts alone; a transfer between the user and a borrowing team moves no
// slot; a project gives its slot back where it was taken, even after its
// team got a plan of its own.
func TestQuotaCountsTeamsBorrowingTheOwnersPlan(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets(), func(t *testing.T, bdb *bun.DB) {
		q := newQuotaEnv(t, bdb)
		mine := q.create("alice", q.in("", "mine"))
		inOne := q.create("alice", q.in(q.one, "one"))
		q.create("alice", q.in(q.two, "two"))
		q.refused(q.one, "a 4th project in a borrowing team")
		q.refused("", "a 4th personal project")
		for i := 0; i < 2; i++ { // own counts alone: 2 of its 3
			q.create("alice", q.in(q.own, fmt.Sprint("own", i)))
		}
		if u := q.used(); u != 3 {
			t.Fatalf("usage: %d used, want 3", u)
		}
		// At the limit, moves between alice and her borrowing teams are allowed and free nothing.
		q.transfer(mine.ID, q.one)
		q.transfer(mine.ID, q.two)
		q.refused("", "a personal project after moving hers into teams")
		q.transfer(mine.ID, "")
		// A move into the team with its own plan takes its last slot and frees one of hers.
		q.transfer(inOne.ID, q.own)
		q.refused(q.own, "a 4th project in the team with its own plan")
		if u := q.used(); u != 2 {
			t.Fatalf("usage after a move out of her count: %d used, want 2", u)
		}
		last := q.create("alice", q.in(q.one, "last"))
		// Team one gets a plan of its own: its project still gives the slot back to alice.
		q.plans.borrow(q.one, "")
		q.api.Delete("/projects/"+last.ID, as("alice"))
		q.waitStatus("alice", last.ID, "DELETED")
		if u := q.used(); u != 2 {
			t.Fatalf("usage after the team project's teardown: %d used, want 2", u)
		}
		q.create("alice", q.in("", "again"))
		q.refused("", "a personal project at the limit again")
	})
}

// Concurrent creates in alice's account and in her borrowing teams cannot
// both take her last slot.
func TestQuotaConcurrentCreatesAcrossBorrowingTeams(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets(), func(t *testing.T, bdb *bun.DB) {
		q := newQuotaEnv(t, bdb)
		q.create("alice", q.in("", "existing"))
		q.create("alice", q.in(q.one, "existing-team")) // 2 of 3 used
		const n = 12
		var wg sync.WaitGroup
		codes := make([]int, n)
		for i := 0; i < n; i++ {
			team := []string{"", q.one, q.two}[i%3]
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				codes[i] = q.api.Post("/projects", as("alice"), q.in(team, fmt.Sprint("racer", i))).Code
			}(i)
		}
		wg.Wait()
		created := 0
		for _, c := range codes {
			switch c {
			case 201:
				created++
			case 403:
			default:
				t.Errorf("unexpected status %d", c)
			}
		}
		if created != 1 {
			t.Fatalf("created %d of the last 1 slot: %v", created, codes)
		}
		if u := q.used(); u != 3 {
			t.Fatalf("usage: %d used, want 3", u)
		}
	})
}
