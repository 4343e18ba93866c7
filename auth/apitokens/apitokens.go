// Package apitokens is scoped API tokens: a secret a person creates for
// automation (a CI job that deploys), sent as "Authorization: Bearer kls_…"
// in place of a login session. It stores tokens, answers the token routes
// (POST, GET /auth/tokens, DELETE /auth/tokens/{id}) and authenticates
// tokens into a platform.Principal that carries the token's id, scopes and
// team. It is not the authorisation itself: projects.Authorize (through
// platform.Grant) and the host's platform.TokenRules decide what a token
// may do on each route.
//
// Decisions:
//   - Format: "kls_", 12 base62 characters that find the row (not secret),
//     32 random base62 characters and a 6-character CRC32 checksum, like
//     GitHub's ghp_ tokens: scanners recognise the prefix, and a mistyped
//     token is refused without a query. Only the SHA-256 of the whole token
//     is stored (the secret has about 190 bits, so no slow hash is needed),
//     compared in constant time. The token is answered once, at creation.
//   - Scopes are platform.Permissions ("deployments:write", ...). A token
//     never exceeds its creator: every use still checks the creator's
//     current role on the project or team, so a member removed from a team,
//     or demoted, takes their tokens with them at once. A team-bound token
//     (teamId) reaches that team's projects only; at creation the creator
//     must be a member whose role holds every scope asked (403 otherwise).
//   - Expired tokens, revoked (deleted) ones and those of a deleted account
//     answer 401. The last use (time and client address) is written at most
//     once per TouchEvery per token, not on every request.
//   - An account holds at most MaxPerUser tokens (403 past it).
//   - A token never acts as a site ADMIN: its principal has the USER role,
//     whatever its creator's.
//   - API tokens cannot use account routes (password, email, 2FA, sessions,
//     tokens): the host's TokenRules refuses them on every /auth/ route.
package apitokens

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/audit"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// User is what the module needs to know of a token's creator.
type User struct{ ID, Email string }

// Users looks accounts up (the auth module).
type Users interface {
	// UserByID returns an error wrapping platform.ErrNotFound for an unknown id.
	UserByID(ctx context.Context, id string) (*User, error)
}

// Teams answers a user's role in a team (the teams module).
type Teams interface {
	// MemberRole returns "" when userID is not a member of teamID.
	MemberRole(ctx context.Context, teamID, userID string) (platform.MemberRole, error)
}

// Deps are what the module needs from its host.
type Deps struct {
	// DB holds the module's table. Required.
	DB *bun.DB
	// Auth authenticates the token routes: a session authenticator, so
	// that no API token manages tokens. Required.
	Auth platform.Authenticator
	// Users looks up creators. Required.
	Users Users
	// Teams checks the creator's role for a team-bound token. Required.
	Teams Teams
	// MaxPerUser caps the tokens of one account. Default DefaultMaxPerUser.
	MaxPerUser int
	// TouchEvery is how often, at most, a token's last use is written.
	// Default one minute.
	TouchEvery time.Duration
	// Audit records token creation and revocation in their transactions
	// (optional).
	Audit audit.Recorder
	// Log receives the module's messages. Default: discard.
	Log *slog.Logger
	// Clock tells the time. Default platform.SystemClock.
	Clock platform.Clock
}

// DefaultMaxPerUser is Deps.MaxPerUser's default.
const DefaultMaxPerUser = 50

func (d Deps) validate() error {
	var p platform.Problems
	p.Require("DB", d.DB != nil)
	p.Require("Auth", d.Auth != nil)
	p.Require("Users", d.Users != nil)
	p.Require("Teams", d.Teams != nil)
	if d.MaxPerUser < 0 || d.TouchEvery < 0 {
		p = append(p, errors.New("MaxPerUser and TouchEvery must not be negative"))
	}
	return errors.Join(p...)
}

func (d Deps) withDefaults() Deps {
	d.MaxPerUser = cmp.Or(d.MaxPerUser, DefaultMaxPerUser)
	d.TouchEvery = cmp.Or(d.TouchEvery, time.Minute)
	platform.Defaults(&d.Clock, &d.Log)
	return d
}

// Service is the API tokens module.
type Service struct{ d Deps }

// New checks d and builds the service.
func New(d Deps) (*Service, error) {
	if err := d.validate(); err != nil {
		return nil, fmt.Errorf("apitokens: %w", err)
	}
	return &Service{d: d.withDefaults()}, nil
}

var (
	_ platform.Module        = (*Service)(nil)
	_ platform.Authenticator = (*Service)(nil)
)

// Migrations returns the module's table, for platform.Module.
func (s *Service) Migrations() db.MigrationSet { return Migrations() }

// Start does nothing: the module has no background work.
func (s *Service) Start(context.Context) error { return nil }

// Close does nothing.
func (s *Service) Close(context.Context) error { return nil }

func (s *Service) now() time.Time { return s.d.Clock.Now().UTC().Truncate(time.Microsecond) }

type tokenRow struct {
	bun.BaseModel `bun:"table:api_tokens"`
	ID            string     `bun:"id,pk,type:varchar(36)"`
	UserID        string     `bun:"user_id,notnull,type:varchar(36)"`
	TeamID        string     `bun:"team_id,notnull,type:varchar(36)"` // "" when not bound to a team
	Name          string     `bun:"name,notnull"`
	Lookup        string     `bun:"lookup,notnull,type:varchar(16)"` // the token's id part, not secret
	Hash          string     `bun:"hash,notnull,type:varchar(64)"`   // hex SHA-256 of the whole token
	Scopes        string     `bun:"scopes,notnull"`                  // space-separated permissions
	CreatedAt     time.Time  `bun:"created_at,notnull"`
	ExpiresAt     *time.Time `bun:"expires_at"`
	LastUsedAt    *time.Time `bun:"last_used_at"`
	LastUsedAddr  string     `bun:"last_used_addr,notnull,type:varchar(64)"`
}

// Migrations are the module's table, for the host to run.
func Migrations() db.MigrationSet {
	return db.MigrationSet{Module: "apitokens", Migrations: []db.Migration{{
		ID: "0001_init",
		Up: db.Steps(
			db.CreateTables((*tokenRow)(nil)),
			db.CreateIndex((*tokenRow)(nil), "api_tokens_lookup_key", true, "lookup"),
			db.CreateIndex((*tokenRow)(nil), "api_tokens_user_idx", false, "user_id", "created_at"),
		),
	}}}
}
