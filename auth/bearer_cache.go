package auth

import (
	"context"

	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// bearerCache keeps, per user and session (refresh-token family), the bearer
// columns Authenticate read for a live session, so a protected request needs
// no query while nothing changed. Only positive answers are kept, and only
// under the session version they were read with.
//
// It is exact, not timed: every write that can change the answer (a password
// reset, a logout, a reused refresh token, an email change or verification,
// which moves the derived role) invalidates the user after it commits, before
// it answers. A read that raced such a write cannot store what it read: puts
// carry the generation seen before the query, and every invalidation bumps
// it. On Postgres, other replicas hear of a change through LISTEN/NOTIFY
// (triggers on auth_users and auth_refresh_tokens name the user, whoever
// wrote); until the listener has proven its connection with a ping of its own
// the cache serves nothing, and it is emptied and bypassed whenever the
// connection fails or a ping goes unanswered.
type bearerCache = db.ExactCache[string, bearerRow] // user id -> family -> row

// newBearerCache keeps at most max sessions.
func newBearerCache(max int, live bool) *bearerCache {
	return db.NewExactCache[string, bearerRow](int64(max), nil, live)
}

// bearerChannel is the Postgres channel on which the triggers name a user
// whose bearer answer changed.
const bearerChannel = "keelson_auth_bearer"

// bearerTriggers (Postgres only) notify bearerChannel with the user id after
// any change of the columns the bearer check reads, from any process.
func bearerTriggers(ctx context.Context, idb bun.IDB) error {
	if !db.IsPostgres(idb) {
		return nil
	}
	_, err := idb.ExecContext(ctx, `
`+db.NotifyFunction("keelson_auth_user_notify", bearerChannel, "id")+`
`+db.NotifyFunction("keelson_auth_session_notify", bearerChannel, "user_id")+`
DROP TRIGGER IF EXISTS keelson_auth_user_update ON auth_users;
CREATE TRIGGER keelson_auth_user_update AFTER UPDATE ON auth_users FOR EACH ROW
	WHEN (OLD.email IS DISTINCT FROM NEW.email OR OLD.email_verified IS DISTINCT FROM NEW.email_verified
		OR OLD.session_version IS DISTINCT FROM NEW.session_version OR OLD.id IS DISTINCT FROM NEW.id)
	EXECUTE FUNCTION keelson_auth_user_notify();
DROP TRIGGER IF EXISTS keelson_auth_user_delete ON auth_users;
CREATE TRIGGER keelson_auth_user_delete AFTER DELETE ON auth_users FOR EACH ROW
	EXECUTE FUNCTION keelson_auth_user_notify();
DROP TRIGGER IF EXISTS keelson_auth_session_update ON auth_refresh_tokens;
CREATE TRIGGER keelson_auth_session_update AFTER UPDATE ON auth_refresh_tokens FOR EACH ROW
	WHEN (OLD.revoked_at IS DISTINCT FROM NEW.revoked_at OR OLD.family_id IS DISTINCT FROM NEW.family_id
		OR OLD.user_id IS DISTINCT FROM NEW.user_id)
	EXECUTE FUNCTION keelson_auth_session_notify();
DROP TRIGGER IF EXISTS keelson_auth_session_delete ON auth_refresh_tokens;
CREATE TRIGGER keelson_auth_session_delete AFTER DELETE ON auth_refresh_tokens FOR EACH ROW
	EXECUTE FUNCTION keelson_auth_session_notify();`)
	return err
}
