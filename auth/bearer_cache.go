package auth

import (
	"context"
	"sync"
	"sync/atomic"

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
type bearerCache struct {
	max int // entries; <= 0 disables the cache

	mu    sync.RWMutex
	gen   uint64
	n     int
	users map[string]map[string]bearerRow // user id -> family -> row

	live atomic.Bool // may serve and store (SQLite: always; Postgres: while the listener is proven)
}

func newBearerCache(max int, live bool) *bearerCache {
	c := &bearerCache{max: max, users: map[string]map[string]bearerRow{}}
	c.live.Store(live && max > 0)
	return c
}

func (c *bearerCache) get(user, fam string) (bearerRow, bool) {
	if !c.live.Load() {
		return bearerRow{}, false
	}
	c.mu.RLock()
	r, ok := c.users[user][fam]
	c.mu.RUnlock()
	return r, ok
}

// begin returns the generation to pass to put after reading the database.
func (c *bearerCache) begin() uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.gen
}

// put stores r unless anything was invalidated since begin returned gen.
func (c *bearerCache) put(gen uint64, user, fam string, r bearerRow) {
	if !c.live.Load() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen || !c.live.Load() {
		return
	}
	if c.n >= c.max {
		c.clearLocked()
	}
	m := c.users[user]
	if m == nil {
		m = map[string]bearerRow{}
		c.users[user] = m
	}
	if _, ok := m[fam]; !ok {
		c.n++
	}
	m[fam] = r
}

// invalidate drops every session of user.
func (c *bearerCache) invalidate(user string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if m, ok := c.users[user]; ok {
		c.n -= len(m)
		delete(c.users, user)
	}
}

// reset empties the cache and sets whether it may serve.
func (c *bearerCache) reset(live bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clearLocked()
	c.live.Store(live && c.max > 0)
}

func (c *bearerCache) clearLocked() {
	c.gen++
	c.n = 0
	clear(c.users)
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
CREATE OR REPLACE FUNCTION keelson_auth_user_notify() RETURNS trigger AS $$
BEGIN
	IF TG_OP = 'DELETE' THEN
		PERFORM pg_notify('`+bearerChannel+`', OLD.id);
	ELSE
		PERFORM pg_notify('`+bearerChannel+`', NEW.id);
	END IF;
	RETURN NULL;
END $$ LANGUAGE plpgsql;
CREATE OR REPLACE FUNCTION keelson_auth_session_notify() RETURNS trigger AS $$
BEGIN
	IF TG_OP = 'DELETE' THEN
		PERFORM pg_notify('`+bearerChannel+`', OLD.user_id);
	ELSE
		PERFORM pg_notify('`+bearerChannel+`', NEW.user_id);
	END IF;
	RETURN NULL;
END $$ LANGUAGE plpgsql;
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

// Invalidate drops the user a notification names (db.Invalidator).
func (c *bearerCache) Invalidate(_, user string) { c.invalidate(user) }

// Reset empties the cache and sets whether it may serve (db.Invalidator).
func (c *bearerCache) Reset(live bool) { c.reset(live) }
