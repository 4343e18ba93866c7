package auth

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"runtime"
	"strings"
	"time"

	"github.com/keelson-dev/keelson/auth/internal/device"
	"github.com/keelson-dev/keelson/auth/internal/emailaddr"
	"github.com/keelson-dev/keelson/auth/internal/password"
	"github.com/keelson-dev/keelson/auth/internal/ratelimit"
	"github.com/keelson-dev/keelson/auth/internal/tokencache"
	"github.com/keelson-dev/keelson/auth/mailer"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/audit"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// Sealer seals secrets at rest (the TOTP secrets). *secret.Sealer implements it.
type Sealer interface {
	Seal(plaintext string) (string, error)
	Open(sealed string) (string, error)
}

// Limits are the brute-force limits. Zero fields take the defaults shown;
// a negative Max switches a limit off (benchmarks).
type Limits struct {
	// LoginPerAccount counts the failed logins of an account (email) from
	// every client without a device token of it, together (ASVS 2.2.1: at
	// most 100 an hour). Default 100 per 1h; a successful login gives its
	// attempt back.
	LoginPerAccount Limit
	// LoginPerAccountAddr counts the failed logins of an account from one
	// client address (IPv6: its /64) without a device token, so one noisy
	// address never spends the account's budget. Default 10 per 15m.
	LoginPerAccountAddr Limit
	// LoginPerDevice counts the failed logins of an account from one device
	// token; a client presenting one is limited by this alone. Default 10
	// per 15m.
	LoginPerDevice Limit
	// LoginPerIP counts logins per client address, across accounts (clients
	// without a device token). Default 100 per 15m.
	LoginPerIP Limit
	// TwoFactorPerUser counts failed 2FA codes (login, verify, disable) per user.
	// Default 10 per 15m.
	TwoFactorPerUser Limit
	// TwoFactorPerIP counts 2FA verify and disable calls per client address. Default 100 per 15m.
	TwoFactorPerIP Limit
	// ForgotPerAccount counts reset mails per email. Default 5 per 1h.
	ForgotPerAccount Limit
	// ForgotPerIP counts forgot-password calls per client address. Default 30 per 1h.
	ForgotPerIP Limit
	// RegisterPerIP counts registrations per client address. Default 30 per 1h.
	RegisterPerIP Limit
	// MailPerAccount counts the mails an account asks for itself:
	// verification resends and email changes (each change mails the new
	// address a link and the old one a notice). Default 5 per 1h.
	MailPerAccount Limit
	// MailPerDestination counts the mails any request sends one address:
	// sign-up and resent verification links, email-change links, reset
	// links. Default 5 per 1h.
	MailPerDestination Limit
}

// Deps are what the auth module needs. DB, Sealer and JWTSecret are required.
type Deps struct {
	// DB holds the auth tables (see Migrations).
	DB bun.IDB
	// Sealer seals TOTP secrets at rest.
	Sealer Sealer
	// Mailer sends password-reset mail. Default LogMailer on Logger.
	Mailer Mailer
	// Clock tells the time. Default platform.SystemClock.
	Clock platform.Clock
	// Logger receives the module's logs. Default: discard.
	Logger *slog.Logger
	// Audit records logins and account changes in their transaction. Optional.
	Audit audit.Recorder

	// JWTSecret signs access tokens (HS256). At least 32 bytes.
	JWTSecret []byte
	// Issuer is the iss claim. Default "keelson".
	Issuer string
	// Audience is the aud claim. Default "keelson-api".
	Audience string
	// AccessTTL is the lifetime of an access token. Default 15m.
	AccessTTL time.Duration
	// RefreshTTL is the absolute lifetime of a login's refresh tokens, counted
	// from the login however often they are rotated. Default 30 days.
	RefreshTTL time.Duration
	// ResetTTL is the lifetime of a password-reset token. Default 30m, at most 1h.
	ResetTTL time.Duration
	// VerifyTTL is the lifetime of an email verification (or email change)
	// link. Default 24h, at most 7 days.
	VerifyTTL time.Duration
	// MailQueueSize bounds the mails waiting to be sent. Default 1000; a full
	// queue answers 503 to the request that would add one.
	MailQueueSize int
	// MailWorkers is how many mails are sent at once. Default 2.
	MailWorkers int
	// MailTimeout bounds one mail job (store the token, send). Default 1m.
	MailTimeout time.Duration
	// TOTPIssuer names the service in authenticator apps. Default "Keelson".
	TOTPIssuer string
	// BearerCacheSize bounds the sessions whose bearer check is answered from
	// memory (see bearerCache: exact invalidation, on Postgres across
	// replicas once Start has run). Default 10000; negative disables it.
	// On SQLite it assumes, as the rest of Keelson does, one process and one
	// auth service per database.
	BearerCacheSize int

	// AdminEmails get the ADMIN role (KEELSON_ADMIN_EMAILS).
	AdminEmails []string
	// FrontendURL is where reset links point: <FrontendURL>/reset-password?token=...
	// Default http://localhost:3000.
	FrontendURL string
	// TrustedProxies are the reverse proxies (KEELSON_TRUSTED_PROXIES) whose
	// X-Forwarded-For is believed: when the TCP peer is one of them, the
	// client is the rightmost X-Forwarded-For address that is not. Empty:
	// the peer is the client and X-Forwarded-For is ignored.
	TrustedProxies []netip.Prefix
	// PasswordHashConcurrency is how many argon2id hashes may run at once
	// (each holds 19 MiB). Default max(2, NumCPU).
	PasswordHashConcurrency int
	// Limits are the brute-force limits.
	Limits Limits
}

func (d Deps) withDefaults() Deps {
	platform.Defaults(&d.Clock, &d.Logger)
	if d.Mailer == nil {
		d.Mailer = LogMailer{Log: d.Logger}
	}
	d.Issuer = cmp.Or(d.Issuer, "keelson")
	d.Audience = cmp.Or(d.Audience, "keelson-api")
	d.AccessTTL = cmp.Or(d.AccessTTL, 15*time.Minute)
	d.RefreshTTL = cmp.Or(d.RefreshTTL, 30*24*time.Hour)
	d.ResetTTL = cmp.Or(d.ResetTTL, 30*time.Minute)
	d.VerifyTTL = cmp.Or(d.VerifyTTL, 24*time.Hour)
	d.MailQueueSize = cmp.Or(d.MailQueueSize, 1000)
	d.MailWorkers = cmp.Or(d.MailWorkers, 2)
	d.MailTimeout = cmp.Or(d.MailTimeout, time.Minute)
	d.TOTPIssuer = cmp.Or(d.TOTPIssuer, "Keelson")
	d.BearerCacheSize = cmp.Or(d.BearerCacheSize, 10000)
	d.FrontendURL = strings.TrimRight(cmp.Or(d.FrontendURL, "http://localhost:3000"), "/")
	d.PasswordHashConcurrency = cmp.Or(d.PasswordHashConcurrency, max(2, runtime.NumCPU()))
	l := &d.Limits
	l.LoginPerAccount = l.LoginPerAccount.Or(Limit{Max: 100, Per: time.Hour})
	l.LoginPerAccountAddr = l.LoginPerAccountAddr.Or(Limit{Max: 10, Per: 15 * time.Minute})
	l.LoginPerDevice = l.LoginPerDevice.Or(Limit{Max: 10, Per: 15 * time.Minute})
	l.LoginPerIP = l.LoginPerIP.Or(Limit{Max: 100, Per: 15 * time.Minute})
	l.TwoFactorPerUser = l.TwoFactorPerUser.Or(Limit{Max: 10, Per: 15 * time.Minute})
	l.TwoFactorPerIP = l.TwoFactorPerIP.Or(Limit{Max: 100, Per: 15 * time.Minute})
	l.ForgotPerAccount = l.ForgotPerAccount.Or(Limit{Max: 5, Per: time.Hour})
	l.ForgotPerIP = l.ForgotPerIP.Or(Limit{Max: 30, Per: time.Hour})
	l.RegisterPerIP = l.RegisterPerIP.Or(Limit{Max: 30, Per: time.Hour})
	l.MailPerAccount = l.MailPerAccount.Or(Limit{Max: 5, Per: time.Hour})
	l.MailPerDestination = l.MailPerDestination.Or(Limit{Max: 5, Per: time.Hour})
	return d
}

// maxPer is the longest refill period of the limits.
func (l Limits) maxPer() time.Duration {
	m := time.Hour
	for _, x := range []Limit{l.LoginPerAccount, l.LoginPerAccountAddr, l.LoginPerDevice, l.LoginPerIP, l.TwoFactorPerUser, l.TwoFactorPerIP, l.ForgotPerAccount, l.ForgotPerIP, l.RegisterPerIP, l.MailPerAccount, l.MailPerDestination} {
		m = max(m, x.Per)
	}
	return m
}

func (d Deps) validate() error {
	var errs platform.Problems
	errs.Require("DB", d.DB != nil)
	errs.Require("Sealer", d.Sealer != nil)
	if len(d.JWTSecret) < 32 {
		errs = append(errs, errors.New("JWTSecret must be at least 32 bytes"))
	}
	if d.AccessTTL < 0 || d.RefreshTTL < 0 || d.ResetTTL < 0 {
		errs = append(errs, errors.New("token lifetimes must not be negative"))
	}
	if d.VerifyTTL < 0 || d.VerifyTTL > 7*24*time.Hour {
		errs = append(errs, errors.New("VerifyTTL must be from 0 (default 24h) to 7 days"))
	}
	if d.MailQueueSize < 0 || d.MailWorkers < 0 || d.MailTimeout < 0 {
		errs = append(errs, errors.New("MailQueueSize, MailWorkers and MailTimeout must not be negative"))
	}
	if d.ResetTTL > time.Hour {
		errs = append(errs, errors.New("ResetTTL must be at most 1h"))
	}
	if d.PasswordHashConcurrency < 0 {
		errs = append(errs, errors.New("PasswordHashConcurrency must not be negative"))
	}
	if d.FrontendURL != "" {
		if u, err := url.Parse(d.FrontendURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, errors.New("FrontendURL must be an absolute http(s) URL"))
		}
	}
	for _, e := range d.AdminEmails {
		if _, err := emailaddr.Normalize(e); err != nil {
			errs = append(errs, fmt.Errorf("AdminEmails: %q is not an email address", e))
		}
	}
	return errors.Join(errs...)
}

// Service is the auth module: its handlers, the bearer Authenticator and the
// account operations the OAuth flows build on.
type Service struct {
	d       Deps
	db      bun.IDB
	log     *slog.Logger
	hasher  *password.Hasher
	limiter *ratelimit.Limiter
	devices device.Tokens
	admins  map[string]bool
	mq      *mailer.Queue
	bearer  *db.Prepared // bearerQuery

	cache      *bearerCache
	verified   *tokencache.Cache[accessClaims] // parseAccess's verified tokens, bounded by BearerCacheSize
	stopListen func()                          // the bearer cache's Postgres listener (db.StartListen)
}

var _ platform.Authenticator = (*Service)(nil)

// New validates d and builds the service. It hashes one dummy password (to
// time unknown-account logins), so it takes a few tens of milliseconds.
func New(d Deps) (*Service, error) {
	if err := d.validate(); err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	d = d.withDefaults()
	h, err := password.New(d.PasswordHashConcurrency)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	s := &Service{
		d: d, db: d.DB, log: d.Logger, hasher: h, bearer: db.NewPrepared(bearerQuery),
		devices: device.NewTokens(d.JWTSecret),
		limiter: ratelimit.New(d.DB, d.Clock.Now, d.Limits.maxPer()),
		admins:  map[string]bool{},
		mq:      mailer.NewQueue(d.Logger, d.MailQueueSize, d.MailWorkers, d.MailTimeout),
		// On Postgres the cache serves only once Start's listener is proven.
		cache: newBearerCache(d.BearerCacheSize, !db.IsPostgres(d.DB)), verified: tokencache.New[accessClaims](d.BearerCacheSize),
	}
	for _, e := range d.AdminEmails {
		n, _ := emailaddr.Normalize(e)
		s.admins[n] = true
	}
	return s, nil
}

// Start starts the mail senders: mails (verification links, reset links,
// notices) are queued by requests and sent in the background. Mails queued
// before Start wait for it.
func (s *Service) Start(context.Context) error {
	s.mq.Start()
	if bdb, ok := s.db.(*bun.DB); ok && db.IsPostgres(bdb) && s.d.BearerCacheSize > 0 && s.stopListen == nil {
		// Triggers on auth_users and auth_refresh_tokens name the user.
		s.stopListen = db.StartListen(bdb, s.cache, db.ListenConfig{Channels: []string{bearerChannel}, Logger: s.log})
	}
	return nil
}

// Close stops taking mail, sends what is queued until ctx ends (then cancels
// the rest) and returns once every sender goroutine has.
func (s *Service) Close(ctx context.Context) error {
	if s.stopListen != nil {
		s.stopListen()
	}
	return errors.Join(s.mq.Close(ctx), s.bearer.Close())
}

func (s *Service) now() time.Time { return s.d.Clock.Now().UTC() }

// ---- account operations (also used by auth/oauth) ----

// CreateUserParams describe a new account. Password is optional: a user
// without one cannot log in with a password (OAuth-only).
type CreateUserParams struct {
	Email                           string
	EmailVerified                   bool
	Password                        string
	Name                            string
	Username                        string
	Image                           string
	CodehostUsername                string
	Bio, Company, Location, Website string
}

// CreateUser stores a new account. A taken email is a *platform.Error 409
// (errors.Is platform.ErrConflict); a malformed one a 400.
func (s *Service) CreateUser(ctx context.Context, p CreateUserParams) (*User, error) {
	email, err := emailaddr.Normalize(p.Email)
	if err != nil {
		return nil, platform.Invalid("email: " + err.Error())
	}
	hash := ""
	if p.Password != "" {
		if hash, err = s.hasher.Hash(ctx, p.Password); err != nil {
			return nil, err
		}
	}
	now := s.now()
	row := &userRow{
		ID: platform.NewID(), Email: email, EmailVerified: p.EmailVerified, PasswordHash: hash,
		Name: opt(p.Name), Username: opt(p.Username), Image: opt(p.Image), CodehostUsername: opt(p.CodehostUsername),
		Bio: opt(p.Bio), Company: opt(p.Company), Location: opt(p.Location), Website: opt(p.Website),
		Role: string(platform.RoleUser), CreatedAt: now, UpdatedAt: now,
	}
	if _, err := s.db.NewInsert().Model(row).Exec(ctx); err != nil {
		if err = db.Translate(err); errors.Is(err, platform.ErrConflict) {
			return nil, emailTaken(err)
		}
		return nil, err
	}
	return row.toUser(s.admins), nil
}

func emailTaken(cause error) *platform.Error {
	e := platform.Conflict("email: an account with this email already exists")
	e.Err = cause
	return e
}

// UserByID returns the account with id, or an error wrapping platform.ErrNotFound.
func (s *Service) UserByID(ctx context.Context, id platform.ID) (*User, error) {
	row, err := s.userRow(ctx, s.db, "id", id)
	if err != nil {
		return nil, err
	}
	return row.toUser(s.admins), nil
}

// UserByEmail returns the account with email (matched case-insensitively), or
// an error wrapping platform.ErrNotFound.
func (s *Service) UserByEmail(ctx context.Context, email string) (*User, error) {
	n, err := emailaddr.Normalize(email)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", platform.ErrNotFound, err)
	}
	row, err := s.userRow(ctx, s.db, "email", n)
	if err != nil {
		return nil, err
	}
	return row.toUser(s.admins), nil
}

// DeleteUser deletes the account and, through the foreign keys, its
// sessions and tokens; its access tokens stop working before it returns.
// Delete accounts through it: on SQLite a row deleted by hand is not seen by
// the bearer cache (on Postgres the triggers tell every replica either way).
func (s *Service) DeleteUser(ctx context.Context, id platform.ID) error {
	defer s.cache.InvalidateOwner(id) // after the commit, before the answer
	return execOne(ctx, s.db.NewDelete().Model((*userRow)(nil)).Where("id = ?", id), platform.NotFound("user not found"))
}

// SetCodehostUsername records the user's username at the code-hosting provider.
func (s *Service) SetCodehostUsername(ctx context.Context, id platform.ID, username string) error {
	return execOne(ctx, s.db.NewUpdate().Model((*userRow)(nil)).
		Set("codehost_username = ?", opt(username)).Set("updated_at = ?", s.now()).
		Where("id = ?", id), platform.NotFound("user not found"))
}

func (s *Service) userRow(ctx context.Context, idb bun.IDB, col, val string) (*userRow, error) {
	row := new(userRow)
	if err := idb.NewSelect().Model(row).Where("? = ?", bun.Ident(col), val).Scan(ctx); err != nil {
		return nil, db.Translate(err)
	}
	return row, nil
}

// execOne runs q, an update or delete meant for exactly one row, and
// answers none when it changed any other number of rows (the row is gone,
// or was used or changed meanwhile).
func execOne(ctx context.Context, q interface {
	Exec(ctx context.Context, dest ...any) (sql.Result, error)
}, none error) error {
	res, err := q.Exec(ctx)
	if err != nil {
		return db.Translate(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return none
	}
	return nil
}

// lookupUser is userRow on the pool for callers to whom no account is no
// error (a login's unknown email, a mail job whose account is gone): it
// answers nil, nil then.
func (s *Service) lookupUser(ctx context.Context, col, val string) (*userRow, error) {
	row, err := s.userRow(ctx, s.db, col, val)
	if errors.Is(err, platform.ErrNotFound) {
		return nil, nil
	}
	return row, err
}

func opt(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

var _ platform.Module = (*Service)(nil)

// Migrations returns the module's tables (the package's Migrations), for platform.Module.
func (s *Service) Migrations() db.MigrationSet { return Migrations() }
