package oauth

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/keelson-dev/keelson/auth"
	"github.com/keelson-dev/keelson/platform"
	"github.com/uptrace/bun"
	"golang.org/x/sync/singleflight"
)

// Accounts is what the OAuth flows need from the account module. *auth.Service
// implements it.
type Accounts interface {
	IssueTokens(ctx context.Context, userID platform.ID) (auth.TokenPair, error)
	UserByID(ctx context.Context, id platform.ID) (*auth.User, error)
	UserByEmail(ctx context.Context, email string) (*auth.User, error)
	CreateUser(ctx context.Context, p auth.CreateUserParams) (*auth.User, error)
	SetCodehostUsername(ctx context.Context, userID platform.ID, username string) error
	// TwoFactorChallenge answers "" when the user may have tokens now, or a
	// challenge to trade with a 2FA code at POST /auth/2fa/login.
	TwoFactorChallenge(ctx context.Context, userID platform.ID) (string, error)
}

var _ Accounts = (*auth.Service)(nil)

// Sealer seals provider access tokens and PKCE verifiers at rest.
// *secret.Sealer implements it.
type Sealer interface {
	Seal(plaintext string) (string, error)
	Open(sealed string) (string, error)
}

// Redirect modes of a successful login (Deps.RedirectMode).
const (
	// RedirectTokens puts accessToken and refreshToken in the frontend
	// callback's query, as SPEC 4.3 says.
	RedirectTokens = "tokens"
	// RedirectCode puts a one-time code in the query instead; the frontend
	// trades it for the token pair at POST /auth/oauth/exchange.
	RedirectCode = "code"
)

// CodehostConfig is the OAuth app of the GitHub-style code host.
type CodehostConfig struct {
	// ClientID and ClientSecret of the OAuth app (KEELSON_CODEHOST_CLIENT_ID,
	// KEELSON_CODEHOST_CLIENT_SECRET). Both empty: the routes answer 503.
	ClientID, ClientSecret string
	// WebURL is the provider's web origin (authorize and token endpoints).
	// Default https://github.com.
	WebURL string
	// APIURL is the provider's REST API origin (/user, /user/emails).
	// Default https://api.github.com.
	APIURL string
	// Scopes requested. Default read:user and user:email.
	Scopes []string
}

// IDPConfig is an OpenID Connect provider, found by discovery.
type IDPConfig struct {
	// Issuer, ClientID and ClientSecret (KEELSON_IDP_ISSUER, _CLIENT_ID,
	// _CLIENT_SECRET). All empty: the routes answer 503.
	Issuer, ClientID, ClientSecret string
	// Scopes requested. Default openid, profile, email.
	Scopes []string
}

// Deps are what the oauth module needs. DB, Accounts, Authn and Sealer are required.
type Deps struct {
	// DB holds the oauth tables (see Migrations).
	DB bun.IDB
	// Accounts creates, finds and logs in users.
	Accounts Accounts
	// Authn checks the access token of /auth/codehost/connect.
	Authn platform.Authenticator
	// Sealer seals provider tokens and PKCE verifiers at rest.
	Sealer Sealer
	// Clock tells the time. Default platform.SystemClock.
	Clock platform.Clock
	// Logger receives the module's logs. Default: discard.
	Logger *slog.Logger
	// HTTPClient talks to the providers. Default: a client with a 15 s timeout.
	HTTPClient *http.Client

	// PublicURL is the API's own origin; callbacks are <PublicURL>/auth/<provider>/callback.
	// The state cookie is Secure when it is https. Default http://localhost:8080.
	PublicURL string
	// FrontendURL is where the flows end. Default http://localhost:3000.
	FrontendURL string
	// RedirectMode is RedirectTokens (default, SPEC) or RedirectCode.
	RedirectMode string
	// StateTTL bounds the time between a start route and its callback. Default 10m.
	StateTTL time.Duration
	// CodeTTL is the lifetime of a one-time exchange code. Default 30s, at most 60s.
	CodeTTL time.Duration
	// DiscoveryTimeout bounds OIDC discovery at first use. Default 10s.
	DiscoveryTimeout time.Duration

	Codehost CodehostConfig
	IDP      IDPConfig
}

func (d Deps) withDefaults() Deps {
	platform.Defaults(&d.Clock, &d.Logger)
	if d.HTTPClient == nil {
		d.HTTPClient = &http.Client{Timeout: 15 * time.Second}
	}
	d.PublicURL = strings.TrimRight(cmp.Or(d.PublicURL, "http://localhost:8080"), "/")
	d.FrontendURL = strings.TrimRight(cmp.Or(d.FrontendURL, "http://localhost:3000"), "/")
	d.RedirectMode = cmp.Or(d.RedirectMode, RedirectTokens)
	d.StateTTL = cmp.Or(d.StateTTL, 10*time.Minute)
	d.CodeTTL = cmp.Or(d.CodeTTL, 30*time.Second)
	d.DiscoveryTimeout = cmp.Or(d.DiscoveryTimeout, 10*time.Second)
	d.Codehost.WebURL = strings.TrimRight(cmp.Or(d.Codehost.WebURL, "https://github.com"), "/")
	d.Codehost.APIURL = strings.TrimRight(cmp.Or(d.Codehost.APIURL, "https://api.github.com"), "/")
	if len(d.Codehost.Scopes) == 0 {
		d.Codehost.Scopes = []string{"read:user", "user:email"}
	}
	if len(d.IDP.Scopes) == 0 {
		d.IDP.Scopes = []string{"openid", "profile", "email"}
	}
	return d
}

func (d Deps) validate() error {
	var errs platform.Problems
	errs.Require("DB", d.DB != nil)
	errs.Require("Accounts", d.Accounts != nil)
	errs.Require("Authn", d.Authn != nil)
	errs.Require("Sealer", d.Sealer != nil)
	switch d.RedirectMode {
	case "", RedirectTokens, RedirectCode:
	default:
		errs = append(errs, fmt.Errorf("RedirectMode %q is not %q or %q", d.RedirectMode, RedirectTokens, RedirectCode))
	}
	if d.StateTTL < 0 || d.CodeTTL < 0 || d.DiscoveryTimeout < 0 {
		errs = append(errs, errors.New("durations must not be negative"))
	}
	if d.CodeTTL > time.Minute {
		errs = append(errs, errors.New("CodeTTL must be at most 1m"))
	}
	for _, u := range []struct{ name, val string }{
		{"PublicURL", d.PublicURL}, {"FrontendURL", d.FrontendURL},
		{"Codehost.WebURL", d.Codehost.WebURL}, {"Codehost.APIURL", d.Codehost.APIURL}, {"IDP.Issuer", d.IDP.Issuer},
	} {
		if u.val == "" {
			continue
		}
		if p, err := url.Parse(u.val); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			errs = append(errs, fmt.Errorf("%s must be an absolute http(s) URL", u.name))
		}
	}
	return errors.Join(errs...)
}

// Service runs the OAuth flows: its routes, the identities it links, and
// CodehostLogin for the code-host app module.
type Service struct {
	d        Deps
	db       bun.IDB
	log      *slog.Logger
	codehost *codehostProvider
	idp      *idpProvider
	// refreshes renews each identity's code-host token once at a time.
	refreshes singleflight.Group
}

// New validates d and builds the service. It contacts no provider: OIDC
// discovery happens at the first use of the idp routes.
func New(d Deps) (*Service, error) {
	if err := d.validate(); err != nil {
		return nil, fmt.Errorf("oauth: %w", err)
	}
	d = d.withDefaults()
	s := &Service{d: d, db: d.DB, log: d.Logger}
	s.codehost = newCodehostProvider(d)
	s.idp = newIDPProvider(d)
	return s, nil
}

func (s *Service) now() time.Time { return s.d.Clock.Now().UTC() }

// RedirectMode reports the configured redirect mode.
func (s *Service) RedirectMode() string { return s.d.RedirectMode }

var _ platform.Module = (*Service)(nil)

// Migrations returns the module's tables (the package's Migrations), for platform.Module.
func (s *Service) Migrations() platform.MigrationSet { return Migrations() }

// Start and Close do nothing: the module has no background work.
func (s *Service) Start(context.Context) error { return nil }

func (s *Service) Close(context.Context) error { return nil }
