// Package plans stores the plans of SPEC 2.4 (name, tier and quota limits),
// serves their CRUD routes (GET public, writes ADMIN only) and answers which
// plan each account is on. It enforces no quota itself: projects checks
// maxProjects and a project's plan tier, deployments checks maxDeployments,
// the runtime applies the resource limits. Plans cannot see projects, so the
// host wires a UsageChecker to refuse deleting or renaming a plan in use.
//
// Quota semantics: every limit is a non-negative integer; 0 means "no limit"
// (buildTimeoutMins 0 means the runtime's default). A user with no assigned
// account plan is on the default plan: the oldest plan of tier FREE. The last
// FREE-tier plan can therefore be neither deleted nor moved to another tier.
package plans

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/audit"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/platform/events"
	"github.com/uptrace/bun"
)

// Tier is a plan's rank: FREE < STARTER < PRO < ENTERPRISE.
type Tier string

// Tiers of SPEC 2.4, lowest first.
const (
	TierFree       Tier = "FREE"
	TierStarter    Tier = "STARTER"
	TierPro        Tier = "PRO"
	TierEnterprise Tier = "ENTERPRISE"
)

// Tiers lists every tier, lowest first.
func Tiers() []Tier { return []Tier{TierFree, TierStarter, TierPro, TierEnterprise} }

// Rank orders tiers: FREE is 0, ENTERPRISE 3; an unknown tier is -1.
func (t Tier) Rank() int {
	for i, x := range Tiers() {
		if x == t {
			return i
		}
	}
	return -1
}

// Valid reports whether t is one of Tiers.
func (t Tier) Valid() bool { return t.Rank() >= 0 }

// Plan is a plan as the API answers it and as other modules (through the
// host's adapters) consume it. Limits of 0 mean "no limit".
type Plan struct {
	ID               string    `json:"id" doc:"Plan id (UUID)"`
	Name             string    `json:"name" doc:"Unique plan name"`
	Tier             Tier      `json:"tier" enum:"FREE,STARTER,PRO,ENTERPRISE" doc:"Tier; a project cannot pick a plan above its owner's account plan tier"`
	MaxProjects      int       `json:"maxProjects" doc:"Projects an account on this plan may own (0: unlimited)"`
	MaxDeployments   int       `json:"maxDeployments" doc:"Deployments started per project per calendar month, UTC (0: unlimited)"`
	MaxMemoryMi      int       `json:"maxMemoryMi" doc:"Memory per app in MiB (0: unlimited)"`
	MaxCpuM          int       `json:"maxCpuM" doc:"CPU per app in millicores (0: unlimited)"`
	MaxStorageGi     int       `json:"maxStorageGi" doc:"Storage per project in GiB (0: unlimited)"`
	MaxBandwidthGb   int       `json:"maxBandwidthGb" doc:"Bandwidth per month in GB (0: unlimited)"`
	BuildTimeoutMins int       `json:"buildTimeoutMins" doc:"Build time limit in minutes (0: the runtime default)"`
	CustomDomains    bool      `json:"customDomains" doc:"Custom domains allowed"`
	TeamMembers      bool      `json:"teamMembers" doc:"Team members allowed"`
	PriorityBuilds   bool      `json:"priorityBuilds" doc:"Builds are scheduled with priority"`
	Public           bool      `json:"public" doc:"Any account may choose it for a project (up to its account plan's tier); a plan that is not public serves only the accounts an admin assigns it to"`
	CreatedAt        time.Time `json:"createdAt" doc:"Creation time (RFC 3339, UTC)"`
	UpdatedAt        time.Time `json:"updatedAt" doc:"Last change (RFC 3339, UTC)"`
}

// Teams is what plans needs of the teams module.
type Teams interface {
	// TeamOwner returns an error wrapping platform.ErrNotFound for an unknown team.
	TeamOwner(ctx context.Context, teamID string) (string, error)
}

// UsageChecker tells whether any live project uses a plan by name. The
// projects module implements it; plans refuses to delete or rename a plan in use.
type UsageChecker interface {
	PlanInUse(ctx context.Context, planName string) (bool, error)
}

// PlanChanged is the event (Service.Changed) of a change to what AccountPlan
// answers, published after the write (committed or not) and before the
// request that made it answers: modules built after plans subscribe (the
// projects list cache, the bandwidth limits). Across replicas on Postgres
// the same changes are notified on ChangeChannel.
type PlanChanged struct {
	// UserID's account plan assignment changed; "" when a plan was created,
	// changed or deleted, which may change anyone's account plan (the
	// default plan, a renamed plan).
	UserID string
}

// Deps are what the plans module needs.
type Deps struct {
	// DB holds the plans tables (see Migrations). Required.
	DB *bun.DB
	// Auth authenticates bearer tokens for the write routes. Required to Register.
	Auth platform.Authenticator
	// Usage answers whether projects use a plan. Optional: without it a plan
	// in use by projects could be deleted, so hosts with projects must set it.
	Usage UsageChecker
	// Teams tells whether a team exists, for PUT /plans/{id}/teams/{teamId}.
	// Optional: without it that route answers 404 for every team.
	Teams Teams
	// Audit records every plan write and assignment in its transaction. Optional.
	Audit audit.Recorder
	// Clock defaults to platform.SystemClock.
	Clock platform.Clock
	// Logger defaults to a logger that discards.
	Logger *slog.Logger
}

func (d Deps) withDefaults() Deps {
	platform.Defaults(&d.Clock, &d.Logger)
	return d
}

// Service is the plans module: the store, the account-plan lookup and the routes.
type Service struct {
	d       Deps
	stmt    accountPlanStmt
	changed events.Topic[PlanChanged]
}

// Changed is the topic of every plan and assignment write (PlanChanged);
// subscribe before Start.
func (s *Service) Changed() *events.Topic[PlanChanged] { return &s.changed }

// New returns the plans service. It returns an error for a bad Deps.
func New(d Deps) (*Service, error) {
	if d.DB == nil {
		return nil, errors.New("plans: Deps.DB is required")
	}
	return &Service{d: d.withDefaults()}, nil
}

func (s *Service) now() time.Time { return s.d.Clock.Now().UTC().Truncate(time.Microsecond) }

// translate maps storage errors to platform sentinels at the store edge.
func translate(err error) error { return db.Translate(err) }

var _ platform.Module = (*Service)(nil)

// Migrations returns the module's tables (the package's Migrations), for platform.Module.
func (s *Service) Migrations() db.MigrationSet { return Migrations() }
