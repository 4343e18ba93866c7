package plans

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

type planRow struct {
	bun.BaseModel `bun:"table:plans"`

	ID               string    `bun:"id,pk,type:varchar(36)"`
	Name             string    `bun:"name,notnull,type:varchar(64)"`
	Tier             string    `bun:"tier,notnull,type:varchar(16)"`
	MaxProjects      int       `bun:"max_projects,notnull"`
	MaxDeployments   int       `bun:"max_deployments,notnull"`
	MaxMemoryMi      int       `bun:"max_memory_mi,notnull"`
	MaxCpuM          int       `bun:"max_cpu_m,notnull"`
	MaxStorageGi     int       `bun:"max_storage_gi,notnull"`
	MaxBandwidthGb   int       `bun:"max_bandwidth_gb,notnull"`
	BuildTimeoutMins int       `bun:"build_timeout_mins,notnull"`
	CustomDomains    bool      `bun:"custom_domains,notnull"`
	TeamMembers      bool      `bun:"team_members,notnull"`
	PriorityBuilds   bool      `bun:"priority_builds,notnull"`
	Public           bool      `bun:"public,notnull,default:false"`
	CreatedAt        time.Time `bun:"created_at,notnull"`
	UpdatedAt        time.Time `bun:"updated_at,notnull"`
}

// assignmentRow is a user's account plan. Users without a row are on the
// default (FREE-tier) plan. It refers to the plan by id so renames are safe.
type assignmentRow struct {
	bun.BaseModel `bun:"table:plan_assignments"`

	UserID     string    `bun:"user_id,pk,type:varchar(36)"`
	PlanID     string    `bun:"plan_id,notnull,type:varchar(36)"`
	AssignedAt time.Time `bun:"assigned_at,notnull"`
}

// Migrations are the plans tables, for the host's db.Migrate.
func Migrations() db.MigrationSet {
	return db.MigrationSet{Module: "plans", Migrations: []db.Migration{{
		ID: "0001_init",
		Up: db.Steps(
			db.CreateTables((*planRow)(nil), (*assignmentRow)(nil)),
			db.CreateIndex((*planRow)(nil), "plans_name_key", true, "name"),
			db.CreateIndex((*planRow)(nil), "plans_tier_created_idx", false, "tier", "created_at", "id"),
			db.CreateIndex((*assignmentRow)(nil), "plan_assignments_plan_idx", false, "plan_id"),
		),
	}, {
		// Postgres: tell every replica's caches of account plans (ChangeChannel).
		ID: "0002_change_notify",
		Up: changeTriggers,
	}, {
		// Plans any account may choose for a project; others only serve the
		// accounts an admin assigns them to. Plans with the seed names stay
		// choosable; an operator's own plans become assigned-only.
		ID: "0003_public",
		Up: func(ctx context.Context, idb bun.IDB) error {
			if err := db.AddColumn("plans", "public", "BOOLEAN NOT NULL DEFAULT FALSE")(ctx, idb); err != nil {
				return err
			}
			var names []string
			for _, p := range SeedPlans() {
				names = append(names, p.Name)
			}
			_, err := idb.NewUpdate().Model((*planRow)(nil)).Set("public = ?", true).Where("name IN (?)", bun.In(names)).Exec(ctx)
			return err
		},
	}}}
}

// ChangeChannel is the Postgres channel on which the plans tables' triggers
// name a user whose account plan assignment changed, or "*" after any write
// to the plans themselves, from any process.
const ChangeChannel = "keelson_plans_changed"

// changeTriggers (Postgres only) notify ChangeChannel of every write to
// plan_assignments (the user) and plans ("*").
func changeTriggers(ctx context.Context, idb bun.IDB) error {
	return db.ExecPostgres(ctx, idb, db.NotifyFunction("keelson_plan_assignment_notify", ChangeChannel, "user_id")+
		db.NotifyTrigger("keelson_plan_assignment_change", "plan_assignments", "keelson_plan_assignment_notify")+`
CREATE OR REPLACE FUNCTION keelson_plans_notify() RETURNS trigger AS $$
BEGIN
	PERFORM pg_notify('`+ChangeChannel+`', '*');
	RETURN NULL;
END $$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS keelson_plans_change ON plans;
CREATE TRIGGER keelson_plans_change AFTER INSERT OR UPDATE OR DELETE ON plans FOR EACH STATEMENT
	EXECUTE FUNCTION keelson_plans_notify();`)
}

func (r *planRow) toPlan() *Plan {
	return &Plan{
		ID: r.ID, Name: r.Name, Tier: Tier(r.Tier),
		MaxProjects: r.MaxProjects, MaxDeployments: r.MaxDeployments, MaxMemoryMi: r.MaxMemoryMi,
		MaxCpuM: r.MaxCpuM, MaxStorageGi: r.MaxStorageGi, MaxBandwidthGb: r.MaxBandwidthGb,
		BuildTimeoutMins: r.BuildTimeoutMins, CustomDomains: r.CustomDomains, TeamMembers: r.TeamMembers,
		PriorityBuilds: r.PriorityBuilds, Public: r.Public, CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(),
	}
}

func planGet(ctx context.Context, idb bun.IDB, id string) (*planRow, error) {
	if !platform.ValidID(id) {
		return nil, platform.ErrNotFound
	}
	r := new(planRow)
	if err := idb.NewSelect().Model(r).Where("id = ?", id).Scan(ctx); err != nil {
		return nil, translate(err)
	}
	return r, nil
}

func planGetByName(ctx context.Context, idb bun.IDB, name string) (*planRow, error) {
	r := new(planRow)
	if err := idb.NewSelect().Model(r).Where("name = ?", name).Scan(ctx); err != nil {
		return nil, translate(err)
	}
	return r, nil
}

// accountPlanStmt is AccountPlan's statement, prepared once: every
// GET /projects of a project that follows its owner's plan reads it. One
// statement, one round trip: the plan of the user's assignment (when that plan
// still exists), else the default plan (the oldest FREE-tier plan), both
// chosen by primary-key lookup of a scalar subquery.
type accountPlanStmt struct {
	once sync.Once
	stmt *db.Prepared
}

func (a *accountPlanStmt) init(idb bun.IDB) {
	a.once.Do(func() {
		cols := "p.id, p.name, p.tier, p.max_projects, p.max_deployments, p.max_memory_mi, p.max_cpu_m, " +
			"p.max_storage_gi, p.max_bandwidth_gb, p.build_timeout_mins, p.custom_domains, p.team_members, " +
			"p.priority_builds, p.public, " + db.TimeColumn(idb, "p.created_at") + ", " + db.TimeColumn(idb, "p.updated_at")
		a.stmt = db.NewPrepared("SELECT " + cols + " FROM plans AS p WHERE p.id = COALESCE(" +
			"(SELECT pa.plan_id FROM plan_assignments AS pa JOIN plans AS ap ON ap.id = pa.plan_id WHERE pa.user_id = ?), " +
			"(SELECT d.id FROM plans AS d WHERE d.tier = '" + string(TierFree) + "' ORDER BY d.created_at ASC, d.id ASC LIMIT 1))")
	})
}

// scanPlan reads one row of accountPlanStmt's columns.
func scanPlan(row interface{ Scan(...any) error }) (*planRow, error) {
	r := new(planRow)
	var n [7]int64
	err := row.Scan(&r.ID, &r.Name, &r.Tier, &n[0], &n[1], &n[2], &n[3], &n[4], &n[5], &n[6],
		&r.CustomDomains, &r.TeamMembers, &r.PriorityBuilds, &r.Public, db.ScanTime(&r.CreatedAt), db.ScanTime(&r.UpdatedAt))
	if err != nil {
		return nil, err
	}
	r.MaxProjects, r.MaxDeployments, r.MaxMemoryMi, r.MaxCpuM = int(n[0]), int(n[1]), int(n[2]), int(n[3])
	r.MaxStorageGi, r.MaxBandwidthGb, r.BuildTimeoutMins = int(n[4]), int(n[5]), int(n[6])
	return r, nil
}

func countTier(ctx context.Context, idb bun.IDB, tier Tier) (int, error) {
	n, err := idb.NewSelect().Model((*planRow)(nil)).Where("tier = ?", string(tier)).Count(ctx)
	return int(n), translate(err)
}

func countAssignments(ctx context.Context, idb bun.IDB, planID string) (int, error) {
	n, err := idb.NewSelect().Model((*assignmentRow)(nil)).Where("plan_id = ?", planID).Count(ctx)
	return int(n), translate(err)
}

// lockPlans serialises plan writes that check an invariant across rows (the
// last FREE plan, seeding). SQLite's single writer already serialises them.
func lockPlans(ctx context.Context, tx bun.Tx) error { return db.LockTx(ctx, tx, "keelson:plans") }

func isConflict(err error) bool { return errors.Is(err, platform.ErrConflict) }

// isNotFound reports a missing row.
func isNotFound(err error) bool { return errors.Is(err, platform.ErrNotFound) }

func wrap(op string, err error) error { return platform.Wrap("plans: "+op, err) }
