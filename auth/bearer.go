package auth

import (
	"context"
	"database/sql"
	"errors"

	"github.com/uptrace/bun"
)

// bearerQuery reads, for a verified access token, the only user columns the
// principal needs (no password hash, no profile) and whether the token's
// session (refresh-token family) is still live. One round trip; the user
// row and the session are read afresh on every request, so a password
// reset, a logout, an email change or a deletion ends access at once.
const bearerQuery = `SELECT u.email, u.email_verified, u.email_via_change, u.session_version FROM auth_users AS u
WHERE u.id = ? AND EXISTS (SELECT 1 FROM auth_refresh_tokens AS rt
WHERE rt.family_id = ? AND rt.user_id = ? AND rt.revoked_at IS NULL)`

type bearerRow struct {
	email         string
	emailVerified bool
	viaChange     bool
	sessionVer    int64
}

// lookupBearer answers the bearer columns of user id if session fam is live,
// or sql.ErrNoRows.
func (s *Service) lookupBearer(ctx context.Context, id, fam string) (bearerRow, error) {
	var r bearerRow
	dest := []any{&r.email, &r.emailVerified, &r.viaChange, &r.sessionVer}
	var err error
	if bdb, ok := s.db.(*bun.DB); ok {
		// Prepared once per service (bun interpolates arguments into the
		// text, which defeats the database's statement cache).
		err = s.bearer.QueryRow(ctx, bdb, id, fam, id).Scan(dest...)
	} else {
		// Not a *bun.DB (a transaction handed in by a host): the same query through bun.
		err = s.db.QueryRowContext(ctx, bearerQuery, id, fam, id).Scan(dest...)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return r, sql.ErrNoRows
	}
	return r, err
}
