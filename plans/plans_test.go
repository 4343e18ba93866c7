package plans_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/danielgtaylor/huma/v2/humatest"
	"github.com/keelson-dev/keelson/plans"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/uptrace/bun"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// tokenAuth admits "admin" (ADMIN) and "user" (USER). The real authenticator
// is the auth module's; the reference server's e2e tests use it.
type tokenAuth struct{}

var adminID, userID = platform.NewID(), platform.NewID()

func (tokenAuth) Authenticate(_ context.Context, tok string) (platform.Principal, error) {
	switch tok {
	case "admin":
		return platform.Principal{UserID: adminID, Role: platform.RoleAdmin}, nil
	case "user":
		return platform.Principal{UserID: userID, Role: platform.RoleUser}, nil
	}
	return platform.Principal{}, platform.ErrUnauthorized
}

const (
	asAdmin = "Authorization: Bearer admin"
	asUser  = "Authorization: Bearer user"
)

// inUse is the projects side of plans.UsageChecker for these tests: the set
// of plan names "projects" use.
type inUse struct{ names atomic.Value }

func (u *inUse) set(names ...string) { u.names.Store(names) }
func (u *inUse) PlanInUse(_ context.Context, name string) (bool, error) {
	ns, _ := u.names.Load().([]string)
	for _, n := range ns {
		if n == name {
			return true, nil
		}
	}
	return false, nil
}

type env struct {
	svc   *plans.Service
	api   humatest.TestAPI
	usage *inUse
	bdb   *bun.DB
}

func setup(t *testing.T, bdb *bun.DB) *env {
	t.Helper()
	_, api := humatest.New(t, platform.APIConfig("test", "1"))
	u := &inUse{}
	svc, err := plans.New(plans.Deps{DB: bdb, Auth: tokenAuth{}, Usage: u})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Register(api); err != nil {
		t.Fatal(err)
	}
	return &env{svc: svc, api: api, usage: u, bdb: bdb}
}

func sets() []db.MigrationSet { return []db.MigrationSet{plans.Migrations()} }

func validPlan(name string) map[string]any {
	return map[string]any{
		"name": name, "tier": "STARTER", "maxProjects": 5, "maxDeployments": 50, "maxMemoryMi": 256,
		"maxCpuM": 250, "maxStorageGi": 1, "maxBandwidthGb": 5, "buildTimeoutMins": 5,
	}
}

func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}

func listPlans(t *testing.T, e *env) []plans.Plan {
	t.Helper()
	resp := e.api.Get("/plans")
	if resp.Code != 200 {
		t.Fatalf("GET /plans: %d %s", resp.Code, resp.Body)
	}
	return decode[[]plans.Plan](t, resp.Body.Bytes())
}

func TestSeedIsIdempotent(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets(), func(t *testing.T, bdb *bun.DB) {
		e := setup(t, bdb)
		ctx := context.Background()
		seeded, err := e.svc.Seed(ctx)
		if err != nil || !seeded {
			t.Fatalf("first seed: %v %v", seeded, err)
		}
		seeded, err = e.svc.Seed(ctx)
		if err != nil || seeded {
			t.Fatalf("second seed: seeded=%v err=%v", seeded, err)
		}
		ps := listPlans(t, e)
		if len(ps) != 4 {
			t.Fatalf("want 4 plans, got %d", len(ps))
		}
		for i, tier := range plans.Tiers() {
			if ps[i].Tier != tier {
				t.Errorf("plan %d tier %s, want %s", i, ps[i].Tier, tier)
			}
		}
		free := ps[0]
		if free.Name != "free" || free.MaxProjects != 3 || free.MaxDeployments != 100 || free.MaxMemoryMi != 512 ||
			free.MaxCpuM != 500 || free.MaxStorageGi != 1 || free.MaxBandwidthGb != 10 || free.BuildTimeoutMins != 10 {
			t.Errorf("free plan: %+v", free)
		}
		// An admin's changes survive a restart's seeding: delete one, seed again.
		if resp := e.api.Delete("/plans/"+ps[3].ID, asAdmin); resp.Code != 200 {
			t.Fatalf("delete: %d %s", resp.Code, resp.Body)
		}
		if seeded, err := e.svc.Seed(ctx); err != nil || seeded {
			t.Fatalf("seed after edit: %v %v", seeded, err)
		}
		if n := len(listPlans(t, e)); n != 3 {
			t.Fatalf("seed recreated plans: %d", n)
		}
	})
}

func TestSeedSkipsWhenAdminCreatedPlans(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets(), func(t *testing.T, bdb *bun.DB) {
		e := setup(t, bdb)
		if resp := e.api.Post("/plans", asAdmin, validPlan("custom")); resp.Code != 201 {
			t.Fatalf("create: %d %s", resp.Code, resp.Body)
		}
		if seeded, err := e.svc.Seed(context.Background()); err != nil || seeded {
			t.Fatalf("seed: %v %v", seeded, err)
		}
		if ps := listPlans(t, e); len(ps) != 1 || ps[0].Name != "custom" {
			t.Fatalf("plans: %+v", ps)
		}
	})
}

func TestPlanCRUDNeedsAdmin(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets(), func(t *testing.T, bdb *bun.DB) {
		e := setup(t, bdb)
		body := validPlan("team")

		for _, c := range []struct {
			auth string
			want int
		}{{"", 401}, {"Authorization: Bearer nope", 401}, {asUser, 403}} {
			var args []any
			if c.auth != "" {
				args = append(args, c.auth)
			}
			if resp := e.api.Post("/plans", append(args, body)...); resp.Code != c.want {
				t.Errorf("POST as %q: %d %s", c.auth, resp.Code, resp.Body)
			}
		}
		if ps := listPlans(t, e); len(ps) != 0 {
			t.Fatalf("refused creates stored plans: %+v", ps)
		}

		resp := e.api.Post("/plans", asAdmin, body)
		if resp.Code != 201 {
			t.Fatalf("POST as admin: %d %s", resp.Code, resp.Body)
		}
		p := decode[plans.Plan](t, resp.Body.Bytes())
		if p.Name != "team" || p.Tier != plans.TierStarter || p.MaxProjects != 5 || p.CustomDomains || !platform.ValidID(p.ID) {
			t.Fatalf("created plan: %+v", p)
		}

		// Reads are public.
		if resp := e.api.Get("/plans/" + p.ID); resp.Code != 200 || decode[plans.Plan](t, resp.Body.Bytes()).Name != "team" {
			t.Fatalf("GET plan: %d %s", resp.Code, resp.Body)
		}
		if resp := e.api.Get("/plans/" + platform.NewID()); resp.Code != 404 {
			t.Fatalf("GET absent plan: %d", resp.Code)
		}
		if resp := e.api.Get("/plans/not-a-uuid"); resp.Code != 404 {
			t.Fatalf("GET bad id: %d", resp.Code)
		}

		// Update: user refused, admin partial update keeps the other fields.
		if resp := e.api.Patch("/plans/"+p.ID, asUser, map[string]any{"maxProjects": 9}); resp.Code != 403 {
			t.Fatalf("PATCH as user: %d", resp.Code)
		}
		resp = e.api.Patch("/plans/"+p.ID, asAdmin, map[string]any{"maxProjects": 9, "priorityBuilds": true})
		if resp.Code != 200 {
			t.Fatalf("PATCH as admin: %d %s", resp.Code, resp.Body)
		}
		up := decode[plans.Plan](t, resp.Body.Bytes())
		if up.MaxProjects != 9 || !up.PriorityBuilds || up.MaxDeployments != 50 || up.Name != "team" {
			t.Fatalf("patched: %+v", up)
		}

		// Delete: user refused; admin answers the deleted plan; then 404.
		if resp := e.api.Delete("/plans/"+p.ID, asUser); resp.Code != 403 {
			t.Fatalf("DELETE as user: %d", resp.Code)
		}
		resp = e.api.Delete("/plans/"+p.ID, asAdmin)
		if resp.Code != 200 || decode[plans.Plan](t, resp.Body.Bytes()).ID != p.ID {
			t.Fatalf("DELETE as admin: %d %s", resp.Code, resp.Body)
		}
		if resp := e.api.Get("/plans/" + p.ID); resp.Code != 404 {
			t.Fatalf("GET deleted: %d", resp.Code)
		}
	})
}

func TestPlanValidationChangesNothing(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets(), func(t *testing.T, bdb *bun.DB) {
		e := setup(t, bdb)
		resp := e.api.Post("/plans", asAdmin, validPlan("base"))
		if resp.Code != 201 {
			t.Fatalf("create: %d %s", resp.Code, resp.Body)
		}
		base := decode[plans.Plan](t, resp.Body.Bytes())

		without := func(k string) map[string]any { b := validPlan("x"); delete(b, k); return b }
		with := func(k string, v any) map[string]any { b := validPlan("x"); b[k] = v; return b }
		cases := []struct {
			name  string
			body  map[string]any
			field string
		}{
			{"missing name", without("name"), "name"},
			{"missing tier", without("tier"), "tier"},
			{"missing maxProjects", without("maxProjects"), "maxProjects"},
			{"missing buildTimeoutMins", without("buildTimeoutMins"), "buildTimeoutMins"},
			{"negative maxDeployments", with("maxDeployments", -1), "maxDeployments"},
			{"negative maxCpuM", with("maxCpuM", -5), "maxCpuM"},
			{"bad tier", with("tier", "GOLD"), "tier"},
			{"non-integer", with("maxMemoryMi", 1.5), "maxMemoryMi"},
			{"empty name", with("name", ""), "name"},
			{"unknown field", with("price", 10), "price"},
		}
		for _, c := range cases {
			resp := e.api.Post("/plans", asAdmin, c.body)
			if resp.Code != 400 || !strings.Contains(resp.Body.String(), c.field) {
				t.Errorf("%s: %d %s", c.name, resp.Code, resp.Body)
			}
		}
		// A duplicate name is a conflict.
		if resp := e.api.Post("/plans", asAdmin, validPlan("base")); resp.Code != 409 {
			t.Errorf("duplicate name: %d %s", resp.Code, resp.Body)
		}
		// Bad patches change nothing either.
		for _, body := range []map[string]any{{"maxProjects": -1}, {"tier": "GOLD"}, {"name": ""}} {
			if resp := e.api.Patch("/plans/"+base.ID, asAdmin, body); resp.Code != 400 {
				t.Errorf("patch %v: %d %s", body, resp.Code, resp.Body)
			}
		}
		ps := listPlans(t, e)
		if len(ps) != 1 || ps[0] != base {
			t.Fatalf("plans changed by rejected requests: %+v", ps)
		}
	})
}

func TestPlanInUseCannotBeDeletedOrRenamed(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets(), func(t *testing.T, bdb *bun.DB) {
		e := setup(t, bdb)
		ctx := context.Background()
		if _, err := e.svc.Seed(ctx); err != nil {
			t.Fatal(err)
		}
		pro, err := e.svc.PlanByName(ctx, "pro")
		if err != nil {
			t.Fatal(err)
		}
		e.usage.set("pro")
		resp := e.api.Delete("/plans/"+pro.ID, asAdmin)
		if resp.Code != 409 || !strings.Contains(resp.Body.String(), "in use") {
			t.Fatalf("delete in use: %d %s", resp.Code, resp.Body)
		}
		if resp := e.api.Patch("/plans/"+pro.ID, asAdmin, map[string]any{"name": "pro2"}); resp.Code != 409 {
			t.Fatalf("rename in use: %d %s", resp.Code, resp.Body)
		}
		// Changing limits of a plan in use is fine.
		if resp := e.api.Patch("/plans/"+pro.ID, asAdmin, map[string]any{"maxProjects": 60}); resp.Code != 200 {
			t.Fatalf("patch limits: %d %s", resp.Code, resp.Body)
		}
		if _, err := e.svc.PlanByName(ctx, "pro"); err != nil {
			t.Fatalf("plan gone after refused delete: %v", err)
		}
		e.usage.set()
		if resp := e.api.Delete("/plans/"+pro.ID, asAdmin); resp.Code != 200 {
			t.Fatalf("delete unused: %d %s", resp.Code, resp.Body)
		}
	})
}

func TestAccountPlans(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets(), func(t *testing.T, bdb *bun.DB) {
		e := setup(t, bdb)
		ctx := context.Background()
		if _, err := e.svc.AccountPlan(ctx, userID); !isStatus(err, 503) {
			t.Fatalf("account plan without plans: %v", err)
		}
		if _, err := e.svc.Seed(ctx); err != nil {
			t.Fatal(err)
		}
		p, err := e.svc.AccountPlan(ctx, userID)
		if err != nil || p.Name != "free" || p.Tier != plans.TierFree {
			t.Fatalf("default account plan: %+v %v", p, err)
		}
		starter, _ := e.svc.PlanByName(ctx, "starter")
		free, _ := e.svc.PlanByName(ctx, "free")

		if resp := e.api.Put("/plans/"+starter.ID+"/accounts/"+userID, asUser); resp.Code != 403 {
			t.Fatalf("assign as user: %d", resp.Code)
		}
		if resp := e.api.Put("/plans/"+starter.ID+"/accounts/"+userID, asAdmin); resp.Code != 204 {
			t.Fatalf("assign: %d %s", resp.Code, resp.Body)
		}
		if p, err := e.svc.AccountPlan(ctx, userID); err != nil || p.Name != "starter" {
			t.Fatalf("assigned account plan: %+v %v", p, err)
		}
		if p, err := e.svc.AccountPlan(ctx, adminID); err != nil || p.Name != "free" {
			t.Fatalf("other user's plan: %+v %v", p, err)
		}
		if resp := e.api.Put("/plans/"+platform.NewID()+"/accounts/"+userID, asAdmin); resp.Code != 404 {
			t.Fatalf("assign absent plan: %d", resp.Code)
		}
		// An account plan cannot be deleted; renaming it is fine (assignments use ids).
		if resp := e.api.Delete("/plans/"+starter.ID, asAdmin); resp.Code != 409 {
			t.Fatalf("delete account plan: %d %s", resp.Code, resp.Body)
		}
		if resp := e.api.Patch("/plans/"+starter.ID, asAdmin, map[string]any{"name": "starter-2024"}); resp.Code != 200 {
			t.Fatalf("rename account plan: %d %s", resp.Code, resp.Body)
		}
		if p, _ := e.svc.AccountPlan(ctx, userID); p.Name != "starter-2024" {
			t.Fatalf("after rename: %+v", p)
		}
		// Re-assigning replaces.
		if resp := e.api.Put("/plans/"+free.ID+"/accounts/"+userID, asAdmin); resp.Code != 204 {
			t.Fatalf("reassign: %d", resp.Code)
		}
		if p, _ := e.svc.AccountPlan(ctx, userID); p.Name != "free" {
			t.Fatalf("after reassign: %+v", p)
		}
		// The last FREE-tier plan is the default: it cannot go or change tier.
		if resp := e.api.Put("/plans/"+starter.ID+"/accounts/"+userID, asAdmin); resp.Code != 204 {
			t.Fatal(resp.Code)
		}
		if resp := e.api.Delete("/plans/"+free.ID, asAdmin); resp.Code != 409 || !strings.Contains(resp.Body.String(), "FREE") {
			t.Fatalf("delete last free: %d %s", resp.Code, resp.Body)
		}
		if resp := e.api.Patch("/plans/"+free.ID, asAdmin, map[string]any{"tier": "PRO"}); resp.Code != 409 {
			t.Fatalf("retier last free: %d %s", resp.Code, resp.Body)
		}
		// With a second FREE plan the first may go; the default moves to the next.
		b := validPlan("free-2")
		b["tier"] = "FREE"
		if resp := e.api.Post("/plans", asAdmin, b); resp.Code != 201 {
			t.Fatalf("create free-2: %d %s", resp.Code, resp.Body)
		}
		if resp := e.api.Delete("/plans/"+free.ID, asAdmin); resp.Code != 200 {
			t.Fatalf("delete free: %d %s", resp.Code, resp.Body)
		}
		if p, _ := e.svc.AccountPlan(ctx, adminID); p.Name != "free-2" {
			t.Fatalf("default after delete: %+v", p)
		}
		// An assignment whose plan row is gone (written behind the service's
		// back) falls back to the default plan, as it did with two queries.
		if _, err := bdb.ExecContext(ctx, "INSERT INTO plan_assignments (user_id, plan_id, assigned_at) VALUES (?, ?, ?)",
			adminID, platform.NewID(), time.Now().UTC()); err != nil {
			t.Fatal(err)
		}
		if p, err := e.svc.AccountPlan(ctx, adminID); err != nil || p.Name != "free-2" {
			t.Fatalf("dangling assignment: %+v %v", p, err)
		}
		if p, err := e.svc.AccountPlan(ctx, userID); err != nil || p.Name != "starter-2024" {
			t.Fatalf("assigned after default moved: %+v %v", p, err)
		}
	})
}

func isStatus(err error, status int) bool {
	var pe *platform.Error
	return errors.As(err, &pe) && pe.Status == status
}

func TestOpenAPIShowsConstraints(t *testing.T) {
	t.Parallel()
	_, api := humatest.New(t, platform.APIConfig("test", "1"))
	svc, err := plans.New(plans.Deps{DB: dbtest.SQLite(t, plans.Migrations()), Auth: tokenAuth{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Register(api); err != nil {
		t.Fatal(err)
	}
	oa := api.OpenAPI()
	op := oa.Paths["/plans"].Post
	if op == nil || len(op.Security) == 0 {
		t.Fatal("POST /plans missing or without security")
	}
	schema := oa.Components.Schemas.SchemaFromRef(op.RequestBody.Content["application/json"].Schema.Ref)
	for _, f := range []string{"name", "tier", "maxProjects", "maxDeployments", "maxMemoryMi", "maxCpuM",
		"maxStorageGi", "maxBandwidthGb", "buildTimeoutMins"} {
		if !contains(schema.Required, f) {
			t.Errorf("%s not required in the OpenAPI document", f)
		}
		if f != "name" && f != "tier" && (schema.Properties[f].Minimum == nil || *schema.Properties[f].Minimum != 0) {
			t.Errorf("%s has no minimum 0", f)
		}
	}
	if len(schema.Properties["tier"].Enum) != 4 {
		t.Errorf("tier enum: %v", schema.Properties["tier"].Enum)
	}
	if oa.Paths["/plans"].Get.Security != nil {
		t.Error("GET /plans should be public")
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

// Public plans (issue 23): a plan an admin creates serves only the accounts it
// is assigned to unless marked public; the seeded plans are public, also on a
// database that had them before the flag existed.
func TestPublicPlans(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets(), func(t *testing.T, bdb *bun.DB) {
		e := setup(t, bdb)
		ctx := context.Background()
		if _, err := e.svc.Seed(ctx); err != nil {
			t.Fatal(err)
		}
		for _, p := range listPlans(t, e) {
			if !p.Public {
				t.Fatalf("seeded plan %s is not public", p.Name)
			}
		}
		resp := e.api.Post("/plans", asAdmin, validPlan("partner"))
		special := decode[plans.Plan](t, resp.Body.Bytes())
		if resp.Code != 201 || special.Public {
			t.Fatalf("a new plan is public unless said: %d %s", resp.Code, resp.Body)
		}
		resp = e.api.Patch("/plans/"+special.ID, asAdmin, map[string]any{"public": true})
		if resp.Code != 200 || !decode[plans.Plan](t, resp.Body.Bytes()).Public {
			t.Fatalf("PATCH public: %d %s", resp.Code, resp.Body)
		}
		if p, err := e.svc.PlanByName(ctx, "partner"); err != nil || !p.Public {
			t.Fatalf("PlanByName: %+v %v", p, err)
		}

		// A database from before the flag: the column and the migration's
		// record gone, as they were; migrating again marks the seed names
		// public and leaves the operator's plan assigned-only.
		if _, err := bdb.ExecContext(ctx, "ALTER TABLE plans DROP COLUMN public"); err != nil {
			t.Fatal(err)
		}
		if _, err := bdb.ExecContext(ctx, "DELETE FROM keelson_migrations WHERE module = 'plans' AND id = '0003_public'"); err != nil {
			t.Fatal(err)
		}
		if err := db.Migrate(ctx, bdb, plans.Migrations()); err != nil {
			t.Fatal(err)
		}
		for _, p := range listPlans(t, e) {
			if p.Public != (p.Name != "partner") {
				t.Fatalf("after the migration %s public=%v", p.Name, p.Public)
			}
		}
	})
}
