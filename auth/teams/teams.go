// Package teams lets several accounts share projects: teams, their members
// with a role each (owner, admin, developer, viewer), and invitations by
// mail. It answers which role a user holds in a team (MemberRole) and which
// teams a user belongs to (TeamsOf); the projects module turns that into a
// role on each project the team owns, the one authorisation point every
// project-scoped route asks (platform.Permission says which role an action
// needs).
//
// Decisions:
//   - The creator of a team is its owner. A team always keeps at least one
//     owner: the last owner can neither leave, be removed, nor be demoted
//     (409). Ownership is transferred by making another member owner, then
//     stepping down.
//   - Admins manage members and invitations, up to admin; only owners grant,
//     take away or invite the owner role, rename or delete the team.
//   - A team is deleted only once it owns no project (409 naming how many).
//   - A user who is not a member gets 404 for the team, as for an absent one.
//   - Invitations: a random token mailed as <frontend>/invite?token=, stored
//     as its SHA-256, single use, expiring (Deps.InviteTTL, default 7 days).
//     Only a signed-in account whose verified email is the invited address
//     accepts it. Inviting the same address again replaces the pending
//     invitation. Invitation mail is limited per team and per address.
//     An invitation grants only what its inviter may still grant: removing
//     or demoting them drops the invitations their new role cannot make,
//     and accepting one they could no longer make is a 404.
//   - The team's plan (its own, else its owner's account plan) gates
//     members: without teamMembers only the first member (the creator) fits;
//     inviting or accepting another is a 403 naming the plan.
//   - Members are told by mail when they join, when their role changes and
//     when they are removed. A mail that fails is logged, never an error.
//
// It reaches accounts, mail, rate limits, plans, projects and the audit log
// only through the interfaces of Deps. It is not API tokens (auth/apitokens).
// An API token reaches a team's routes with the scopes of platform.Grant;
// creating, leaving and joining teams need a signed-in session.
package teams

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/audit"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// User is what teams needs to know of an account.
type User struct {
	ID            string
	Email         string
	EmailVerified bool
}

// Users looks accounts up (the auth module).
type Users interface {
	// UserByID returns an error wrapping platform.ErrNotFound for an unknown id.
	UserByID(ctx context.Context, id string) (*User, error)
}

// Mailer sends one plain-text mail.
type Mailer interface {
	Send(ctx context.Context, to, subject, text string) error
}

// Limiter is the auth module's mail rate limiting. Each method spends one
// attempt or answers a 429 *platform.Error.
type Limiter interface {
	// AllowMailTo spends one mail of the address's budget, shared with
	// every other mail sent to it.
	AllowMailTo(ctx context.Context, to string) error
	// Allow spends one attempt of key's bucket, max per per.
	Allow(ctx context.Context, key string, max int, per time.Duration) error
}

// Plans tells a team's plan: its own, else ownerID's account plan.
type Plans interface {
	TeamPlan(ctx context.Context, teamID, ownerID string) (name string, teamMembers bool, err error)
}

// Projects counts the projects a team owns (not deleted).
type Projects interface {
	TeamProjects(ctx context.Context, teamID string) (int, error)
}

// Dependents are told after a team is deleted, so that what other modules
// keep of it goes too (the API tokens bound to it).
type Dependents interface {
	TeamDeleted(ctx context.Context, teamID string) error
}

// Deps are what the module needs from its host.
type Deps struct {
	// DB holds the module's tables (see Migrations). Required.
	DB *bun.DB
	// Auth authenticates the routes. Required.
	Auth platform.Authenticator
	// Users looks up members' and invitees' accounts. Required.
	Users Users
	// Plans gates a second member on teamMembers. Required.
	Plans Plans
	// Projects refuses deleting a team that owns projects. Required.
	Projects Projects
	// Mailer sends invitations and member notices. Optional: without it
	// nothing is mailed (an invitation then cannot reach anyone).
	Mailer Mailer
	// Limiter bounds invitation mail. Optional: without it, none.
	Limiter Limiter
	// Dependents are told of a deleted team. Optional.
	Dependents Dependents
	// FrontendURL is where invitation links point: <FrontendURL>/invite?token=. Required.
	FrontendURL string
	// InviteTTL is how long an invitation stays valid. Default 7 days.
	InviteTTL time.Duration
	// TeamInviteLimit bounds invitation mails per team: Max per Per.
	// Default 20 per hour. (Mails to one address are bounded by the
	// Limiter's per-address budget, whichever module sends them.)
	TeamInviteLimit Limit
	// Audit records every change in the change's transaction. Optional:
	// without it nothing is recorded.
	Audit audit.Recorder
	// Log receives the module's messages. Default: discard.
	Log *slog.Logger
	// Clock tells the time. Default platform.SystemClock.
	Clock platform.Clock
}

// Limit is Max attempts per Per.
type Limit struct {
	Max int
	Per time.Duration
}

// Defaults of Deps.
const DefaultInviteTTL = 7 * 24 * time.Hour

func (d Deps) validate() error {
	var errs platform.Problems
	for name, present := range map[string]bool{
		"DB": d.DB != nil, "Auth": d.Auth != nil, "Users": d.Users != nil, "Plans": d.Plans != nil, "Projects": d.Projects != nil,
	} {
		errs.Require(name, present)
	}
	errs.RequireHTTPURL("FrontendURL", d.FrontendURL)
	if d.InviteTTL < 0 {
		errs = append(errs, errors.New("InviteTTL must not be negative"))
	}
	return errors.Join(errs...)
}

func (d Deps) withDefaults() Deps {
	d.InviteTTL = cmp.Or(d.InviteTTL, DefaultInviteTTL)
	if d.TeamInviteLimit.Max == 0 {
		d.TeamInviteLimit = Limit{Max: 20, Per: time.Hour}
	}
	platform.Defaults(&d.Clock, &d.Log)
	d.FrontendURL = strings.TrimRight(d.FrontendURL, "/")
	return d
}

// Service is the teams module.
type Service struct {
	d          Deps
	teamsOf    *memberCache // TeamsOf (membercache.go)
	stopListen func()       // its Postgres listener (db.StartListen), stopped by Close
}

// New checks d and builds the service.
func New(d Deps) (*Service, error) {
	if err := d.validate(); err != nil {
		return nil, fmt.Errorf("teams: %w", err)
	}
	return &Service{d: d.withDefaults(), teamsOf: db.NewExactCache[cacheKind, []string](memberCacheUsers, nil, !db.IsPostgres(d.DB))}, nil
}

var _ platform.Module = (*Service)(nil)

// Migrations returns the module's tables, for platform.Module.
func (s *Service) Migrations() db.MigrationSet { return Migrations() }

// Start starts, on Postgres, the member cache's listener (membercache.go).
func (s *Service) Start(context.Context) error {
	if db.IsPostgres(s.d.DB) && s.stopListen == nil {
		s.stopListen = db.StartListen(s.d.DB, s.teamsOf, db.ListenConfig{Channels: []string{MembersChannel}, Logger: s.d.Log})
	}
	return nil
}

// Close stops the listener.
func (s *Service) Close(context.Context) error {
	if s.stopListen != nil {
		s.stopListen()
		s.stopListen = nil
	}
	return nil
}

// record writes the audit row of a change to teamID's resource, in tx.
func (s *Service) record(ctx context.Context, tx bun.IDB, teamID, action, resType, resID, summary string) error {
	return audit.Record(ctx, s.d.Audit, tx, audit.Entry{Action: action, ResourceType: resType, ResourceID: resID,
		OwnerID: teamID, Summary: summary})
}

func (s *Service) now() time.Time { return s.d.Clock.Now().UTC().Truncate(time.Microsecond) }

type teamRow struct {
	bun.BaseModel `bun:"table:teams"`
	ID            string    `bun:"id,pk,type:varchar(36)"`
	Name          string    `bun:"name,notnull"`
	CreatedBy     string    `bun:"created_by,notnull,type:varchar(36)"`
	CreatedAt     time.Time `bun:"created_at,notnull"`
	UpdatedAt     time.Time `bun:"updated_at,notnull"`
}

type memberRow struct {
	bun.BaseModel `bun:"table:team_members"`
	TeamID        string    `bun:"team_id,pk,type:varchar(36)"`
	UserID        string    `bun:"user_id,pk,type:varchar(36)"`
	Role          string    `bun:"role,notnull,type:varchar(16)"`
	CreatedAt     time.Time `bun:"created_at,notnull"`
}

type inviteRow struct {
	bun.BaseModel `bun:"table:team_invitations"`
	ID            string    `bun:"id,pk,type:varchar(36)"`
	TeamID        string    `bun:"team_id,notnull,type:varchar(36)"`
	Email         string    `bun:"email,notnull"`
	Role          string    `bun:"role,notnull,type:varchar(16)"`
	TokenHash     string    `bun:"token_hash,notnull,type:varchar(64)"` // hex SHA-256 of the token
	InvitedBy     string    `bun:"invited_by,notnull,type:varchar(36)"`
	CreatedAt     time.Time `bun:"created_at,notnull"`
	ExpiresAt     time.Time `bun:"expires_at,notnull"`
}

// Migrations are the module's tables, for the host to run.
func Migrations() db.MigrationSet {
	return db.MigrationSet{Module: "teams", Migrations: []db.Migration{{
		ID: "0001_init",
		Up: db.Steps(
			db.CreateTables((*teamRow)(nil), (*memberRow)(nil), (*inviteRow)(nil)),
			db.CreateIndex((*memberRow)(nil), "team_members_user_idx", false, "user_id", "created_at"),
			db.CreateIndex((*inviteRow)(nil), "team_invitations_token_key", true, "token_hash"),
			db.CreateIndex((*inviteRow)(nil), "team_invitations_team_idx", false, "team_id", "created_at"),
		),
	}, {
		ID: "0002_members_notify",
		Up: memberTriggers, // Postgres only
	}}}
}

// Team is a team as the API answers it, with the caller's role in it.
type Team struct {
	ID        string              `json:"id" doc:"Team id (UUID)"`
	Name      string              `json:"name"`
	Role      platform.MemberRole `json:"role" enum:"owner,admin,developer,viewer" doc:"The caller's role in the team"`
	CreatedAt time.Time           `json:"createdAt"`
	UpdatedAt time.Time           `json:"updatedAt"`
}

// Member is a member of a team.
type Member struct {
	UserID   string              `json:"userId"`
	Email    string              `json:"email"`
	Role     platform.MemberRole `json:"role" enum:"owner,admin,developer,viewer"`
	JoinedAt time.Time           `json:"joinedAt"`
}

// SchemaName methods name these types in the OpenAPI document (platform.SchemaNamer).
func (Team) SchemaName() string   { return "Team" }
func (Member) SchemaName() string { return "TeamMember" }

func (r *teamRow) out(role string) *Team {
	return &Team{ID: r.ID, Name: r.Name, Role: platform.MemberRole(role), CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC()}
}

func notFound() error { return platform.NotFound("team not found") }

// MemberRole returns userID's role in teamID; "" when they are not a member
// or there is no such team.
func (s *Service) MemberRole(ctx context.Context, teamID, userID string) (platform.MemberRole, error) {
	return memberRole(ctx, s.d.DB, teamID, userID)
}

func memberRole(ctx context.Context, idb bun.IDB, teamID, userID string) (platform.MemberRole, error) {
	if !platform.ValidID(teamID) || userID == "" {
		return "", nil
	}
	var role string
	err := idb.NewSelect().Model((*memberRow)(nil)).Column("role").
		Where("team_id = ? AND user_id = ?", teamID, userID).Scan(ctx, &role)
	if err = db.Translate(err); errors.Is(err, platform.ErrNotFound) {
		return "", nil
	}
	return platform.MemberRole(role), err
}

// access answers the caller's role in teamID when it holds perm: 404 for a
// non-member, 403 naming the role needed otherwise.
func (s *Service) access(ctx context.Context, idb bun.IDB, teamID, userID string, perm platform.Permission) (platform.MemberRole, error) {
	role, err := memberRole(ctx, idb, teamID, userID)
	if err != nil {
		return "", err
	}
	// An API token also needs perm among its scopes, and to be bound to no other team.
	if err := platform.Grant(ctx, teamID, role, perm, notFound()); err != nil {
		return "", err
	}
	return role, nil
}

// teamName checks a team name: 1 to 100 characters after trimming, no control characters.
func teamName(name string) (string, error) {
	name = strings.TrimSpace(name)
	if name == "" {
		return "", platform.Invalid("name: must not be blank")
	}
	if strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return "", platform.Invalid("name: must not contain control characters")
	}
	return name, nil
}
