package oauth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"time"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// identityRow links an account at a provider to a Keelson user. One row per
// (provider, issuer, provider user id) and at most one per (provider, user).
type identityRow struct {
	bun.BaseModel `bun:"table:oauth_identities"`

	ID             string `bun:"id,pk,type:varchar(36)"`
	Provider       string `bun:"provider,notnull,type:varchar(20)"`
	Issuer         string `bun:"issuer,notnull"` // code-host web origin or OIDC issuer
	ProviderUserID string `bun:"provider_user_id,notnull"`
	UserID         string `bun:"user_id,notnull,type:varchar(36)"`
	Login          string `bun:"login,notnull,default:''"`
	Email          string `bun:"email,notnull,default:''"`
	AccessToken    string `bun:"access_token,notnull,default:''"` // sealed; empty for the idp
	// RefreshToken (sealed) renews an expiring AccessToken (a GitHub App's
	// user token lasts 8 hours, its refresh token 6 months); "" when the
	// code host issued none.
	RefreshToken string `bun:"refresh_token,notnull,default:''"`
	// TokenExpiresAt is when AccessToken expires; NULL when it does not.
	TokenExpiresAt *time.Time `bun:"token_expires_at"`
	CreatedAt      time.Time  `bun:"created_at,notnull"`
	UpdatedAt      time.Time  `bun:"updated_at,notnull"`
}

// stateRow is one started flow, keyed by the SHA-256 of its state. UsedAt is
// set by the one callback that consumes it.
type stateRow struct {
	bun.BaseModel `bun:"table:oauth_states"`

	ID        string     `bun:"id,pk,type:varchar(64)"`
	Provider  string     `bun:"provider,notnull,type:varchar(20)"`
	Mode      string     `bun:"mode,notnull,type:varchar(10)"`
	UserID    string     `bun:"user_id,notnull,default:''"`  // connect mode: who is connecting
	Verifier  string     `bun:"verifier,notnull"`            // sealed PKCE code verifier
	Nonce     string     `bun:"nonce,notnull,default:''"`    // OIDC nonce
	Next      string     `bun:"next_url,notnull,default:''"` // connect mode: where success ends (IssueConnectTicket)
	CreatedAt time.Time  `bun:"created_at,notnull"`
	ExpiresAt time.Time  `bun:"expires_at,notnull"`
	UsedAt    *time.Time `bun:"used_at"`
}

// stateRowV1 is oauth_states as migration 0001 created it (0002 adds next_url).
type stateRowV1 struct {
	bun.BaseModel `bun:"table:oauth_states"`

	ID        string     `bun:"id,pk,type:varchar(64)"`
	Provider  string     `bun:"provider,notnull,type:varchar(20)"`
	Mode      string     `bun:"mode,notnull,type:varchar(10)"`
	UserID    string     `bun:"user_id,notnull,default:''"`
	Verifier  string     `bun:"verifier,notnull"`
	Nonce     string     `bun:"nonce,notnull,default:''"`
	CreatedAt time.Time  `bun:"created_at,notnull"`
	ExpiresAt time.Time  `bun:"expires_at,notnull"`
	UsedAt    *time.Time `bun:"used_at"`
}

// exchangeRow is a one-time code of RedirectCode mode, keyed by its SHA-256.
type exchangeRow struct {
	bun.BaseModel `bun:"table:oauth_exchange_codes"`

	ID        string     `bun:"id,pk,type:varchar(64)"`
	UserID    string     `bun:"user_id,notnull,type:varchar(36)"`
	CreatedAt time.Time  `bun:"created_at,notnull"`
	ExpiresAt time.Time  `bun:"expires_at,notnull"`
	UsedAt    *time.Time `bun:"used_at"`
}

// Migrations are the oauth module's tables, for db.Migrate (after auth's).
func Migrations() db.MigrationSet {
	return db.MigrationSet{Module: "oauth", Migrations: []db.Migration{{
		ID: "0001_init",
		Up: db.Steps(
			db.CreateTables((*identityRow)(nil), (*stateRowV1)(nil), (*exchangeRow)(nil)),
			db.CreateIndex((*identityRow)(nil), "oauth_identities_subject_uq", true, "provider", "issuer", "provider_user_id"),
			db.CreateIndex((*identityRow)(nil), "oauth_identities_user_uq", true, "provider", "user_id"),
			db.CreateIndex((*stateRow)(nil), "oauth_states_expires_idx", false, "expires_at"),
			db.CreateIndex((*exchangeRow)(nil), "oauth_exchange_codes_expires_idx", false, "expires_at"),
		),
	}, {
		ID: "0002_connect_tickets",
		Up: migrateConnectTickets,
	}, {
		// Expiring code-host user tokens are refreshed (issue 23): the
		// refresh token and the access token's expiry.
		ID: "0003_token_refresh",
		Up: db.Steps(
			db.AddColumn("oauth_identities", "refresh_token", "TEXT NOT NULL DEFAULT ''"),
			func(ctx context.Context, idb bun.IDB) error {
				typ := "TIMESTAMP"
				if db.IsPostgres(idb) {
					typ = "TIMESTAMPTZ"
				}
				return db.AddColumn("oauth_identities", "token_expires_at", typ)(ctx, idb)
			},
		),
	}}}
}

// randomToken returns 32 random bytes, base64url.
func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b)
}

func hashToken(raw string) string {
	sum := sha256.Sum256([]byte(raw))
	return hex.EncodeToString(sum[:])
}

// purgeExpired drops flows and codes that expired over an hour ago. It runs
// opportunistically when a flow starts, so the tables stay small without a
// background job.
func (s *Service) purgeExpired(ctx context.Context) {
	cut := s.now().Add(-time.Hour)
	if _, err := s.db.NewDelete().Model((*stateRow)(nil)).Where("expires_at < ?", cut).Exec(ctx); err != nil {
		s.log.WarnContext(ctx, "purge expired oauth states", "err", err)
	}
	if _, err := s.db.NewDelete().Model((*exchangeRow)(nil)).Where("expires_at < ?", cut).Exec(ctx); err != nil {
		s.log.WarnContext(ctx, "purge expired exchange codes", "err", err)
	}
	s.purgeConnectTickets(ctx, cut)
}

func (s *Service) stateInsert(ctx context.Context, r *stateRow) error {
	_, err := s.db.NewInsert().Model(r).Exec(ctx)
	return db.Translate(err)
}

// stateConsume marks the flow of state used, once: of two callbacks with one
// state exactly one gets the row; the other, an expired or unknown state get
// platform.ErrNotFound.
func (s *Service) stateConsume(ctx context.Context, provider, state string) (*stateRow, error) {
	return consumeOnce[stateRow](ctx, s, state, "provider = ?", provider)
}

// consumeOnce marks the row of table M whose id is the hash of secret used,
// once, and returns it: of two requests with one secret exactly one gets the
// row. An unknown, expired or used secret, or one whose row fails cond (a
// condition with args; "" for none), gets platform.ErrNotFound.
func consumeOnce[M any](ctx context.Context, s *Service, secret, cond string, args ...any) (*M, error) {
	id, now := hashToken(secret), s.now()
	q := s.db.NewUpdate().Model((*M)(nil)).Set("used_at = ?", now).
		Where("id = ? AND used_at IS NULL AND expires_at > ?", id, now)
	if cond != "" {
		q = q.Where(cond, args...)
	}
	res, err := q.Exec(ctx)
	if err != nil {
		return nil, db.Translate(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return nil, platform.ErrNotFound
	}
	r := new(M)
	if err := s.db.NewSelect().Model(r).Where("id = ?", id).Scan(ctx); err != nil {
		return nil, db.Translate(err)
	}
	return r, nil
}

func (s *Service) exchangeInsert(ctx context.Context, userID string) (string, error) {
	raw, now := randomToken(), s.now()
	r := &exchangeRow{ID: hashToken(raw), UserID: userID, CreatedAt: now, ExpiresAt: now.Add(s.d.CodeTTL)}
	if _, err := s.db.NewInsert().Model(r).Exec(ctx); err != nil {
		return "", db.Translate(err)
	}
	return raw, nil
}

// exchangeConsume uses up a one-time code and answers its user, or
// platform.ErrNotFound for an unknown, expired or used code.
func (s *Service) exchangeConsume(ctx context.Context, raw string) (string, error) {
	r, err := consumeOnce[exchangeRow](ctx, s, raw, "")
	if err != nil {
		return "", err
	}
	return r.UserID, nil
}

// identityBySubject returns the identity of (provider, issuer, subject), or
// an error wrapping platform.ErrNotFound.
func (s *Service) identityBySubject(ctx context.Context, provider, issuer, subject string) (*identityRow, error) {
	r := new(identityRow)
	err := s.db.NewSelect().Model(r).
		Where("provider = ? AND issuer = ? AND provider_user_id = ?", provider, issuer, subject).Scan(ctx)
	if err != nil {
		return nil, db.Translate(err)
	}
	return r, nil
}

// identityByUser returns the user's identity at provider, or an error wrapping
// platform.ErrNotFound.
func (s *Service) identityByUser(ctx context.Context, provider, userID string) (*identityRow, error) {
	r := new(identityRow)
	if err := s.db.NewSelect().Model(r).Where("provider = ? AND user_id = ?", provider, userID).Scan(ctx); err != nil {
		return nil, db.Translate(err)
	}
	return r, nil
}

// identityLink stores r as the user's identity at its provider, replacing any
// other identity the user had there. It fails with platform.ErrConflict when
// the subject is linked to someone else (also when that happens concurrently:
// the unique index decides).
func (s *Service) identityLink(ctx context.Context, r *identityRow) error {
	return db.InTx(ctx, s.db, func(ctx context.Context, tx bun.Tx) error {
		cur := new(identityRow)
		err := tx.NewSelect().Model(cur).
			Where("provider = ? AND issuer = ? AND provider_user_id = ?", r.Provider, r.Issuer, r.ProviderUserID).Scan(ctx)
		switch err = db.Translate(err); {
		case err == nil && cur.UserID != r.UserID:
			return platform.ErrConflict
		case err == nil:
			_, err = tx.NewUpdate().Model((*identityRow)(nil)).
				Set("login = ?", r.Login).Set("email = ?", r.Email).Set("access_token = ?", r.AccessToken).
				Set("refresh_token = ?", r.RefreshToken).Set("token_expires_at = ?", r.TokenExpiresAt).
				Set("updated_at = ?", r.UpdatedAt).Where("id = ?", cur.ID).Exec(ctx)
			return db.Translate(err)
		case !errors.Is(err, platform.ErrNotFound):
			return err
		}
		if _, err := tx.NewDelete().Model((*identityRow)(nil)).
			Where("provider = ? AND user_id = ?", r.Provider, r.UserID).Exec(ctx); err != nil {
			return db.Translate(err)
		}
		_, err = tx.NewInsert().Model(r).Exec(ctx)
		return db.Translate(err)
	})
}

// identityTouch refreshes the login, email and tokens of an existing identity.
func (s *Service) identityTouch(ctx context.Context, id, login, email string, tk sealedTokens) error {
	_, err := s.db.NewUpdate().Model((*identityRow)(nil)).
		Set("login = ?", login).Set("email = ?", email).Set("access_token = ?", tk.Access).
		Set("refresh_token = ?", tk.Refresh).Set("token_expires_at = ?", tk.ExpiresAt).
		Set("updated_at = ?", s.now()).Where("id = ?", id).Exec(ctx)
	return db.Translate(err)
}

func (s *Service) identityDelete(ctx context.Context, id string) error {
	_, err := s.db.NewDelete().Model((*identityRow)(nil)).Where("id = ?", id).Exec(ctx)
	return db.Translate(err)
}

// CodehostLogin answers the code-host login linked to the user, or "" when
// none is. The codehost app module consumes it as its LinkedAccounts.
func (s *Service) CodehostLogin(ctx context.Context, userID string) (string, error) {
	r, err := s.identityByUser(ctx, providerCodehost, userID)
	if errors.Is(err, platform.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return r.Login, nil
}
