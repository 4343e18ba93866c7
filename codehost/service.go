package codehost

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/keelson-dev/keelson/codehost/internal/store"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/repourl"
	"github.com/uptrace/bun"
)

// Deps are what the module needs from its host.
type Deps struct {
	// DB holds the module's tables (see Migrations).
	DB *bun.DB
	// Auth authenticates the bearer routes.
	Auth platform.Authenticator
	// Provider is the code host's app. Nil together with a non-empty Missing
	// when the app is not configured.
	Provider Provider
	// WebhookSecret verifies the app's webhook signatures. Whenever it is
	// set, the app's deliveries are verified and stored, also while other
	// settings are Missing (they are processed as far as the app allows:
	// a ping is answered, other events fail naming what is missing).
	WebhookSecret string
	// Missing names the settings that are not configured (e.g.
	// "KEELSON_CODEHOST_APP_ID"). When non-empty every app route answers 503
	// naming them; the webhook still takes repository webhooks signed with a
	// project's webhookSecret.
	Missing []string
	// StateKey signs install states (at least 32 bytes; derive it from the
	// server's secret key).
	StateKey []byte
	// FrontendURL is where the install callback redirects (KEELSON_FRONTEND_URL).
	FrontendURL string
	// Projects finds the projects a push concerns.
	Projects ProjectLookup
	// Secrets, optional, reads projects' webhook secrets: without it only the
	// app's deliveries are accepted.
	Secrets ProjectSecrets
	// Statuses, optional, posts commit statuses for push deployments of app
	// installations (the GitHub adapter implements it).
	Statuses CommitStatuses
	// Results, needed with Statuses, tells how a deployment ended.
	Results DeploymentResults
	// StatusPollInterval is how often ended deployments are looked for to
	// post their final commit status. Default 5 s.
	StatusPollInterval time.Duration
	// Deployer starts push deployments.
	Deployer Deployer
	// Accounts reports users' linked code-host identities and tokens. Without
	// it no installation can be verified, so none is linked.
	Accounts LinkedAccounts
	// Connector, optional, sends a user without a usable code-host identity
	// through the code host's OAuth before the install page (GET
	// /codehost/connect). Without it such a user gets a 409 naming what to do.
	Connector IdentityConnector
	// Log receives the worker's messages. Default: discard.
	Log *slog.Logger
	// Clock tells the time. Default: platform.SystemClock.
	Clock platform.Clock
	// StateTTL is the lifetime of an install state. Default 10 minutes.
	StateTTL time.Duration
	// PollInterval is how often the worker looks for pending deliveries
	// besides being woken by new ones. Default 30 s.
	PollInterval time.Duration
	// RecheckInterval is how long a link's check stands: the worker asks the
	// code host again, with each user's own token, which repositories of a
	// linked installation they may access once their last check is this old
	// (every use of a link checks it too). Default 24 hours.
	RecheckInterval time.Duration
}

func (d Deps) validate() error {
	var errs platform.Problems
	errs.Require("DB", d.DB != nil)
	errs.Require("Auth", d.Auth != nil)
	errs.Require("Projects", d.Projects != nil)
	errs.Require("Deployer", d.Deployer != nil)
	if len(d.StateKey) < 32 {
		errs = append(errs, errors.New("StateKey must be at least 32 bytes"))
	}
	errs.RequireHTTPURL("FrontendURL", d.FrontendURL)
	if d.Statuses != nil && d.Results == nil {
		errs = append(errs, errors.New("Results is required with Statuses"))
	}
	if len(d.Missing) == 0 {
		if d.Provider == nil {
			errs = append(errs, errors.New("Provider is required when nothing is Missing"))
		}
		if d.WebhookSecret == "" {
			errs = append(errs, errors.New("WebhookSecret is required when nothing is Missing"))
		}
	}
	return errors.Join(errs...)
}

func (d Deps) withDefaults() Deps {
	platform.Defaults(&d.Clock, &d.Log)
	d.StateTTL = cmp.Or(d.StateTTL, 10*time.Minute)
	d.PollInterval = cmp.Or(d.PollInterval, 30*time.Second)
	d.StatusPollInterval = cmp.Or(d.StatusPollInterval, 5*time.Second)
	d.RecheckInterval = cmp.Or(d.RecheckInterval, 24*time.Hour)
	d.FrontendURL = strings.TrimRight(d.FrontendURL, "/")
	return d
}

// Service is the code-host integration: its routes, its webhook worker, and
// clone credentials for the deployments module.
type Service struct {
	d     Deps
	store store.Store

	wake chan struct{}
	mu   sync.Mutex
	stop context.CancelFunc
	done chan struct{}
}

// New checks d and builds the service. Register its routes with Register and
// start the webhook worker with Start.
func New(d Deps) (*Service, error) {
	if err := d.validate(); err != nil {
		return nil, fmt.Errorf("codehost: %w", err)
	}
	d = d.withDefaults()
	return &Service{d: d, store: store.Store{DB: d.DB}, wake: make(chan struct{}, 1)}, nil
}

func (s *Service) now() time.Time { return s.d.Clock.Now().UTC() }

// configured returns the 503 to answer when the app is not configured.
func (s *Service) configured() error {
	if len(s.d.Missing) == 0 {
		return nil
	}
	return platform.Unavailable("the code-host app is not configured: set " + strings.Join(s.d.Missing, ", "))
}

// normalizeRepoURL is an http(s) repository URL as a code host matches it:
// its key (platform/repourl) in lower case, since owner and repository
// names match without case. A local repository or a malformed URL is "".
func normalizeRepoURL(raw string) string {
	k := repourl.Normalize(raw)
	if strings.HasPrefix(k, "file:") {
		return ""
	}
	return strings.ToLower(k)
}

var _ platform.Module = (*Service)(nil)

// Migrations returns the module's tables (the package's Migrations), for platform.Module.
func (s *Service) Migrations() platform.MigrationSet { return Migrations() }

// wrap adds what failed to an error for the logs (never sent to clients).
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("codehost: %s: %w", op, err)
}
