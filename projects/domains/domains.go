// Package domains lets a project answer on its owner's own host names
// (custom domains): the owner adds a hostname, creates the DNS records the
// answer lists, and Keelson checks them.
//
//   - Ownership: a TXT record at _keelson-challenge.<hostname> holding the
//     domain's random token. Until it is seen the domain is pending.
//   - Routing: a CNAME to <slug>.<apps-domain>, or for an apex domain A/AAAA
//     records to the ingress addresses (Deps.IngressIPs). A verified domain
//     whose records route to Keelson is active.
//   - Hostnames are unique across all accounts. A hostname another account
//     holds is refused (409) until the caller proves the TXT record with a
//     token of its own; the proof moves it, and its old owner is told.
//   - A periodic re-check (Deps.CheckInterval on the injected clock) turns an
//     active domain whose records no longer point at Keelson into error
//     (dangling protection) and back to active when they return, telling the
//     owner both times. A failed lookup (timeout, server failure) changes
//     nothing.
//
// The module owns the custom_domains and custom_domain_claims tables. It
// reaches projects and mail only through the interfaces it declares
// (Projects, Notifier). The DNS step and the ingress ask it which hostnames
// are active (ActiveHostnames, ProjectForHost) and which opted in to HSTS
// (HSTSHostnames), and can be told when that changes (Service.ActiveChanged);
// certificates are the ingress's, which records their state here
// (SetCertificate).
package domains

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/audit"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/platform/events"
	"github.com/uptrace/bun"
)

// Project is what the module needs to know of a project.
type Project struct {
	Slug string
	// PlanName is the project's effective plan, named in refusals.
	PlanName string
	// CustomDomains is that plan's customDomains.
	CustomDomains bool
}

// Projects is what custom domains need from the projects module.
type Projects interface {
	// Project returns ownerID's project projectID. An absent project,
	// another owner's, or one being deleted is an error wrapping
	// platform.ErrNotFound.
	Project(ctx context.Context, ownerID, projectID string) (*Project, error)
}

// Access authorises a caller on a project by their role (the projects
// module's one authorisation point) and answers its owner account: a user,
// or a team.
type Access interface {
	Authorize(ctx context.Context, userID, projectID string, perm platform.Permission) (ownerID string, err error)
}

// Notifier tells a user something by mail (the server adapts the auth
// module's mailer). Errors are logged, never shown to the caller.
type Notifier interface {
	Notify(ctx context.Context, userID, subject, text string) error
}

// Defaults of Deps.
const (
	DefaultMaxPerProject = 20
	DefaultCheckInterval = 10 * time.Minute
	defaultPollEvery     = 30 * time.Second
	defaultLookupTimeout = 10 * time.Second
	// claimTTL is how long a claim token on another account's hostname stays valid.
	claimTTL = 7 * 24 * time.Hour
	// checkBatch is how many domains one pass of the re-check takes.
	checkBatch = 100
)

// Deps are what the module needs from its host.
type Deps struct {
	// DB holds the module's tables (see Migrations).
	DB *bun.DB
	// Auth authenticates the routes.
	Auth platform.Authenticator
	// Projects checks ownership and the plan.
	Projects Projects
	// Access authorises callers by role. Optional: without it a project's
	// owner alone may act, and Notifier gets owners' user ids; with it the
	// owner may be a team's id (the host's Notifier mails its owner).
	Access Access
	// Notifier mails owners (a domain moved away, deactivated, reactivated).
	Notifier Notifier
	// AppsDomain is KEELSON_APPS_DOMAIN: projects answer at <slug>.<AppsDomain>;
	// custom domains CNAME there, and names under it are refused.
	AppsDomain string
	// PublicURL and FrontendURL are the API's and the web app's origins:
	// their hosts are refused as custom domains.
	PublicURL, FrontendURL string
	// IngressIPs are the public addresses of the ingress, for apex domains'
	// A/AAAA records (KEELSON_INGRESS_IPS). Empty: apex domains are told to
	// use their DNS provider's CNAME flattening (ALIAS) to the app host.
	IngressIPs []netip.Addr
	// Resolvers are DNS servers (host:port) the checks ask, in turn
	// (KEELSON_DNS_RESOLVERS). Empty: the system's resolver.
	Resolvers []string
	// MaxPerProject caps a project's domains. Default DefaultMaxPerProject.
	MaxPerProject int
	// CheckInterval is how often each domain is checked again. Default DefaultCheckInterval.
	CheckInterval time.Duration
	// PollEvery is how often (real time) the background loop looks for
	// domains due a check. Default 30 s.
	PollEvery time.Duration
	// LookupTimeout bounds one domain's DNS lookups. Default 10 s.
	LookupTimeout time.Duration
	// Audit records adds, moves, checks and deletes asked for by a person,
	// in their transaction. Optional.
	Audit audit.Recorder
	// Log receives the module's messages. Default: discard.
	Log *slog.Logger
	// Clock tells the time. Default platform.SystemClock.
	Clock platform.Clock
}

func (d Deps) validate() error {
	var errs []error
	if d.DB == nil {
		errs = append(errs, errors.New("DB is required"))
	}
	if d.Auth == nil {
		errs = append(errs, errors.New("Auth is required"))
	}
	if d.Projects == nil {
		errs = append(errs, errors.New("Projects is required"))
	}
	if d.Notifier == nil {
		errs = append(errs, errors.New("Notifier is required"))
	}
	if d.AppsDomain == "" {
		errs = append(errs, errors.New("AppsDomain is required"))
	}
	for _, r := range d.Resolvers {
		if _, _, err := net.SplitHostPort(r); err != nil {
			errs = append(errs, fmt.Errorf("resolver %q is not host:port", r))
		}
	}
	if d.MaxPerProject < 0 || d.CheckInterval < 0 {
		errs = append(errs, errors.New("MaxPerProject and CheckInterval must not be negative"))
	}
	return errors.Join(errs...)
}

// Service is the custom-domain module.
type Service struct {
	d        Deps
	resolver *net.Resolver
	changed  events.Topic[ActiveChanged]

	mu     sync.Mutex
	loop   *platform.Loop
	bg     sync.WaitGroup // notifications in flight
	life   context.Context
	closed bool // Close began: no more notifications
}

// New checks d and builds the service; add its routes with Register.
func New(d Deps) (*Service, error) {
	if err := d.validate(); err != nil {
		return nil, fmt.Errorf("domains: %w", err)
	}
	platform.Defaults(&d.Clock, &d.Log)
	d.AppsDomain = strings.TrimSuffix(strings.ToLower(d.AppsDomain), ".")
	d.MaxPerProject = cmp.Or(d.MaxPerProject, DefaultMaxPerProject)
	d.CheckInterval = cmp.Or(d.CheckInterval, DefaultCheckInterval)
	d.PollEvery = cmp.Or(d.PollEvery, defaultPollEvery)
	d.LookupTimeout = cmp.Or(d.LookupTimeout, defaultLookupTimeout)
	return &Service{d: d, resolver: newResolver(d.Resolvers), life: context.Background()}, nil
}

// Domain statuses.
const (
	StatusPending  = "pending"  // the ownership TXT record was not seen yet
	StatusVerified = "verified" // owned; the routing records do not point at Keelson yet
	StatusActive   = "active"   // owned and routed: served
	StatusError    = "error"    // was active; its records no longer point at Keelson
)

// Certificate statuses (SetCertificate).
const (
	CertificateNone   = "none"   // the ingress has not issued one (HTTPS off, or no HTTPS request yet)
	CertificateIssued = "issued" // the ingress holds a valid certificate
	CertificateError  = "error"  // the last order failed (the ingress tries again at a later handshake)
)

type domainRow struct {
	bun.BaseModel `bun:"table:custom_domains"`
	ID            string     `bun:"id,pk,type:varchar(36)"`
	ProjectID     string     `bun:"project_id,notnull,type:varchar(36)"`
	OwnerID       string     `bun:"owner_id,notnull,type:varchar(36)"`
	Hostname      string     `bun:"hostname,notnull,type:varchar(253)"`
	Slug          string     `bun:"slug,notnull"` // the project's (it never changes): the CNAME target
	Token         string     `bun:"token,notnull,type:varchar(64)"`
	Status        string     `bun:"status,notnull,type:varchar(16)"`
	LastError     string     `bun:"last_error,notnull"`
	CertStatus    string     `bun:"cert_status,notnull,type:varchar(16)"`
	CertExpiresAt *time.Time `bun:"cert_expires_at"`
	HSTS          bool       `bun:"hsts,notnull,default:false"` // Strict-Transport-Security on its HTTPS answers
	VerifiedAt    *time.Time `bun:"verified_at"`
	CheckedAt     time.Time  `bun:"checked_at,notnull"` // last check, or creation
	CreatedAt     time.Time  `bun:"created_at,notnull"`
	UpdatedAt     time.Time  `bun:"updated_at,notnull"`
}

// claimRow is a token another account got for a hostname held elsewhere:
// a TXT record holding it moves the hostname to claimRow's project.
type claimRow struct {
	bun.BaseModel `bun:"table:custom_domain_claims"`
	ID            string    `bun:"id,pk,type:varchar(36)"`
	ProjectID     string    `bun:"project_id,notnull,type:varchar(36)"`
	OwnerID       string    `bun:"owner_id,notnull,type:varchar(36)"`
	Hostname      string    `bun:"hostname,notnull,type:varchar(253)"`
	Token         string    `bun:"token,notnull,type:varchar(64)"`
	CreatedAt     time.Time `bun:"created_at,notnull"`
}

// Migrations are the module's tables, for the host to run.
func Migrations() db.MigrationSet {
	return db.MigrationSet{Module: "domains", Migrations: []db.Migration{{
		ID: "0001_init",
		Up: db.Steps(
			db.CreateTables((*domainRow)(nil), (*claimRow)(nil)),
			// One owner per hostname across all accounts.
			db.CreateIndex((*domainRow)(nil), "custom_domains_hostname", true, "hostname"),
			db.CreateIndex((*domainRow)(nil), "custom_domains_project", false, "project_id", "created_at", "id"),
			db.CreateIndex((*domainRow)(nil), "custom_domains_checked", false, "checked_at"),
			db.CreateIndex((*claimRow)(nil), "custom_domain_claims_host_project", true, "hostname", "project_id"),
			db.CreateIndex((*claimRow)(nil), "custom_domain_claims_project", false, "project_id", "created_at"),
		),
	}, {
		// HSTS opt-in per domain.
		ID: "0002_hsts",
		Up: db.AddColumn("custom_domains", "hsts", "BOOLEAN NOT NULL DEFAULT FALSE"),
	}}}
}

var _ platform.Module = (*Service)(nil)

// Migrations returns the module's tables (the package's Migrations), for platform.Module.
func (s *Service) Migrations() db.MigrationSet { return Migrations() }

// record writes the audit row of a change to domain r, in idb.
func (s *Service) record(ctx context.Context, idb bun.IDB, r *domainRow, action, summary string) error {
	return audit.Record(ctx, s.d.Audit, idb, audit.Entry{Action: action, ResourceType: "domain", ResourceID: r.ID,
		OwnerID: r.OwnerID, ProjectID: r.ProjectID, Summary: summary + " " + r.Hostname})
}

func (s *Service) now() time.Time { return s.d.Clock.Now().UTC().Truncate(time.Microsecond) }

// ActiveChanged is the event of a change to a project's set of active
// hostnames (a domain activated, deactivated, deleted or moved away, the
// project's domains deleted) or to an active domain's hsts, so the ingress,
// built after this module, routes or unroutes them at once. It is published
// on the changing goroutine: a subscriber keeps it short.
type ActiveChanged struct{ ProjectID string }

// ActiveChanged is the topic of ActiveChanged events; subscribe before Start.
func (s *Service) ActiveChanged() *events.Topic[ActiveChanged] { return &s.changed }

// activeChanged publishes that projectID's active hostnames changed.
// Subscribers reload routes and cannot fail.
func (s *Service) activeChanged(ctx context.Context, projectID string) {
	_ = s.changed.Publish(context.WithoutCancel(ctx), ActiveChanged{ProjectID: projectID})
}
