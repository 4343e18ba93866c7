package plans

import (
	"context"
	"fmt"
	"time"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/audit"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// List returns every plan, lowest tier first, then by name.
func (s *Service) List(ctx context.Context) ([]*Plan, error) {
	var rows []planRow
	if err := s.d.DB.NewSelect().Model(&rows).OrderExpr("created_at ASC, id ASC").Scan(ctx); err != nil {
		return nil, wrap("list", translate(err))
	}
	out := make([]*Plan, 0, len(rows))
	for _, t := range Tiers() {
		for i := range rows {
			if Tier(rows[i].Tier) == t {
				out = append(out, rows[i].toPlan())
			}
		}
	}
	return out, nil
}

// Get returns the plan with id, or platform.ErrNotFound.
func (s *Service) Get(ctx context.Context, id string) (*Plan, error) {
	r, err := planGet(ctx, s.d.DB, id)
	if err != nil {
		return nil, wrap("get", err)
	}
	return r.toPlan(), nil
}

// PlanByName returns the plan named name, or an error wrapping platform.ErrNotFound.
func (s *Service) PlanByName(ctx context.Context, name string) (*Plan, error) {
	r, err := planGetByName(ctx, s.d.DB, name)
	if err != nil {
		return nil, wrap("plan by name", err)
	}
	return r.toPlan(), nil
}

// AccountPlan returns userID's account plan: the assigned one, else the
// default FREE-tier plan. With no FREE-tier plan at all it answers 503.
func (s *Service) AccountPlan(ctx context.Context, userID string) (*Plan, error) {
	s.stmt.init(s.d.DB)
	r, err := scanPlan(s.stmt.stmt.QueryRow(ctx, s.d.DB, userID))
	if err = translate(err); isNotFound(err) {
		return nil, platform.Unavailable("no FREE-tier plan exists to be the default account plan; an admin must create one")
	}
	if err != nil {
		return nil, wrap("account plan", err)
	}
	return r.toPlan(), nil
}

// AssignAccountPlan puts userID on the plan with planID.
func (s *Service) AssignAccountPlan(ctx context.Context, userID, planID string) error {
	return s.assign(ctx, userID, planID, "account")
}

// assign puts account (a user, or a team: kind names which) on planID.
func (s *Service) assign(ctx context.Context, account, planID, kind string) error {
	if !platform.ValidID(account) {
		return platform.Invalid("userId: must be a UUID")
	}
	defer s.accountPlanChanged(account)
	return db.InTx(ctx, s.d.DB, func(ctx context.Context, tx bun.Tx) error {
		plan, err := planGet(ctx, tx, planID)
		if err != nil {
			if isNotFound(err) {
				return platform.NotFound("plan not found")
			}
			return wrap("assign", err)
		}
		row := &assignmentRow{UserID: account, PlanID: planID, AssignedAt: s.now()}
		_, err = tx.NewInsert().Model(row).
			On("CONFLICT (user_id) DO UPDATE").Set("plan_id = EXCLUDED.plan_id, assigned_at = EXCLUDED.assigned_at").
			Exec(ctx)
		if err != nil {
			return wrap("assign", translate(err))
		}
		return audit.Record(ctx, s.d.Audit, tx, audit.Entry{Action: "plan.assign", ResourceType: kind, ResourceID: account,
			OwnerID: account, Summary: "put on plan " + plan.Name})
	})
}

// recordPlan writes the audit row of a write to plan row, in tx.
func (s *Service) recordPlan(ctx context.Context, tx bun.IDB, row *planRow, verb string) error {
	return audit.Record(ctx, s.d.Audit, tx, audit.Entry{Action: "plan." + verb, ResourceType: "plan", ResourceID: row.ID,
		Summary: verb + "d plan " + row.Name})
}

// AssignTeamPlan puts team teamID on the plan with planID: its quotas and
// its teamMembers from then on (until then it follows its owner's account plan).
func (s *Service) AssignTeamPlan(ctx context.Context, teamID, planID string) error {
	if !platform.ValidID(teamID) || s.d.Teams == nil {
		return platform.NotFound("team not found")
	}
	if _, err := s.d.Teams.TeamOwner(ctx, teamID); err != nil {
		if isNotFound(err) {
			return platform.NotFound("team not found")
		}
		return wrap("team", err)
	}
	return s.assign(ctx, teamID, planID, "team")
}

// TeamPlan returns the plan of team teamID: the one assigned to it, else
// ownerID's account plan.
func (s *Service) TeamPlan(ctx context.Context, teamID, ownerID string) (*Plan, error) {
	p, own, err := s.OwnTeamPlan(ctx, teamID)
	if err != nil || own {
		return p, err
	}
	return s.AccountPlan(ctx, ownerID)
}

// OwnTeamPlan returns the plan assigned to team teamID (AssignTeamPlan) and
// true, or nil and false when it has none and follows its owner's account plan.
func (s *Service) OwnTeamPlan(ctx context.Context, teamID string) (*Plan, bool, error) {
	var rows []planRow
	err := s.d.DB.NewSelect().Model(&rows).
		Where("id = (SELECT pa.plan_id FROM plan_assignments AS pa WHERE pa.user_id = ?)", teamID).Scan(ctx)
	if err != nil {
		return nil, false, wrap("team plan", translate(err))
	}
	if len(rows) == 1 {
		return rows[0].toPlan(), true, nil
	}
	return nil, false, nil
}

// PlanInput is the body of POST /plans (SPEC 2.4): every limit required,
// non-negative; the booleans default to false.
type PlanInput struct {
	Name             string `json:"name" minLength:"1" maxLength:"64" pattern:"^[A-Za-z0-9][A-Za-z0-9._ -]*$" patternDescription:"letters, digits, space, dot, underscore or hyphen, starting with a letter or digit" doc:"Unique plan name"`
	Tier             Tier   `json:"tier" enum:"FREE,STARTER,PRO,ENTERPRISE" doc:"Tier"`
	MaxProjects      int    `json:"maxProjects" minimum:"0" maximum:"1000000000" doc:"Projects per account (0: unlimited)"`
	MaxDeployments   int    `json:"maxDeployments" minimum:"0" maximum:"1000000000" doc:"Deployments per project per calendar month, UTC (0: unlimited)"`
	MaxMemoryMi      int    `json:"maxMemoryMi" minimum:"0" maximum:"1000000000" doc:"Memory per app in MiB (0: unlimited)"`
	MaxCpuM          int    `json:"maxCpuM" minimum:"0" maximum:"1000000000" doc:"CPU per app in millicores (0: unlimited)"`
	MaxStorageGi     int    `json:"maxStorageGi" minimum:"0" maximum:"1000000000" doc:"Storage per project in GiB (0: unlimited)"`
	MaxBandwidthGb   int    `json:"maxBandwidthGb" minimum:"0" maximum:"1000000000" doc:"Bandwidth per month in GB (0: unlimited)"`
	BuildTimeoutMins int    `json:"buildTimeoutMins" minimum:"0" maximum:"1440" doc:"Build time limit in minutes (0: the runtime default)"`
	CustomDomains    bool   `json:"customDomains,omitempty" doc:"Custom domains allowed (default false)"`
	TeamMembers      bool   `json:"teamMembers,omitempty" doc:"Team members allowed (default false)"`
	PriorityBuilds   bool   `json:"priorityBuilds,omitempty" doc:"Priority builds (default false)"`
	Public           bool   `json:"public,omitempty" doc:"Any account may choose it for a project, up to its account plan's tier (default false: only accounts an admin assigns it to)"`
}

// PlanPatch is the body of PATCH /plans/:id: any subset of PlanInput.
type PlanPatch struct {
	Name             *string `json:"name,omitempty" minLength:"1" maxLength:"64" pattern:"^[A-Za-z0-9][A-Za-z0-9._ -]*$" patternDescription:"letters, digits, space, dot, underscore or hyphen, starting with a letter or digit" doc:"Unique plan name; a plan projects use cannot be renamed"`
	Tier             *Tier   `json:"tier,omitempty" enum:"FREE,STARTER,PRO,ENTERPRISE" doc:"Tier"`
	MaxProjects      *int    `json:"maxProjects,omitempty" minimum:"0" maximum:"1000000000" doc:"Projects per account (0: unlimited)"`
	MaxDeployments   *int    `json:"maxDeployments,omitempty" minimum:"0" maximum:"1000000000" doc:"Deployments per project per calendar month, UTC (0: unlimited)"`
	MaxMemoryMi      *int    `json:"maxMemoryMi,omitempty" minimum:"0" maximum:"1000000000" doc:"Memory per app in MiB (0: unlimited)"`
	MaxCpuM          *int    `json:"maxCpuM,omitempty" minimum:"0" maximum:"1000000000" doc:"CPU per app in millicores (0: unlimited)"`
	MaxStorageGi     *int    `json:"maxStorageGi,omitempty" minimum:"0" maximum:"1000000000" doc:"Storage per project in GiB (0: unlimited)"`
	MaxBandwidthGb   *int    `json:"maxBandwidthGb,omitempty" minimum:"0" maximum:"1000000000" doc:"Bandwidth per month in GB (0: unlimited)"`
	BuildTimeoutMins *int    `json:"buildTimeoutMins,omitempty" minimum:"0" maximum:"1440" doc:"Build time limit in minutes (0: the runtime default)"`
	CustomDomains    *bool   `json:"customDomains,omitempty" doc:"Custom domains allowed"`
	TeamMembers      *bool   `json:"teamMembers,omitempty" doc:"Team members allowed"`
	PriorityBuilds   *bool   `json:"priorityBuilds,omitempty" doc:"Priority builds"`
	Public           *bool   `json:"public,omitempty" doc:"Any account may choose it for a project, up to its account plan's tier"`
}

func (in *PlanInput) validate() error {
	if !in.Tier.Valid() {
		return platform.Invalidf("tier: must be one of FREE, STARTER, PRO, ENTERPRISE")
	}
	for _, f := range []struct {
		name string
		v    int
	}{
		{"maxProjects", in.MaxProjects}, {"maxDeployments", in.MaxDeployments}, {"maxMemoryMi", in.MaxMemoryMi},
		{"maxCpuM", in.MaxCpuM}, {"maxStorageGi", in.MaxStorageGi}, {"maxBandwidthGb", in.MaxBandwidthGb},
		{"buildTimeoutMins", in.BuildTimeoutMins},
	} {
		if f.v < 0 {
			return platform.Invalidf("%s: must be >= 0", f.name)
		}
	}
	if in.Name == "" || len(in.Name) > 64 {
		return platform.Invalid("name: must be 1 to 64 characters")
	}
	return nil
}

// Create stores a new plan. A taken name is a 409.
func (s *Service) Create(ctx context.Context, in PlanInput) (*Plan, error) {
	if err := in.validate(); err != nil {
		return nil, err
	}
	now := s.now()
	row := &planRow{ID: platform.NewID(), CreatedAt: now, UpdatedAt: now}
	apply(row, in)
	err := db.InTx(ctx, s.d.DB, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewInsert().Model(row).Exec(ctx); err != nil {
			return err
		}
		return s.recordPlan(ctx, tx, row, "create")
	})
	s.plansChanged()
	if err = translate(err); err != nil {
		if isConflict(err) {
			return nil, platform.Conflict(fmt.Sprintf("a plan named %q already exists", in.Name))
		}
		return nil, wrap("create", err)
	}
	s.d.Logger.InfoContext(ctx, "plan created", "plan_id", row.ID, "name", row.Name, "tier", row.Tier)
	return row.toPlan(), nil
}

func apply(row *planRow, in PlanInput) {
	row.Name, row.Tier = in.Name, string(in.Tier)
	row.MaxProjects, row.MaxDeployments = in.MaxProjects, in.MaxDeployments
	row.MaxMemoryMi, row.MaxCpuM, row.MaxStorageGi = in.MaxMemoryMi, in.MaxCpuM, in.MaxStorageGi
	row.MaxBandwidthGb, row.BuildTimeoutMins = in.MaxBandwidthGb, in.BuildTimeoutMins
	row.CustomDomains, row.TeamMembers, row.PriorityBuilds = in.CustomDomains, in.TeamMembers, in.PriorityBuilds
	row.Public = in.Public
}

func (r *planRow) input() PlanInput {
	return PlanInput{
		Name: r.Name, Tier: Tier(r.Tier), MaxProjects: r.MaxProjects, MaxDeployments: r.MaxDeployments,
		MaxMemoryMi: r.MaxMemoryMi, MaxCpuM: r.MaxCpuM, MaxStorageGi: r.MaxStorageGi,
		MaxBandwidthGb: r.MaxBandwidthGb, BuildTimeoutMins: r.BuildTimeoutMins,
		CustomDomains: r.CustomDomains, TeamMembers: r.TeamMembers, PriorityBuilds: r.PriorityBuilds,
		Public: r.Public,
	}
}

func (p PlanPatch) applyTo(in *PlanInput) {
	set(&in.Name, p.Name)
	set(&in.Tier, p.Tier)
	set(&in.MaxProjects, p.MaxProjects)
	set(&in.MaxDeployments, p.MaxDeployments)
	set(&in.MaxMemoryMi, p.MaxMemoryMi)
	set(&in.MaxCpuM, p.MaxCpuM)
	set(&in.MaxStorageGi, p.MaxStorageGi)
	set(&in.MaxBandwidthGb, p.MaxBandwidthGb)
	set(&in.BuildTimeoutMins, p.BuildTimeoutMins)
	set(&in.CustomDomains, p.CustomDomains)
	set(&in.TeamMembers, p.TeamMembers)
	set(&in.PriorityBuilds, p.PriorityBuilds)
	set(&in.Public, p.Public)
}

// set copies *v to *dst when the patch sets v.
func set[T any](dst, v *T) {
	if v != nil {
		*dst = *v
	}
}

// Update changes the fields p sets. Renaming a plan projects use, or moving
// the last FREE-tier plan to another tier, is a 409.
func (s *Service) Update(ctx context.Context, id string, p PlanPatch) (*Plan, error) {
	// Projects refer to plans by name: renaming one they use is refused.
	check := func(cur *planRow) error {
		if p.Name != nil && *p.Name != cur.Name {
			return s.checkUnused(ctx, cur.Name, "renamed")
		}
		return nil
	}
	out, err := s.change(ctx, id, "update", check, func(ctx context.Context, tx bun.Tx, row *planRow) error {
		in := row.input()
		p.applyTo(&in)
		if err := in.validate(); err != nil {
			return err
		}
		if Tier(row.Tier) == TierFree && in.Tier != TierFree {
			if n, err := countTier(ctx, tx, TierFree); err != nil {
				return err
			} else if n <= 1 {
				return platform.Conflict("plan " + row.Name + " is the last FREE-tier plan (the default account plan); it cannot change tier")
			}
		}
		apply(row, in)
		row.UpdatedAt = s.now()
		if _, err := tx.NewUpdate().Model(row).WherePK().Exec(ctx); err != nil {
			if err = translate(err); isConflict(err) {
				return platform.Conflict(fmt.Sprintf("a plan named %q already exists", in.Name))
			}
			return translate(err)
		}
		return s.recordPlan(ctx, tx, row, "update")
	})
	if err != nil {
		return nil, err
	}
	s.d.Logger.InfoContext(ctx, "plan updated", "plan_id", out.ID, "name", out.Name, "tier", out.Tier)
	return out.toPlan(), nil
}

// Delete removes a plan no project and no account uses (409 otherwise). The
// last FREE-tier plan cannot be deleted (it is the default account plan).
// It returns the deleted plan.
func (s *Service) Delete(ctx context.Context, id string) (*Plan, error) {
	check := func(cur *planRow) error { return s.checkUnused(ctx, cur.Name, "deleted") }
	deleted, err := s.change(ctx, id, "delete", check, func(ctx context.Context, tx bun.Tx, row *planRow) error {
		if n, err := countAssignments(ctx, tx, id); err != nil {
			return err
		} else if n > 0 {
			return platform.Conflict(fmt.Sprintf("plan %s is in use: it is the account plan of %d user(s)", row.Name, n))
		}
		if Tier(row.Tier) == TierFree {
			if n, err := countTier(ctx, tx, TierFree); err != nil {
				return err
			} else if n <= 1 {
				return platform.Conflict("plan " + row.Name + " is the last FREE-tier plan (the default account plan) and cannot be deleted")
			}
		}
		if _, err := tx.NewDelete().Model((*planRow)(nil)).Where("id = ?", id).Exec(ctx); err != nil {
			return translate(err)
		}
		return s.recordPlan(ctx, tx, row, "delete")
	})
	if err != nil {
		return nil, err
	}
	s.d.Logger.InfoContext(ctx, "plan deleted", "plan_id", id, "name", deleted.Name)
	return deleted.toPlan(), nil
}

// change runs f on plan id's row in a transaction under the plans lock,
// after check on the row as read before it (outside the transaction: the
// usage checker uses the pool, one SQLite connection). It returns the row
// f changed; an unknown plan is a 404, other errors are wrapped with op.
func (s *Service) change(ctx context.Context, id, op string, check func(cur *planRow) error,
	f func(ctx context.Context, tx bun.Tx, row *planRow) error) (*planRow, error) {
	notFound := func(err error) error {
		if isNotFound(err) {
			return platform.NotFound("plan not found")
		}
		return wrap(op, err)
	}
	cur, err := planGet(ctx, s.d.DB, id)
	if err != nil {
		return nil, notFound(err)
	}
	if err := check(cur); err != nil {
		return nil, err
	}
	var out *planRow
	defer s.plansChanged()
	err = db.InTx(ctx, s.d.DB, func(ctx context.Context, tx bun.Tx) error {
		if err := lockPlans(ctx, tx); err != nil {
			return err
		}
		row, err := planGet(ctx, tx, id)
		if err != nil {
			return err
		}
		out = row
		return f(ctx, tx, row)
	})
	if err != nil {
		return nil, notFound(err)
	}
	return out, nil
}

func (s *Service) checkUnused(ctx context.Context, name, verb string) error {
	if s.d.Usage == nil {
		return nil
	}
	inUse, err := s.d.Usage.PlanInUse(ctx, name)
	if err != nil {
		return wrap("plan usage", err)
	}
	if inUse {
		return platform.Conflict("plan " + name + " is in use by projects and cannot be " + verb)
	}
	return nil
}

// SeedPlans are the plans Start creates, one per tier.
func SeedPlans() []PlanInput {
	return []PlanInput{
		{Name: "free", Tier: TierFree, MaxProjects: 3, MaxDeployments: 100, MaxMemoryMi: 512, MaxCpuM: 500,
			MaxStorageGi: 1, MaxBandwidthGb: 10, BuildTimeoutMins: 10, Public: true},
		{Name: "starter", Tier: TierStarter, MaxProjects: 10, MaxDeployments: 500, MaxMemoryMi: 1024, MaxCpuM: 1000,
			MaxStorageGi: 5, MaxBandwidthGb: 100, BuildTimeoutMins: 20, Public: true, CustomDomains: true},
		{Name: "pro", Tier: TierPro, MaxProjects: 50, MaxDeployments: 2000, MaxMemoryMi: 4096, MaxCpuM: 2000,
			MaxStorageGi: 20, MaxBandwidthGb: 500, BuildTimeoutMins: 30, Public: true, CustomDomains: true, TeamMembers: true, PriorityBuilds: true},
		{Name: "enterprise", Tier: TierEnterprise, MaxProjects: 500, MaxDeployments: 20000, MaxMemoryMi: 16384, MaxCpuM: 8000,
			MaxStorageGi: 100, MaxBandwidthGb: 5000, BuildTimeoutMins: 60, Public: true, CustomDomains: true, TeamMembers: true, PriorityBuilds: true},
	}
}

// Start seeds the default plans: it creates SeedPlans when no plan exists
// yet, and does nothing otherwise (an admin's edits and deletions survive
// restarts). Replicas starting together seed once.
func (s *Service) Start(ctx context.Context) error {
	_, err := s.seed(ctx)
	return err
}

// Close does nothing: plans has no background work.
func (s *Service) Close(context.Context) error { return nil }

// seed is Start; it reports whether it created the plans.
func (s *Service) seed(ctx context.Context) (bool, error) {
	seeded := false
	defer s.plansChanged()
	err := db.InTx(ctx, s.d.DB, func(ctx context.Context, tx bun.Tx) error {
		if err := lockPlans(ctx, tx); err != nil {
			return err
		}
		n, err := tx.NewSelect().Model((*planRow)(nil)).Count(ctx)
		if err != nil || n > 0 {
			return translate(err)
		}
		now := s.now()
		for i, in := range SeedPlans() {
			// Distinct creation times keep the default FREE plan and list order stable.
			row := &planRow{ID: platform.NewID(), CreatedAt: now.Add(time.Duration(i) * time.Microsecond)}
			row.UpdatedAt = row.CreatedAt
			apply(row, in)
			if _, err := tx.NewInsert().Model(row).Exec(ctx); err != nil {
				return translate(err)
			}
		}
		seeded = true
		return nil
	})
	if err != nil {
		return false, wrap("seed", err)
	}
	if seeded {
		s.d.Logger.InfoContext(ctx, "seeded default plans", "count", len(SeedPlans()))
	}
	return seeded, nil
}

// SchemaName methods name these types in the OpenAPI document (platform.SchemaNamer).
func (PlanInput) SchemaName() string { return "CreatePlanRequest" }
func (PlanPatch) SchemaName() string { return "UpdatePlanRequest" }

// accountPlanChanged publishes that userID's assignment was written (or may
// have been: it runs whether the write committed or not). Subscribers only
// drop caches: they cannot fail.
func (s *Service) accountPlanChanged(userID string) {
	_ = s.changed.Publish(context.Background(), PlanChanged{UserID: userID})
}

// plansChanged publishes that plans were written (or may have been).
func (s *Service) plansChanged() {
	_ = s.changed.Publish(context.Background(), PlanChanged{})
}
