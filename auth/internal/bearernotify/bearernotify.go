// Package bearernotify makes the Postgres triggers that tell every replica
// when a user's bearer answer changed (auth_users' email, verification or
// session version; a session revoked): they notify Channel with the user id,
// whoever wrote. It is not the cache that listens (auth's bearerCache).
package bearernotify

import (
	"context"

	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// Channel is the Postgres channel on which the triggers name a user
// whose bearer answer changed.
const Channel = "keelson_auth_bearer"

// Triggers (Postgres only) make triggers that notify Channel with the user id after
// any change of the columns the bearer check reads, from any process.
func Triggers(ctx context.Context, idb bun.IDB) error {
	return db.ExecPostgres(ctx, idb, db.NotifyFunction("keelson_auth_user_notify", Channel, "id")+
		db.NotifyFunction("keelson_auth_session_notify", Channel, "user_id")+`
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
}
