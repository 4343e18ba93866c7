// Package projects owns projects (SPEC 2.2, 4.4): create, list, get, settings
// with env vars, and the deletion lifecycle of DESIGN.md section 4. It also
// enforces the quotas that bite at project level: maxProjects at create and
// "a project's plan is not above its owner's account plan" at settings, and it
// answers GET /usage. It does not deploy anything; deployments reads a
// project through ProjectForDeploy and tears it down when it hears Deleted
// (Events).
//
// Decisions SPEC leaves open:
//   - A project belongs to a user or to a team (teamId). Every route asks
//     the caller's role on it (access.go: the owner of a personal project
//     is its owner; a team's members have their team role) and needs the
//     role its platform.Permission names: no role is a 404, as for an
//     absent project; a role too low is a 403 naming the role needed.
//     Creating a team project or moving one in or out needs admin on both
//     sides; secret values, the webhook secret and httpsRedirect need admin
//     (platform.DomainsWrite: how the project's hosts are served), the plan owner.
//   - repoUrl is an https URL with a host and a path, without credentials,
//     query or fragment; hosts that are loopback, private or link-local IP
//     literals, "localhost" or numeric are refused. With AllowLocalRepos,
//     file:// URLs, absolute paths and such hosts (and http) are accepted.
//   - Each project gets a slug (from its name, [a-z0-9-], at most 40
//     characters, made unique with a short random suffix). It never changes;
//     a DELETED project's slug may be reused.
//   - Secret env values and the webhook secret are sealed at rest. Responses
//     show secret values as "********" and only whether a webhook secret is
//     set. A settings update that sends "********" for a secret keeps the
//     stored value. On DELETED, env vars and the webhook secret are erased.
//   - A project follows its owner's account plan until a settings update names
//     a plan (stored planName ""; answered as the account plan's name, so a
//     GET sent back to PATCH /settings is accepted; it then names that plan
//     from there on). The effective plan is
//     planName's plan, else (or when that plan is above the owner's current
//     account plan, e.g. after a downgrade) the account plan.
//   - maxProjects counts the projects not DELETED of a quota account
//     (PlanSource.QuotaPlan, counts.go).
//   - Deletion: DELETE marks the project DELETING and answers 202; a background
//     teardown (Events.Deleted) runs with a bounded context; success makes it
//     DELETED, failure FAILED with errorMessage, and DELETE again retries.
//     Start resumes DELETING projects after a restart; delete-status resumes a
//     teardown whose runner vanished (older than TeardownTimeout).
//   - GET /projects answers from a cache of encoded pages per owner, exact:
//     every write invalidates before it answers, across replicas on Postgres
//     through LISTEN/NOTIFY (listcache.go says what the window is).
package projects

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/audit"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/projects/slugs"
	"github.com/uptrace/bun"
)

// Statuses of a project.
const (
	StatusActive   = "ACTIVE"
	StatusDeleting = "DELETING"
	StatusDeleted  = "DELETED"
	StatusFailed   = "FAILED" // the last teardown failed; errorMessage says why
)

// Sealer seals secrets at rest; *secret.Sealer satisfies it.
type Sealer interface {
	Seal(plaintext string) (string, error)
	Open(sealed string) (string, error)
}

// Plan is what projects needs to know of a plan. The host adapts the plans
// module's Plan to it. Limits of 0 mean "no limit".
type Plan struct {
	Name     string
	Tier     string
	TierRank int // FREE 0 < STARTER 1 < PRO 2 < ENTERPRISE 3
	// Public plans may be chosen by any account whose account plan's tier
	// is not lower; others only by the accounts they are assigned to.
	Public           bool
	MaxProjects      int
	MaxDeployments   int // per project per calendar month, UTC
	MaxMemoryMi      int
	MaxCpuM          int
	MaxStorageGi     int
	BuildTimeoutMins int
	PriorityBuilds   bool
	MaxBandwidthGb   int // per project per calendar month, UTC
}

// PlanSource looks plans up.
type PlanSource interface {
	// PlanByName returns an error wrapping platform.ErrNotFound for an unknown name.
	PlanByName(ctx context.Context, name string) (*Plan, error)
	// AccountPlan returns the user's account plan (the FREE-tier plan by default).
	AccountPlan(ctx context.Context, userID string) (*Plan, error)
	// QuotaPlan returns the plan whose maxProjects accountID's projects count
	// against and the account counting them: accountID, or for a team that
	// borrows its first owner's account plan, that owner.
	QuotaPlan(ctx context.Context, accountID string) (plan *Plan, quotaID string, err error)
}

// DeploymentCounter counts deployments started this calendar month (UTC) by
// project, for GET /usage. The deployments module implements it.
type DeploymentCounter interface {
	DeploymentsThisMonth(ctx context.Context, ownerID string) (map[string]int, error)
}

// LogCounter reports the size of an account's stored deployment logs and its
// log budget (0: none), for GET /usage. The deployments module implements it.
type LogCounter interface {
	LogUsage(ctx context.Context, ownerID string) (used, budget int64, err error)
}

// BandwidthCounter reports the bytes projects carried through the ingress
// this calendar month (UTC), for GET /usage, and how many bytes one GB of
// maxBandwidthGb is. The bandwidth module implements it.
type BandwidthCounter interface {
	BandwidthThisMonth(ctx context.Context, projectIDs []string) (used map[string]int64, bytesPerGB int64, err error)
}

// ErrNotCounted is what a DeploymentCounter returns (wrapped or not) when it
// cannot count on this server; GET /usage then says deploymentsCounted false.
var ErrNotCounted = errors.New("projects: deployments are not counted on this server")

// Deps are what the projects module needs.
type Deps struct {
	// DB holds the projects table (see Migrations). Required.
	DB *bun.DB
	// Auth authenticates bearer tokens. Required to Register.
	Auth platform.Authenticator
	// Sealer seals secret env values and webhook secrets. Required.
	Sealer Sealer
	// Plans looks up plans and account plans. Required.
	Plans PlanSource
	// Teams answers users' roles in the teams that own projects. Optional:
	// without it there are only personal projects.
	Teams Teams
	// Deployments counts this month's deployments for GET /usage. Optional.
	Deployments DeploymentCounter
	// Logs reports stored log bytes against the account log budget for GET
	// /usage. Optional: without it the report has no logs field.
	Logs LogCounter
	// Bandwidth reports this month's bytes per project for GET /usage.
	// Optional: without it the report has no bandwidth field.
	Bandwidth BandwidthCounter
	// CheckHost answers nil for a host a project may be pinned to, else
	// the settings update's 4xx naming it. Without it none can be.
	CheckHost func(ctx context.Context, id string) error
	// Regions a project may choose; the first is the default. Default ["local"].
	Regions []string
	// AllowLocalRepos admits file:// and absolute-path repoUrls and local or
	// private hosts (development and tests). Default false.
	AllowLocalRepos bool
	// ReservedSlugs are refused (400) in addition to slugs.DefaultReserved:
	// the host adds slugs.OfHosts of its API and frontend URLs. Optional.
	ReservedSlugs []string
	// TeardownTimeout bounds one teardown attempt. Default 10 minutes.
	TeardownTimeout time.Duration
	// ListCacheBytes bounds the encoded GET /projects pages kept (listcache.go).
	// Default 16 MiB; negative turns the cache off, and the project row cache.
	ListCacheBytes int64
	// PlanChannel is the Postgres channel on which the plans module names a
	// user whose account plan changed, or "*" when any plan changed; the list
	// cache listens on it. The host sets it when plans has such triggers; in
	// process it calls AccountPlanChanged and PlansChanged.
	PlanChannel string
	// Audit records every change in its transaction. Optional.
	Audit audit.Recorder
	// Clock defaults to platform.SystemClock.
	Clock platform.Clock
	// Logger defaults to a logger that discards. Values of env vars and
	// secrets are never logged.
	Logger *slog.Logger
}

func (d Deps) validate() error {
	switch {
	case d.DB == nil:
		return errors.New("projects: Deps.DB is required")
	case d.Sealer == nil:
		return errors.New("projects: Deps.Sealer is required")
	case d.Plans == nil:
		return errors.New("projects: Deps.Plans is required")
	}
	for _, r := range d.Regions {
		if r == "" {
			return errors.New("projects: Deps.Regions has an empty region")
		}
	}
	return nil
}

func (d Deps) withDefaults() Deps {
	if len(d.Regions) == 0 {
		d.Regions = []string{"local"}
	}
	d.ReservedSlugs = slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(slugs.DefaultReserved), d.ReservedSlugs...))))
	if d.TeardownTimeout <= 0 {
		d.TeardownTimeout = 10 * time.Minute
	}
	if d.ListCacheBytes == 0 {
		d.ListCacheBytes = 16 << 20
	}
	platform.Defaults(&d.Clock, &d.Logger)
	return d
}

// Service is the projects module.
type Service struct {
	d      Deps
	events Events // what it publishes (events.go)

	// Background teardowns: base is cancelled by Close after its grace period.
	base     context.Context
	cancel   context.CancelFunc
	mu       sync.Mutex
	inflight map[string]bool
	closed   bool
	wg       sync.WaitGroup

	list   listStmts   // List's prepared statements
	create createStmts // Create's
	// get's reads of a project by id (not DELETED; any), prepared: every
	// project-scoped route of every module is authorised through them.
	byID, byIDAny *db.PreparedModel[projectRow]
	lists         *listCache // GET /projects' encoded pages
	rows          *rowCache  // get's ACTIVE rows (listcache.go)

	stopListen func() // the list cache's Postgres listener (db.StartListen), stopped by Close
}

// New returns the projects service. It returns an error for a bad Deps.
func New(d Deps) (*Service, error) {
	if err := d.validate(); err != nil {
		return nil, err
	}
	s := &Service{d: d.withDefaults(), inflight: map[string]bool{}, create: newCreateStmts(),
		byID: db.NewPreparedModel[projectRow]("id = ? AND status <> '" + StatusDeleted + "'"), byIDAny: db.NewPreparedModel[projectRow]("id = ?")}
	s.lists = newListCache(s.d.ListCacheBytes, !db.IsPostgres(s.d.DB))
	s.rows = newRowCache(s.d.ListCacheBytes >= 0, !db.IsPostgres(s.d.DB))
	s.base, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Start resumes the teardown of every DELETING project (the process may have
// stopped in the middle of one) and, on Postgres, starts the list cache's
// listener. Call it once migrations have run.
func (s *Service) Start(ctx context.Context) error {
	s.listen()
	var rows []projectRow
	err := s.d.DB.NewSelect().Model(&rows).Column("id", "owner_id").
		Where("status = ?", StatusDeleting).Scan(ctx)
	if err != nil {
		return wrap("resume teardowns", err)
	}
	for _, r := range rows {
		s.d.Logger.InfoContext(ctx, "resuming project teardown", "project_id", r.ID)
		s.startTeardown(r.ID, r.OwnerID)
	}
	return nil
}

// Close stops accepting teardowns and waits for those in flight until ctx
// ends; then it cancels them (they stay DELETING and resume at next Start)
// and waits for them to return.
func (s *Service) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.cancel()
		<-done
	}
	s.cancel()
	if s.stopListen != nil {
		s.stopListen()
	}
	s.list.close()
	s.create.close()
	return errors.Join(s.byID.Close(), s.byIDAny.Close())
}

// record writes the audit row of a change to project r, in tx.
func (s *Service) record(ctx context.Context, tx bun.IDB, r *projectRow, action, summary string) error {
	return audit.Record(ctx, s.d.Audit, tx, audit.Entry{Action: action, ResourceType: "project", ResourceID: r.ID,
		OwnerID: r.OwnerID, ProjectID: r.ID, Summary: summary})
}

func (s *Service) now() time.Time { return s.d.Clock.Now().UTC().Truncate(time.Microsecond) }

var _ platform.Module = (*Service)(nil)

// Migrations returns the module's tables (the package's Migrations), for platform.Module.
func (s *Service) Migrations() db.MigrationSet { return Migrations() }
