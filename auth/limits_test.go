package auth

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/uptrace/bun"
)

func TestLoginLimits(t *testing.T) {
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, func(d *Deps) {
			d.Limits.LoginPerAccount = Limit{Max: 3, Per: 15 * time.Minute}
			d.Limits.LoginPerIP = Limit{Max: 6, Per: 15 * time.Minute}
		})
		e.register("ada@example.com")

		// Per account: three failures, then 429 with Retry-After, before any hash runs.
		for i := 0; i < 3; i++ {
			e.wantErr(e.login("ada@example.com", "wrong-password", ""), 401, "")
		}
		hashes := e.svc.hasher.runs.Load()
		resp := e.login("ADA@example.com", testPassword, "") // right password, any case: still limited
		e.wantErr(resp, 429, "too many attempts")
		ra, err := strconv.Atoi(resp.Header().Get("Retry-After"))
		if err != nil || ra < 1 || ra > 300 {
			t.Errorf("Retry-After %q", resp.Header().Get("Retry-After"))
		}
		if e.svc.hasher.runs.Load() != hashes {
			t.Error("a rate-limited login still hashed the password")
		}
		// The budget comes back with time (3 per 15 minutes: one per 5).
		e.clock.Advance(5 * time.Minute)
		e.want(e.login("ada@example.com", testPassword, ""), http.StatusOK, nil)
		// A successful login gives its attempt back.
		e.want(e.login("ada@example.com", testPassword, ""), http.StatusOK, nil)

		// Per client address, across accounts: a fresh env with an IP budget of 3.
		e2 := newEnv(t, bdb, func(d *Deps) { d.Limits.LoginPerIP = Limit{Max: 3, Per: 15 * time.Minute} })
		for i := 0; i < 3; i++ {
			e2.wantErr(e2.login(fmt.Sprintf("u%d@example.com", i), "whatever", ""), 401, "")
		}
		e2.wantErr(e2.login("u9@example.com", "whatever", ""), 429, "")
		// X-Forwarded-For is not trusted without TrustProxy.
		e2.wantErr(e2.do("POST", "/auth/login", "", map[string]any{"email": "x@example.com", "password": "p"},
			"X-Forwarded-For: 203.0.113.9"), 429, "")
	})
}

func TestTrustProxy(t *testing.T) {
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, func(d *Deps) {
			d.TrustProxy = true
			d.Limits.LoginPerIP = Limit{Max: 2, Per: time.Hour}
		})
		login := func(ip string) int {
			return e.do("POST", "/auth/login", "", map[string]any{"email": fmt.Sprintf("u%s@example.com", ip), "password": "p"},
				"X-Forwarded-For: 198.51.100.1, "+ip).Code
		}
		// The last X-Forwarded-For entry is the client; a client-chosen first entry does not matter.
		if a, b, c := login("203.0.113.1"), login("203.0.113.1"), login("203.0.113.1"); a != 401 || b != 401 || c != 429 {
			t.Errorf("same proxied client: %d %d %d", a, b, c)
		}
		if got := login("203.0.113.2"); got != 401 {
			t.Errorf("another proxied client limited: %d", got)
		}
	})
}

func TestForgotAndRegisterLimits(t *testing.T) {
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, func(d *Deps) {
			d.Limits.ForgotPerAccount = Limit{Max: 2, Per: time.Hour}
			d.Limits.RegisterPerIP = Limit{Max: 2, Per: time.Hour}
		})
		e.register("ada@example.com")
		e.register("bob@example.com")
		resp := e.do("POST", "/auth/register", "", map[string]any{"email": "c@example.com", "password": "secret1", "confirmPassword": "secret1"})
		e.wantErr(resp, 429, "")
		if e.count("auth_users", "") != 2 {
			t.Error("a limited registration created a user")
		}
		for _, email := range []string{"ada@example.com", "nobody@example.com"} {
			for i := 0; i < 2; i++ {
				e.want(e.do("POST", "/auth/forgot-password", "", map[string]any{"email": email}), http.StatusOK, nil)
			}
			// Known or not, the third is limited alike: the limit reveals nothing.
			resp := e.do("POST", "/auth/forgot-password", "", map[string]any{"email": email})
			e.wantErr(resp, 429, "")
			if resp.Header().Get("Retry-After") == "" {
				t.Error("no Retry-After")
			}
		}
		if n := len(e.resets()); n != 2 {
			t.Errorf("%d mails sent, want 2", n)
		}
	})
}

func TestLimiterMemoryIsBounded(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newLimiter(func() time.Time { return now }, 1000)
	lim := Limit{Max: 5, Per: time.Minute}
	for i := 0; i < 10_000; i++ {
		l.allow(fmt.Sprintf("k%d", i), lim)
		now = now.Add(time.Millisecond)
	}
	if n := l.size(); n > 1000 {
		t.Fatalf("limiter holds %d keys, bound is 1000", n)
	}
	// The most recent keys keep their state.
	for i := 0; i < 4; i++ {
		l.allow("k9999", lim)
	}
	if ok, wait := l.allow("k9999", lim); ok || wait <= 0 {
		t.Errorf("recent key lost its state: ok=%v wait=%v", ok, wait)
	}
	// Refilled buckets are dropped first once the table is full.
	now = now.Add(time.Hour)
	for i := 0; i < 10; i++ {
		l.allow(fmt.Sprintf("fresh%d", i), lim)
	}
	if n := l.size(); n > 20 {
		t.Errorf("idle refilled buckets kept: %d keys", n)
	}
	if ok, _ := (&limiter{now: time.Now, maxKeys: 1, buckets: map[string]*bucket{}}).allow("x", Limit{Max: -1}); !ok {
		t.Error("negative Max must mean unlimited")
	}
}
