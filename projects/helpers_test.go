package projects_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/humatest"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/keelson-dev/keelson/platform/events"
	"github.com/keelson-dev/keelson/platform/platformtest"
	"github.com/keelson-dev/keelson/platform/secret"
	"github.com/keelson-dev/keelson/projects"
	"github.com/uptrace/bun"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// Users of the test authenticator: the token is the user's name.
var users = map[string]string{"alice": platform.NewID(), "bob": platform.NewID(),
	// The list cache's Postgres tests: notifications reach every schema.
	"carol": platform.NewID(), "dave": platform.NewID(),
	"root": platform.NewID()} // the platform ADMIN

// tokenAuth stands in for the auth module (built elsewhere; the reference
// server's e2e tests use the real one).
type tokenAuth struct{}

func (tokenAuth) Authenticate(_ context.Context, tok string) (platform.Principal, error) {
	if id, ok := users[tok]; ok {
		role := platform.RoleUser
		if tok == "root" {
			role = platform.RoleAdmin
		}
		return platform.Principal{UserID: id, Email: tok + "@example.com", Role: role}, nil
	}
	return platform.Principal{}, platform.ErrUnauthorized
}

func as(user string) string { return "Authorization: Bearer " + user }

// planBook stands in for the plans module: plans by name and account plans.
type planBook struct {
	mu      sync.Mutex
	plans   map[string]*projects.Plan
	account map[string]string // user id -> plan name; default "free"
	borrows map[string]string // team id -> the owner whose plan it borrows (none: its own plan)
}

func newPlanBook() *planBook {
	return &planBook{account: map[string]string{}, borrows: map[string]string{}, plans: map[string]*projects.Plan{
		"free":    {Name: "free", Tier: "FREE", TierRank: 0, MaxProjects: 3, MaxDeployments: 100, MaxMemoryMi: 512, MaxCpuM: 500, MaxStorageGi: 1, BuildTimeoutMins: 10, Public: true},
		"starter": {Name: "starter", Tier: "STARTER", TierRank: 1, MaxProjects: 10, MaxDeployments: 500, MaxMemoryMi: 1024, MaxCpuM: 1000, MaxStorageGi: 5, BuildTimeoutMins: 20, Public: true},
		// An operator's plan for chosen accounts: not public.
		"partner": {Name: "partner", Tier: "FREE", TierRank: 0, MaxProjects: 3, MaxDeployments: 100, MaxMemoryMi: 2048, MaxCpuM: 500, MaxStorageGi: 1, BuildTimeoutMins: 10},
		"pro":     {Name: "pro", Tier: "PRO", TierRank: 2, MaxProjects: 50, MaxDeployments: 2000, MaxMemoryMi: 4096, MaxCpuM: 2000, MaxStorageGi: 20, BuildTimeoutMins: 30, PriorityBuilds: true, Public: true},
	}}
}

func (b *planBook) PlanByName(_ context.Context, name string) (*projects.Plan, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p, ok := b.plans[name]
	if !ok {
		return nil, fmt.Errorf("plan %q: %w", name, platform.ErrNotFound)
	}
	cp := *p
	return &cp, nil
}

func (b *planBook) AccountPlan(ctx context.Context, userID string) (*projects.Plan, error) {
	b.mu.Lock()
	name := b.account[userID]
	b.mu.Unlock()
	if name == "" {
		name = "free"
	}
	return b.PlanByName(ctx, name)
}

// QuotaPlan: a team in borrows counts against its owner's account plan.
func (b *planBook) QuotaPlan(ctx context.Context, accountID string) (*projects.Plan, string, error) {
	b.mu.Lock()
	if owner, ok := b.borrows[accountID]; ok {
		accountID = owner
	}
	b.mu.Unlock()
	p, err := b.AccountPlan(ctx, accountID)
	return p, accountID, err
}

// borrow makes team borrow owner's account plan ("": a plan of its own).
func (b *planBook) borrow(team, owner string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if owner == "" {
		delete(b.borrows, team)
		return
	}
	b.borrows[team] = owner
}

func (b *planBook) setAccount(userID, plan string) {
	b.mu.Lock()
	b.account[userID] = plan
	b.mu.Unlock()
}

// recordingTeardown stands in for the deployments module's teardown: it
// records calls, can fail the next N calls, and can hold calls until released.
type recordingTeardown struct {
	mu       sync.Mutex
	calls    []string
	failNext int
	hold     chan struct{} // when set, calls wait for it to close (or ctx)
	entered  chan string
}

func newTeardown() *recordingTeardown { return &recordingTeardown{entered: make(chan string, 64)} }

func (r *recordingTeardown) TeardownProject(ctx context.Context, id string) error {
	r.mu.Lock()
	r.calls = append(r.calls, id)
	fail := r.failNext > 0
	if fail {
		r.failNext--
	}
	hold := r.hold
	r.mu.Unlock()
	r.entered <- id
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if fail {
		return errors.New("stop app: process table busy")
	}
	return nil
}

func (r *recordingTeardown) setHold(c chan struct{}) { r.mu.Lock(); r.hold = c; r.mu.Unlock() }
func (r *recordingTeardown) setFail(n int)           { r.mu.Lock(); r.failNext = n; r.mu.Unlock() }
func (r *recordingTeardown) holdCh() chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hold
}

func (r *recordingTeardown) callsFor(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.calls {
		if c == id {
			n++
		}
	}
	return n
}

type counter map[string]int

func (c counter) DeploymentsThisMonth(context.Context, string) (map[string]int, error) { return c, nil }

// logBytes answers each owner's stored log bytes against a budget of 1 MiB.
type logBytes map[string]int64

func (l logBytes) LogUsage(_ context.Context, owner string) (int64, int64, error) {
	return l[owner], 1 << 20, nil
}

type env struct {
	t        *testing.T
	bdb      *bun.DB
	svc      *projects.Service
	api      humatest.TestAPI
	plans    *planBook
	teardown *recordingTeardown
	logs     *platformtest.SyncBuffer
	sealer   *secret.Sealer
}

type opts struct {
	allowLocal  bool
	regions     []string
	deployments projects.DeploymentCounter
	logs        projects.LogCounter
	listCache   int64                  // Deps.ListCacheBytes (0: the default, on)
	planChannel string                 // Deps.PlanChannel
	reserved    []string               // Deps.ReservedSlugs
	redirect    func(projectID string) // Events.HTTPSRedirectChanged
	hosts       []string               // Deps.HostExists knows these
	teams       projects.Teams         // Deps.Teams
}

func sets() []db.MigrationSet { return []db.MigrationSet{projects.Migrations()} }

func setup(t *testing.T, bdb *bun.DB, o opts) *env {
	t.Helper()
	_, api := humatest.New(t, platform.APIConfig("test", "1"))
	logs := &platformtest.SyncBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	// The request logger, as httpx.Middleware provides it in the server.
	api.UseMiddleware(func(ctx huma.Context, next func(huma.Context)) {
		next(huma.WithContext(ctx, platform.WithLogger(ctx.Context(), log)))
	})
	sealer, err := secret.New("test-key-0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, bdb: bdb, api: api, plans: newPlanBook(), teardown: newTeardown(), logs: logs, sealer: sealer}
	e.svc, err = projects.New(projects.Deps{
		DB: bdb, Auth: tokenAuth{}, Sealer: sealer, Plans: e.plans,
		Deployments: o.deployments, Logs: o.logs, Teams: o.teams, Regions: o.regions, AllowLocalRepos: o.allowLocal, Logger: log,
		ListCacheBytes: o.listCache, PlanChannel: o.planChannel, ReservedSlugs: o.reserved,
		CheckHost: func(_ context.Context, id string) error {
			if slices.Contains(o.hosts, id) {
				return nil
			}
			return platform.Invalidf("host %q is not registered", id)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	// Subscribed as deployments and the ingress are in the server.
	e.svc.Events().Deleted.Subscribe(func(ctx context.Context, ev projects.Deleted) error {
		return e.teardown.TeardownProject(ctx, ev.ProjectID)
	})
	if o.redirect != nil {
		e.svc.Events().HTTPSRedirectChanged.Subscribe(events.Notify(func(ev projects.HTTPSRedirectChanged) { o.redirect(ev.ProjectID) }))
	}
	if err := e.svc.Register(api); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.svc.Close(context.Background()) })
	return e
}

func validCreate(name string) map[string]any {
	return map[string]any{"name": name, "repoUrl": "https://github.com/acme/" + strings.NewReplacer(" ", "-", "!", "").Replace(name), "framework": "node", "port": 3000}
}

func validSettings() map[string]any {
	return map[string]any{"region": "local", "planName": "free", "envVars": []any{}}
}

func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}

func (e *env) create(user string, body map[string]any) projects.Project {
	e.t.Helper()
	resp := e.api.Post("/projects", as(user), body)
	if resp.Code != 201 {
		e.t.Fatalf("create: %d %s", resp.Code, resp.Body)
	}
	return decode[projects.Project](e.t, resp.Body.Bytes())
}

func (e *env) list(user string) []projects.Project {
	e.t.Helper()
	resp := e.api.Get("/projects?limit=100", as(user))
	if resp.Code != 200 {
		e.t.Fatalf("list: %d %s", resp.Code, resp.Body)
	}
	return decode[[]projects.Project](e.t, resp.Body.Bytes())
}

func (e *env) deleteStatus(user, id string) projects.DeleteStatus {
	e.t.Helper()
	resp := e.api.Get("/projects/"+id+"/delete-status", as(user))
	if resp.Code != 200 {
		e.t.Fatalf("delete-status: %d %s", resp.Code, resp.Body)
	}
	return decode[projects.DeleteStatus](e.t, resp.Body.Bytes())
}

// waitStatus polls delete-status until it answers want, or fails at the deadline.
func (e *env) waitStatus(user, id, want string) projects.DeleteStatus {
	e.t.Helper()
	var st projects.DeleteStatus
	platformtest.Eventually(e.t, 20*time.Second, "project "+id+" to become "+want,
		func() bool { st = e.deleteStatus(user, id); return st.Status == want })
	return st
}

// rawRow reads a project row as stored, for at-rest checks.
func rawRow(t *testing.T, bdb *bun.DB, id string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := bdb.NewSelect().Table("projects").Where("id = ?", id).Scan(context.Background(), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func countRows(t *testing.T, bdb *bun.DB) int {
	t.Helper()
	n, err := bdb.NewSelect().Table("projects").Count(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return int(n)
}

func mustNotContain(t *testing.T, where, s string, secrets ...string) {
	t.Helper()
	for _, sec := range secrets {
		if strings.Contains(s, sec) {
			t.Errorf("%s contains a secret (%q): %s", where, sec, s)
		}
	}
}
