package auth

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// bearerQuery reads, for a verified access token, the only user columns the
// principal needs (no password hash, no profile) and whether the token's
// session (refresh-token family) is still live. One round trip; the user
// row and the session are read afresh on every request, so a password
// reset, a logout, an email change or a deletion ends access at once.
const bearerQuery = `SELECT u.email, u.email_verified, u.email_via_change, u.session_version FROM auth_users AS u
WHERE u.id = %s AND EXISTS (SELECT 1 FROM auth_refresh_tokens AS rt
WHERE rt.family_id = %s AND rt.user_id = %s AND rt.revoked_at IS NULL)`

// bearerStmt is bearerQuery prepared once per service on a *bun.DB, so the
// database does not parse it again on every request (bun interpolates
// arguments into the text, which defeats the statement cache).
type bearerStmt struct {
	mu   sync.Mutex
	stmt *sql.Stmt
}

type bearerRow struct {
	email         string
	emailVerified bool
	viaChange     bool
	sessionVer    int64
}

func (b *bearerStmt) get(ctx context.Context, idb bun.IDB) (*sql.Stmt, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stmt != nil {
		return b.stmt, nil
	}
	bdb, ok := idb.(*bun.DB)
	if !ok {
		return nil, nil
	}
	q := bearerQuery
	if db.IsPostgres(bdb) {
		q = fmt.Sprintf(q, "$1", "$2", "$3")
	} else {
		q = fmt.Sprintf(q, "?", "?", "?")
	}
	st, err := bdb.DB.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	b.stmt = st
	return st, nil
}

func (b *bearerStmt) close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stmt == nil {
		return nil
	}
	err := b.stmt.Close()
	b.stmt = nil
	return err
}

// lookupBearer answers the bearer columns of user id if session fam is live,
// or sql.ErrNoRows.
func (s *Service) lookupBearer(ctx context.Context, id, fam string) (bearerRow, error) {
	var r bearerRow
	st, err := s.bearer.get(ctx, s.db)
	if err != nil {
		return r, err
	}
	if st != nil {
		err = st.QueryRowContext(ctx, id, fam, id).Scan(&r.email, &r.emailVerified, &r.viaChange, &r.sessionVer)
	} else {
		// Not a *bun.DB (a transaction handed in by a host): the same query through bun.
		err = s.db.QueryRowContext(ctx, fmt.Sprintf(bearerQuery, "?", "?", "?"), id, fam, id).
			Scan(&r.email, &r.emailVerified, &r.viaChange, &r.sessionVer)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return r, sql.ErrNoRows
	}
	return r, err
}
