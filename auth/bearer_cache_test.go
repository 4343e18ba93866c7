package auth

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/auth/internal/onetime"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/keelson-dev/keelson/platform/platformtest"
	"github.com/uptrace/bun"
)

// waitLive waits until e's bearer cache serves (on Postgres: once its
// listener has heard its own ping).
func (e *env) waitLive() {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !e.svc.cache.Live() {
		if time.Now().After(deadline) {
			e.t.Fatalf("the bearer cache did not serve within 30s; log:\n%s", e.logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// cachedAs authenticates tok on e until its session is in e's bearer cache,
// and answers the principal.
func (e *env) cachedAs(tok string) platform.Principal {
	e.t.Helper()
	c, err := e.svc.parseAccess(tok)
	if err != nil {
		e.t.Fatal(err)
	}
	var p platform.Principal
	for range 2 {
		if p, err = e.svc.Authenticate(context.Background(), tok); err != nil {
			e.t.Fatalf("authenticate: %v", err)
		}
	}
	if _, ok := e.svc.cache.Get(c.Subject, c.Fam); !ok {
		e.t.Fatal("the session is not in the bearer cache after two checks")
	}
	return p
}

func (e *env) refused(tok string) bool {
	_, err := e.svc.Authenticate(context.Background(), tok)
	return err == errBadToken
}

// Every write that changes a bearer answer ends what the cache remembered
// before it answers: password reset, logout, a reused refresh token, an
// email change (other sessions), and email verification (the derived role).
func TestBearerCacheInvalidatedAtOnce(t *testing.T) {
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, nil)
		e.waitLive()
		e.register("ada@example.com")

		// The cache does serve: a revocation written behind the service's
		// back (no invalidation on SQLite) is not seen, which is why every
		// write path must invalidate.
		if bdb.Dialect().Name().String() == "sqlite" {
			s := e.tokens("ada@example.com")
			e.cachedAs(s.AccessToken)
			if _, err := bdb.NewUpdate().Model((*refreshRow)(nil)).Set("revoked_at = ?", e.clock.Now()).
				Where("hash = ?", onetime.Hash(s.RefreshToken)).Exec(context.Background()); err != nil {
				t.Fatal(err)
			}
			if e.refused(s.AccessToken) {
				t.Fatal("a cached session was read from the database again")
			}
		}

		// Password reset: every session ends with the answer.
		s1, s2 := e.tokens("ada@example.com"), e.tokens("ada@example.com")
		e.cachedAs(s1.AccessToken)
		e.cachedAs(s2.AccessToken)
		e.want(e.do("POST", "/auth/forgot-password", "", map[string]any{"email": "ada@example.com"}), http.StatusOK, nil)
		resets := e.resets()
		e.want(e.do("POST", "/auth/reset-password", "", map[string]any{"token": resetToken(t, resets[len(resets)-1]),
			"newPassword": testPassword, "confirmPassword": testPassword}), http.StatusOK, nil)
		if !e.refused(s1.AccessToken) || !e.refused(s2.AccessToken) {
			t.Fatal("an access token of before the reset still works")
		}

		// Logout of one session: that session ends, the other stays.
		l1, l2 := e.tokens("ada@example.com"), e.tokens("ada@example.com")
		e.cachedAs(l1.AccessToken)
		e.cachedAs(l2.AccessToken)
		e.want(e.do("POST", "/auth/logout", l1.AccessToken, map[string]any{"refreshToken": l1.RefreshToken}), http.StatusOK, nil)
		if !e.refused(l1.AccessToken) || e.refused(l2.AccessToken) {
			t.Fatal("logout: the logged-out session works, or the other one ended")
		}

		// A reused refresh token revokes its session.
		var next TokenPair
		e.want(e.refresh(l2.RefreshToken), http.StatusOK, &next)
		e.cachedAs(next.AccessToken)
		e.wantErr(e.refresh(l2.RefreshToken), 401, "")
		if !e.refused(next.AccessToken) || !e.refused(l2.AccessToken) {
			t.Fatal("a session whose refresh token was reused still works")
		}

		// An email change ends every other session at once.
		keep, other := e.tokens("ada@example.com"), e.tokens("ada@example.com")
		e.cachedAs(other.AccessToken)
		e.want(e.do("PATCH", "/auth/me", keep.AccessToken, map[string]any{"email": "ada2@example.com", "currentPassword": testPassword}), http.StatusOK, nil)
		if !e.refused(other.AccessToken) || e.refused(keep.AccessToken) {
			t.Fatal("email change: another session works, or the caller's ended")
		}

		// Verifying an admin address makes the cached USER an ADMIN at once.
		e.register("boss@example.com")
		boss := e.tokens("boss@example.com")
		if p := e.cachedAs(boss.AccessToken); p.Role != platform.RoleUser {
			t.Fatalf("unverified admin address: role %s", p.Role)
		}
		e.verify("boss@example.com")
		if p, err := e.svc.Authenticate(context.Background(), boss.AccessToken); err != nil || p.Role != platform.RoleAdmin {
			t.Fatalf("after verification: %+v, %v; want ADMIN", p, err)
		}
	})
}

// Two replicas on one Postgres: a change written through one (or by anything
// else, straight into the tables) ends the session on the other, which
// learns it through LISTEN/NOTIFY. A listener that lost its connection
// bypasses the cache until it is back.
func TestBearerCacheAcrossReplicas(t *testing.T) {
	bdb := dbtest.Postgres(t, sets...)
	a, b := newEnv(t, bdb, nil), newEnv(t, bdb, nil)
	b.clock = a.clock
	b.svc.d.Clock = a.clock
	a.waitLive()
	b.waitLive()
	a.register("ada@example.com")
	ended := func(tok string) {
		t.Helper()
		platformtest.Eventually(t, 10*time.Second, "replica b to refuse the session", func() bool { return b.refused(tok) })
	}

	// Password reset on a.
	s := a.tokens("ada@example.com")
	b.cachedAs(s.AccessToken)
	a.want(a.do("POST", "/auth/forgot-password", "", map[string]any{"email": "ada@example.com"}), http.StatusOK, nil)
	a.want(a.do("POST", "/auth/reset-password", "", map[string]any{"token": resetToken(t, a.resets()[0]),
		"newPassword": testPassword, "confirmPassword": testPassword}), http.StatusOK, nil)
	ended(s.AccessToken)

	// Logout on a.
	s = a.tokens("ada@example.com")
	b.cachedAs(s.AccessToken)
	a.want(a.do("POST", "/auth/logout", s.AccessToken, map[string]any{"refreshToken": s.RefreshToken}), http.StatusOK, nil)
	ended(s.AccessToken)

	// Any writer at all: the triggers name the user (here a session revoked
	// and a user deleted by hand).
	s = a.tokens("ada@example.com")
	b.cachedAs(s.AccessToken)
	a.cachedAs(s.AccessToken)
	if _, err := bdb.ExecContext(context.Background(), "UPDATE auth_refresh_tokens SET revoked_at = now() WHERE hash = ?",
		onetime.Hash(s.RefreshToken)); err != nil {
		t.Fatal(err)
	}
	ended(s.AccessToken)
	platformtest.Eventually(t, 10*time.Second, "replica a to refuse the session", func() bool { return a.refused(s.AccessToken) })

	s = a.tokens("ada@example.com")
	b.cachedAs(s.AccessToken)
	if _, err := bdb.ExecContext(context.Background(), "DELETE FROM auth_users WHERE email = 'ada@example.com'"); err != nil {
		t.Fatal(err)
	}
	ended(s.AccessToken)

	// The listener's connection is cut: the cache is bypassed (nothing was
	// heard meanwhile), then serves again once the listener is back.
	a.register("bob@example.com")
	s = a.tokens("bob@example.com")
	b.cachedAs(s.AccessToken)
	if _, err := bdb.ExecContext(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = 'LISTEN "`+bearerChannel+`"'`); err != nil {
		t.Fatal(err)
	}
	platformtest.Eventually(t, 20*time.Second, "b's cache to be emptied after its listener was cut", func() bool {
		c, _ := b.svc.parseAccess(s.AccessToken)
		_, ok := b.svc.cache.Get(c.Subject, c.Fam)
		return !ok
	})
	b.waitLive()
	b.cachedAs(s.AccessToken)
}

// The verified-token cache (parseAccess) skips only the signature check: a
// cached token still expires on the service's clock, and the session and
// user checks still run on every request (a deleted user's token is refused).
func TestVerifiedTokenCacheKeepsEveryCheck(t *testing.T) {
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, nil)
		e.waitLive()
		u := e.register("ada@example.com")
		s := e.tokens("ada@example.com")
		e.cachedAs(s.AccessToken)
		if _, ok := e.svc.verified.Get(s.AccessToken, e.clock.Now()); !ok {
			t.Fatal("a verified token is not in the verified-token cache")
		}
		e.clock.Advance(e.svc.d.AccessTTL)
		if !e.refused(s.AccessToken) {
			t.Fatal("a cached access token works past its expiry")
		}
		s = e.tokens("ada@example.com")
		e.cachedAs(s.AccessToken)
		if err := e.svc.DeleteUser(context.Background(), u.ID); err != nil {
			t.Fatal(err)
		}
		if !e.refused(s.AccessToken) {
			t.Fatal("a cached access token of a deleted user works")
		}
	})
}
