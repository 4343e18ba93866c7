package auth

import (
	"context"
	"time"

	"github.com/keelson-dev/keelson/auth/internal/bearernotify"
	"github.com/keelson-dev/keelson/auth/internal/ratelimit"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// User is an account as the API shows it. It holds no secret: the password
// hash, the TOTP secret and tokens live only in the store.
type User struct {
	ID               platform.ID   `json:"id" doc:"User id (UUID)"`
	Email            string        `json:"email" doc:"Login email, lower-case"`
	Name             *string       `json:"name" doc:"Display name"`
	Username         *string       `json:"username"`
	Bio              *string       `json:"bio"`
	Company          *string       `json:"company"`
	Location         *string       `json:"location"`
	Website          *string       `json:"website"`
	CodehostUsername *string       `json:"codehostUsername" doc:"Username at the code-hosting provider"`
	Image            *string       `json:"image" doc:"Avatar URL"`
	Role             platform.Role `json:"role" enum:"USER,ADMIN"`
	TwoFactorEnabled bool          `json:"twoFactorEnabled"`
	EmailVerified    bool          `json:"emailVerified" doc:"Whether the owner proved the email by its mailed link (POST /auth/verify-email); unverified accounts are never ADMIN and never linked by email"`
	HasPassword      bool          `json:"-"`
	CreatedAt        time.Time     `json:"createdAt"`
	UpdatedAt        time.Time     `json:"updatedAt"`
}

// userRow is the stored account.
type userRow struct {
	bun.BaseModel `bun:"table:auth_users"`

	ID            string `bun:"id,pk,type:varchar(36)"`
	Email         string `bun:"email,notnull"`
	EmailVerified bool   `bun:"email_verified,notnull,default:false"`
	// EmailViaChange: the address came by an email-change link, not by the
	// sign-up's own verification; it never makes the account ADMIN.
	EmailViaChange   bool      `bun:"email_via_change,notnull,default:false"`
	PasswordHash     string    `bun:"password_hash,notnull,default:''"` // empty: no password login (OAuth-only user)
	Name             *string   `bun:"name"`
	Username         *string   `bun:"username"`
	Bio              *string   `bun:"bio"`
	Company          *string   `bun:"company"`
	Location         *string   `bun:"location"`
	Website          *string   `bun:"website"`
	CodehostUsername *string   `bun:"codehost_username"`
	Image            *string   `bun:"image"`
	Role             string    `bun:"role,notnull,default:'USER'"`
	SessionVersion   int64     `bun:"session_version,notnull,default:0"`
	TOTPSecret       string    `bun:"totp_secret,notnull,default:''"` // sealed; empty: none
	TOTPEnabled      bool      `bun:"totp_enabled,notnull,default:false"`
	TOTPLastStep     int64     `bun:"totp_last_step,notnull,default:0"`
	CreatedAt        time.Time `bun:"created_at,notnull"`
	UpdatedAt        time.Time `bun:"updated_at,notnull"`
}

// refreshRow is one refresh token. Tokens of one login share FamilyID and ExpiresAt.
type refreshRow struct {
	bun.BaseModel `bun:"table:auth_refresh_tokens"`

	ID        string     `bun:"id,pk,type:varchar(36)"`
	Hash      string     `bun:"hash,notnull,type:varchar(64)"`
	FamilyID  string     `bun:"family_id,notnull,type:varchar(36)"`
	UserID    string     `bun:"user_id,notnull,type:varchar(36)"`
	CreatedAt time.Time  `bun:"created_at,notnull"`
	ExpiresAt time.Time  `bun:"expires_at,notnull"`
	UsedAt    *time.Time `bun:"used_at"`
	RevokedAt *time.Time `bun:"revoked_at"`

	User *userRow `bun:"rel:belongs-to,join:user_id=id,on_delete:CASCADE"`
}

// resetRow is one password-reset token.
type resetRow struct {
	bun.BaseModel `bun:"table:auth_reset_tokens"`

	ID        string     `bun:"id,pk,type:varchar(36)"`
	Hash      string     `bun:"hash,notnull,type:varchar(64)"`
	UserID    string     `bun:"user_id,notnull,type:varchar(36)"`
	CreatedAt time.Time  `bun:"created_at,notnull"`
	ExpiresAt time.Time  `bun:"expires_at,notnull"`
	UsedAt    *time.Time `bun:"used_at"`

	User *userRow `bun:"rel:belongs-to,join:user_id=id,on_delete:CASCADE"`
}

// recoveryRow is one 2FA recovery code.
type recoveryRow struct {
	bun.BaseModel `bun:"table:auth_recovery_codes"`

	ID        string     `bun:"id,pk,type:varchar(36)"`
	UserID    string     `bun:"user_id,notnull,type:varchar(36)"`
	Hash      string     `bun:"hash,notnull,type:varchar(64)"`
	CreatedAt time.Time  `bun:"created_at,notnull"`
	UsedAt    *time.Time `bun:"used_at"`

	User *userRow `bun:"rel:belongs-to,join:user_id=id,on_delete:CASCADE"`
}

// emailTokenRow is one mailed email link: a verification of the account's
// address (kind verify) or the confirmation of a new one (kind change).
type emailTokenRow struct {
	bun.BaseModel `bun:"table:auth_email_tokens"`

	ID        string     `bun:"id,pk,type:varchar(36)"`
	Hash      string     `bun:"hash,notnull,type:varchar(64)"`
	UserID    string     `bun:"user_id,notnull,type:varchar(36)"`
	Kind      string     `bun:"kind,notnull,type:varchar(16)"`
	Email     string     `bun:"email,notnull"` // the address the link was mailed to
	CreatedAt time.Time  `bun:"created_at,notnull"`
	ExpiresAt time.Time  `bun:"expires_at,notnull"`
	UsedAt    *time.Time `bun:"used_at"`

	User *userRow `bun:"rel:belongs-to,join:user_id=id,on_delete:CASCADE"`
}

// Kinds of email tokens.
const (
	emailKindVerify = "verify"
	emailKindChange = "change"
)

// loginSourceRow recorded that a client address logged in successfully to
// an account. Unused since device tokens replaced known addresses (an
// address is shared, a device token is not); the table stays for the
// migrations' sake.
type loginSourceRow struct {
	bun.BaseModel `bun:"table:auth_login_sources"`

	UserID   string    `bun:"user_id,pk,type:varchar(36)"`
	Source   string    `bun:"source,pk,type:varchar(64)"`
	LastSeen time.Time `bun:"last_seen,notnull"`

	User *userRow `bun:"rel:belongs-to,join:user_id=id,on_delete:CASCADE"`
}

// challengeRow is a pending second factor of a login that a provider vouched
// for (OAuth): the account has 2FA on, so tokens wait for a code.
type challengeRow struct {
	bun.BaseModel `bun:"table:auth_2fa_challenges"`

	ID        string     `bun:"id,pk,type:varchar(64)"` // SHA-256 of the challenge
	UserID    string     `bun:"user_id,notnull,type:varchar(36)"`
	Attempts  int        `bun:"attempts,notnull,default:0"`
	CreatedAt time.Time  `bun:"created_at,notnull"`
	ExpiresAt time.Time  `bun:"expires_at,notnull"`
	UsedAt    *time.Time `bun:"used_at"`

	User *userRow `bun:"rel:belongs-to,join:user_id=id,on_delete:CASCADE"`
}

// Migrations are the auth module's tables, for db.Migrate.
func Migrations() db.MigrationSet {
	return db.MigrationSet{Module: "auth", Migrations: []db.Migration{{
		ID: "0001_init",
		Up: db.Steps(
			db.CreateTables((*userRow)(nil), (*refreshRow)(nil), (*resetRow)(nil), (*recoveryRow)(nil)),
			db.CreateIndex((*userRow)(nil), "auth_users_email_uq", true, "email"),
			db.CreateIndex((*refreshRow)(nil), "auth_refresh_tokens_hash_uq", true, "hash"),
			db.CreateIndex((*refreshRow)(nil), "auth_refresh_tokens_family_idx", false, "family_id"),
			db.CreateIndex((*refreshRow)(nil), "auth_refresh_tokens_user_idx", false, "user_id"),
			db.CreateIndex((*resetRow)(nil), "auth_reset_tokens_hash_uq", true, "hash"),
			db.CreateIndex((*resetRow)(nil), "auth_reset_tokens_user_idx", false, "user_id"),
			db.CreateIndex((*recoveryRow)(nil), "auth_recovery_codes_user_idx", false, "user_id"),
		),
	}, {
		ID: "0002_verification_limits",
		Up: db.Steps(
			db.CreateTables((*emailTokenRow)(nil), (*ratelimit.Row)(nil), (*loginSourceRow)(nil)),
			db.CreateIndex((*emailTokenRow)(nil), "auth_email_tokens_hash_uq", true, "hash"),
			db.CreateIndex((*emailTokenRow)(nil), "auth_email_tokens_user_idx", false, "user_id"),
			db.CreateIndex((*ratelimit.Row)(nil), "auth_rate_limits_last_idx", false, "last_ns"),
			// The role is derived from the verified email at every request;
			// a role stored at sign-up grants nothing any more.
			func(ctx context.Context, idb bun.IDB) error {
				_, err := idb.NewUpdate().Model((*userRow)(nil)).Set("role = ?", "USER").Where("role <> ?", "USER").Exec(ctx)
				return err
			},
		),
	}, {
		ID: "0003_2fa_challenges",
		Up: db.Steps(
			db.CreateTables((*challengeRow)(nil)),
			db.CreateIndex((*challengeRow)(nil), "auth_2fa_challenges_expires_idx", false, "expires_at"),
		),
	}, {
		// Postgres: tell every replica's bearer cache (bearer_cache.go).
		ID: "0004_bearer_notify",
		Up: bearernotify.Triggers, // Postgres only
	}, {
		// ADMIN only for an address verified as the sign-up's own (issue 23).
		ID: "0005_email_via_change",
		Up: db.AddColumn("auth_users", "email_via_change", "BOOLEAN NOT NULL DEFAULT FALSE"),
	}}}
}

// roleOf derives the role at every read (so at every authenticated
// request): ADMIN only while the email is listed in admins
// (KEELSON_ADMIN_EMAILS) now, verified, and verified as the account's own
// sign-up address (its verification link), never by an email-change link:
// whoever owns a listed address and clicks a change link someone else asked
// for must not make that account ADMIN.
func roleOf(admins map[string]bool, email string, verified, viaChange bool) platform.Role {
	if verified && !viaChange && admins[email] {
		return platform.RoleAdmin
	}
	return platform.RoleUser
}

// toUser shows the stored account, its role derived by roleOf.
func (r *userRow) toUser(admins map[string]bool) *User {
	role := roleOf(admins, r.Email, r.EmailVerified, r.EmailViaChange)
	return &User{
		ID: r.ID, Email: r.Email, Name: r.Name, Username: r.Username, Bio: r.Bio, Company: r.Company,
		Location: r.Location, Website: r.Website, CodehostUsername: r.CodehostUsername, Image: r.Image,
		Role: role, TwoFactorEnabled: r.TOTPEnabled, EmailVerified: r.EmailVerified,
		HasPassword: r.PasswordHash != "", CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(),
	}
}
