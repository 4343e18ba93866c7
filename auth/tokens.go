package auth

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/keelson-dev/keelson/auth/internal/onetime"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// TokenPair is the answer of login and refresh (DESIGN.md section 4).
type TokenPair struct {
	AccessToken  string `json:"accessToken" doc:"JWT for Authorization: Bearer"`
	RefreshToken string `json:"refreshToken" doc:"Opaque, single-use; trade it at POST /auth/refresh"`
	TokenType    string `json:"tokenType" enum:"Bearer"`
	ExpiresIn    int    `json:"expiresIn" doc:"Lifetime of the access token in seconds"`
}

const tokenTypeAccess = "access"

type accessClaims struct {
	jwt.RegisteredClaims
	Role string `json:"role"`
	Type string `json:"typ"`
	// SV is the user's session version: a password reset bumps it, ending
	// every access token issued before.
	SV int64 `json:"sv"`
	// Fam is the session (refresh-token family) the token belongs to: when the
	// session is revoked (logout, reuse, email change) the token stops working.
	Fam string `json:"fam"`
}

func (s *Service) signAccess(u *userRow, family string) (string, error) {
	now := s.now()
	c := accessClaims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    s.d.Issuer,
			Subject:   u.ID,
			Audience:  jwt.ClaimStrings{s.d.Audience},
			IssuedAt:  jwt.NewNumericDate(now),
			NotBefore: jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(s.d.AccessTTL)),
			ID:        platform.NewID(),
		},
		Role: string(u.toUser(s.admins).Role),
		Type: tokenTypeAccess,
		SV:   u.SessionVersion,
		Fam:  family,
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(s.d.JWTSecret)
}

var errBadToken = platform.Unauthorized("invalid or expired access token")

// Authenticate implements platform.Authenticator: it accepts an HS256 access
// token of this issuer and audience, unexpired, of type "access", whose user
// still exists with the same session version and whose session (refresh-token
// family) is not revoked. The role is derived from the user as stored now
// (verified email listed in AdminEmails), so a change takes effect at once.
func (s *Service) Authenticate(ctx context.Context, token string) (platform.Principal, error) {
	c, err := s.parseAccess(token)
	if err != nil {
		return platform.Principal{}, err
	}
	r, ok := s.cache.Get(c.Subject, c.Fam)
	if !ok || r.sessionVer != c.SV {
		gen := s.cache.Begin()
		r, err = s.lookupBearer(ctx, c.Subject, c.Fam)
		if errors.Is(err, sql.ErrNoRows) {
			return platform.Principal{}, errBadToken
		}
		if err != nil {
			return platform.Principal{}, err
		}
		if r.sessionVer != c.SV {
			return platform.Principal{}, errBadToken
		}
		s.cache.Put(gen, c.Subject, c.Fam, r)
	}
	// ADMIN is derived per request from the verified email, as in toUser.
	return platform.Principal{UserID: c.Subject, Email: r.email, Role: roleOf(s.admins, r.email, r.emailVerified, r.viaChange)}, nil
}

// parseAccess checks an access token's signature and claims (not the store);
// a token verified before is answered from s.verified until it expires.
func (s *Service) parseAccess(token string) (accessClaims, error) {
	now := s.now()
	if c, ok := s.verified.Get(token, now); ok {
		return c, nil
	}
	var c accessClaims
	_, err := jwt.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return s.d.JWTSecret, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithIssuer(s.d.Issuer),
		jwt.WithAudience(s.d.Audience),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithTimeFunc(s.now),
	)
	if err != nil || c.Type != tokenTypeAccess || !platform.ValidID(c.Subject) || !platform.ValidID(c.Fam) {
		return accessClaims{}, errBadToken
	}
	if c.IssuedAt != nil && c.NotBefore != nil { // as signAccess makes them; valid from the later
		s.verified.Put(token, c, time.Unix(max(c.IssuedAt.Unix(), c.NotBefore.Unix()), 0), c.ExpiresAt.Time, now)
	}
	return c, nil
}

// IssueTokens starts a new login session (refresh-token family) for the user
// and answers its first token pair. The OAuth flows call it after a provider
// vouched for the user.
func (s *Service) IssueTokens(ctx context.Context, userID platform.ID) (pair TokenPair, err error) {
	row, err := s.userRow(ctx, s.db, "id", userID)
	if err != nil {
		return TokenPair{}, err
	}
	err = db.InTx(ctx, s.db, func(ctx context.Context, tx bun.Tx) error {
		pair, err = s.startSession(ctx, tx, row, "through an identity provider")
		return err
	})
	return pair, err
}

// startSession issues the first token pair of a new session of row and
// records the login (how: in words), in tx.
func (s *Service) startSession(ctx context.Context, tx bun.IDB, row *userRow, how string) (TokenPair, error) {
	pair, err := s.issue(ctx, tx, row, platform.NewID(), s.now().Add(s.d.RefreshTTL))
	if err != nil {
		return TokenPair{}, err
	}
	return pair, s.record(ctx, tx, row.ID, "account.login", "logged in "+how)
}

// issue stores a new refresh token of family (expiring at exp) and signs an
// access token for u.
func (s *Service) issue(ctx context.Context, idb bun.IDB, u *userRow, family string, exp time.Time) (TokenPair, error) {
	raw, hash := onetime.NewToken()
	rt := &refreshRow{ID: platform.NewID(), Hash: hash, FamilyID: family, UserID: u.ID, CreatedAt: s.now(), ExpiresAt: exp}
	if _, err := idb.NewInsert().Model(rt).Exec(ctx); err != nil {
		return TokenPair{}, db.Translate(err)
	}
	access, err := s.signAccess(u, family)
	if err != nil {
		return TokenPair{}, err
	}
	return TokenPair{AccessToken: access, RefreshToken: raw, TokenType: "Bearer", ExpiresIn: int(s.d.AccessTTL / time.Second)}, nil
}

var errBadRefresh = platform.Unauthorized("invalid or expired refresh token")

// Refresh trades a refresh token for a new pair of the same family. The old
// token is used up atomically: of two concurrent calls with one token exactly
// one wins. A token presented after it was used revokes its whole family.
func (s *Service) Refresh(ctx context.Context, raw string) (TokenPair, error) {
	var (
		out        TokenPair
		reusedUser string
	)
	err := db.InTx(ctx, s.db, func(ctx context.Context, tx bun.Tx) error {
		now := s.now()
		rt := new(refreshRow)
		if err := tx.NewSelect().Model(rt).Where("hash = ?", onetime.Hash(raw)).Scan(ctx); err != nil {
			return db.Translate(err)
		}
		if rt.RevokedAt != nil || !now.Before(rt.ExpiresAt) {
			return errBadRefresh
		}
		if rt.UsedAt == nil {
			res, err := tx.NewUpdate().Model((*refreshRow)(nil)).Set("used_at = ?", now).
				Where("id = ? AND used_at IS NULL AND revoked_at IS NULL", rt.ID).Exec(ctx)
			if err != nil {
				return db.Translate(err)
			}
			if n, _ := res.RowsAffected(); n == 1 {
				u, err := s.userRow(ctx, tx, "id", rt.UserID)
				if err != nil {
					return err
				}
				out, err = s.issue(ctx, tx, u, rt.FamilyID, rt.ExpiresAt)
				return err
			}
			// Lost a race with a concurrent refresh of the same token: that
			// is a second use too.
		}
		reusedUser = rt.UserID
		return revokeFamily(ctx, tx, rt.FamilyID, now)
	})
	switch {
	case errors.Is(err, platform.ErrNotFound):
		return TokenPair{}, errBadRefresh
	case err != nil:
		return TokenPair{}, err
	case reusedUser != "":
		s.cache.InvalidateOwner(reusedUser)
		s.log.WarnContext(ctx, "refresh token reused; its session is revoked", "user_id", reusedUser)
		return TokenPair{}, errBadRefresh
	}
	return out, nil
}

func revokeFamily(ctx context.Context, idb bun.IDB, family string, now time.Time) error {
	_, err := idb.NewUpdate().Model((*refreshRow)(nil)).Set("revoked_at = ?", now).
		Where("family_id = ? AND revoked_at IS NULL", family).Exec(ctx)
	return db.Translate(err)
}

// RevokeSession revokes the family of the refresh token raw if it belongs to
// userID. Unknown tokens are ignored: logout always succeeds.
func (s *Service) RevokeSession(ctx context.Context, userID platform.ID, raw string) error {
	rt := new(refreshRow)
	err := s.db.NewSelect().Model(rt).Where("hash = ? AND user_id = ?", onetime.Hash(raw), userID).Scan(ctx)
	if err != nil {
		if err = db.Translate(err); errors.Is(err, platform.ErrNotFound) {
			return nil
		}
		return err
	}
	defer s.cache.InvalidateOwner(rt.UserID)
	return revokeFamily(ctx, s.db, rt.FamilyID, s.now())
}

// revokeAllSessions revokes every refresh token of the user.
func revokeAllSessions(ctx context.Context, idb bun.IDB, userID string, now time.Time) error {
	_, err := idb.NewUpdate().Model((*refreshRow)(nil)).Set("revoked_at = ?", now).
		Where("user_id = ? AND revoked_at IS NULL", userID).Exec(ctx)
	if err != nil {
		return fmt.Errorf("revoke sessions: %w", db.Translate(err))
	}
	return nil
}
