package auth

import (
	"github.com/keelson-dev/keelson/auth/internal/bearernotify"
	"github.com/keelson-dev/keelson/platform/db"
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
// whose bearer answer changed (auth/internal/bearernotify).
const bearerChannel = bearernotify.Channel
