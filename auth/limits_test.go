package auth

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/auth/internal/ratelimit"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/keelson-dev/keelson/platform/httpx"
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
		hashes := e.svc.hasher.Runs()
		resp := e.login("ADA@example.com", testPassword, "") // right password, any case: still limited
		e.wantErr(resp, 429, "too many attempts")
		ra, err := strconv.Atoi(resp.Header().Get("Retry-After"))
		if err != nil || ra < 1 || ra > 300 {
			t.Errorf("Retry-After %q", resp.Header().Get("Retry-After"))
		}
		if e.svc.hasher.Runs() != hashes {
			t.Error("a rate-limited login still hashed the password")
		}
		// The budget comes back with time (3 per 15 minutes: one per 5).
		e.clock.Advance(5 * time.Minute)
		e.want(e.login("ada@example.com", testPassword, ""), http.StatusOK, nil)
		// A successful login gives its attempt back.
		e.want(e.login("ada@example.com", testPassword, ""), http.StatusOK, nil)

		// Per client address, across accounts: a fresh env with an IP budget of 3.
		// (The buckets live in the database: an hour later they are full again.)
		e2 := newEnv(t, bdb, func(d *Deps) { d.Limits.LoginPerIP = Limit{Max: 3, Per: 15 * time.Minute} })
		e2.clock.Advance(time.Hour)
		for i := 0; i < 3; i++ {
			e2.wantErr(e2.login(fmt.Sprintf("u%d@example.com", i), "whatever", ""), 401, "")
		}
		e2.wantErr(e2.login("u9@example.com", "whatever", ""), 429, "")
		// X-Forwarded-For is not believed without TrustedProxies.
		e2.wantErr(e2.do("POST", "/auth/login", "", map[string]any{"email": "x@example.com", "password": "p"},
			"X-Forwarded-For: 203.0.113.9"), 429, "")
	})
}

// humatest requests come from 127.0.0.1 (its RemoteAddr): the proxy.
var testProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("10.0.0.0/8")}

func TestTrustedProxies(t *testing.T) {
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, func(d *Deps) {
			d.TrustedProxies = testProxies
			d.Limits.LoginPerIP = Limit{Max: 2, Per: time.Hour}
		})
		login := func(xff ...string) int {
			h := []string{}
			for _, x := range xff {
				h = append(h, "X-Forwarded-For: "+x)
			}
			return e.do("POST", "/auth/login", "", map[string]any{"email": "u" + platform.NewID() + "@example.com", "password": "p"}, h...).Code
		}
		// The rightmost address that is not a trusted proxy is the client; what
		// the client wrote to its left (a forged first entry) does not matter.
		if a, b, c := login("198.51.100.1, 203.0.113.1"), login("6.6.6.6, 203.0.113.1, 10.1.2.3"), login("7.7.7.7, 203.0.113.1"); a != 401 || b != 401 || c != 429 {
			t.Errorf("same proxied client: %d %d %d", a, b, c)
		}
		// A forged line before the proxy's own line is not reached either.
		if got := login("9.9.9.9", "203.0.113.1"); got != 429 {
			t.Errorf("forged X-Forwarded-For line changed the client address: %d", got)
		}
		if got := login("203.0.113.2"); got != 401 {
			t.Errorf("another proxied client limited: %d", got)
		}
	})
}

func TestClientAddr(t *testing.T) {
	for _, c := range []struct {
		peer, xff, want string
		trusted         []netip.Prefix
	}{
		{"203.0.113.5:1234", "1.2.3.4", "203.0.113.5", nil},                     // no proxies configured: header ignored
		{"203.0.113.5:1234", "1.2.3.4", "203.0.113.5", testProxies},             // untrusted peer: header ignored
		{"10.0.0.1:1234", "1.2.3.4, 5.6.7.8", "5.6.7.8", testProxies},           // rightmost untrusted
		{"10.0.0.1:1234", "1.2.3.4, 5.6.7.8, 10.9.9.9", "5.6.7.8", testProxies}, // through two proxies
		{"10.0.0.1:1234", "10.2.2.2, 10.3.3.3", "10.2.2.2", testProxies},        // all trusted: leftmost
		{"10.0.0.1:1234", "junk, 5.6.7.8", "5.6.7.8", testProxies},              // junk left of the client is never reached
		{"10.0.0.1:1234", "5.6.7.8, junk", "10.0.0.1", testProxies},             // junk where a proxy writes: the peer stands
		{"10.0.0.1:1234", "", "10.0.0.1", testProxies},                          // no header
		{"[::ffff:10.0.0.1]:1234", "::ffff:5.6.7.8", "5.6.7.8", testProxies},    // IPv4-mapped forms
		{"[2001:db8::1]:443", "1.2.3.4", "2001:db8::1", testProxies},
	} {
		if got := httpx.ClientAddr(c.peer, c.xff, c.trusted); got != c.want {
			t.Errorf("ClientAddr(%q, %q) = %q, want %q", c.peer, c.xff, got, c.want)
		}
	}
}

// TestAttackerCannotLockOutTheOwner: wrong passwords from an attacker's
// address lock that address out of the account (10 per 15 minutes), never
// the owner: not at a new address (issue 23: 12 failures from 203.0.113.9,
// then the right password from 198.51.100.77), nor with the device token of
// an earlier login from the attacker's own address. The owner's own address
// is limited all the same (40 failures answer 429), and failures from many
// addresses together reach the account-wide cap, which a device token passes.
func TestAttackerCannotLockOutTheOwner(t *testing.T) {
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, func(d *Deps) { d.TrustedProxies = testProxies })
		ada := e.register("ada@example.com")
		login := func(from, pw, device string) *httptestResp {
			body := map[string]any{"email": "ada@example.com", "password": pw}
			if device != "" {
				body["deviceToken"] = device
			}
			return e.do("POST", "/auth/login", "", body, "X-Forwarded-For: "+from)
		}
		var first LoginResult
		e.want(login("198.51.100.7", testPassword, ""), http.StatusOK, &first)
		if !strings.HasPrefix(first.DeviceToken, "v1.") || first.AccessToken == "" {
			t.Fatalf("login result %+v", first)
		}
		if c := login("198.51.100.7", testPassword, "").Header().Get("Set-Cookie"); !strings.Contains(c, DeviceCookie+"=v1.") || !strings.Contains(c, "HttpOnly") {
			t.Errorf("device cookie %q", c)
		}
		for i := 0; i < 10; i++ {
			e.wantErr(login("203.0.113.9", "guess"+strconv.Itoa(i), ""), 401, "invalid email or password")
		}
		// The attacker's address is out of attempts for this account, even with the right password...
		e.wantErr(login("203.0.113.9", testPassword, ""), 429, "too many attempts")
		e.wantErr(login("203.0.113.9", "guess", ""), 429, "too many attempts")
		// ...the owner is not, at a new address...
		e.want(login("198.51.100.77", testPassword, ""), http.StatusOK, nil)
		// ...nor at the attacker's address (one NAT), with the device token.
		e.want(login("203.0.113.9", testPassword, first.DeviceToken), http.StatusOK, nil)
		// A device token of another account, or forged, is no device token.
		bob := e.register("bob@example.com")
		if e.svc.devices.Of(first.DeviceToken, bob.ID) != "" || e.svc.devices.Of(first.DeviceToken[:len(first.DeviceToken)-2]+"AA", ada.ID) != "" || e.svc.devices.Of(first.DeviceToken, ada.ID) == "" {
			t.Error("a device token of ada's, or a forged one, was taken")
		}
		e.wantErr(login("203.0.113.9", testPassword, strings.Replace(first.DeviceToken, "v1.", "v1.x", 1)), 429, "")

		// 40 failures from an address that logged in before: 429 after 10.
		codes := map[int]int{}
		for i := 0; i < 40; i++ {
			codes[login("198.51.100.7", "typo", "").Code]++
		}
		if codes[401] != 10 || codes[429] != 30 {
			t.Errorf("40 failures from a known address answered %v, want 10 x 401 and 30 x 429", codes)
		}
		// An IPv6 client is one address for its whole /64.
		for i := 0; i < 10; i++ {
			e.wantErr(login(fmt.Sprintf("2001:db8:1:2::%x", i+1), "guess", ""), 401, "")
		}
		e.wantErr(login("2001:db8:1:2:ffff::1", "guess", ""), 429, "")

		// The account-wide cap: 100 failures an hour from clients without a
		// device token, whatever their addresses (here 10 + 10 + 10 + 70).
		for i := 0; i < 7; i++ {
			for j := 0; j < 10; j++ {
				e.wantErr(login(fmt.Sprintf("192.0.2.%d", i+1), "guess", ""), 401, "")
			}
		}
		e.wantErr(login("192.0.2.99", testPassword, ""), 429, "too many attempts")
		e.want(login("192.0.2.99", testPassword, first.DeviceToken), http.StatusOK, nil)
	})
}

// TestLimitsAreSharedByReplicas: two services on one database (two API
// replicas) spend the same buckets; idle buckets are purged.
func TestLimitsAreSharedByReplicas(t *testing.T) {
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		lim := func(d *Deps) { d.Limits.ForgotPerIP = Limit{Max: 4, Per: time.Hour} }
		a, b := newEnv(t, bdb, lim), newEnv(t, bdb, lim)
		b.clock = a.clock
		b.svc.d.Clock = a.clock
		b.svc.limiter = ratelimit.New(bdb, a.clock.Now, b.svc.d.Limits.maxPer())
		forgot := func(e *env) int {
			return e.do("POST", "/auth/forgot-password", "", map[string]any{"email": "u" + platform.NewID() + "@example.com"}).Code
		}
		got := []int{forgot(a), forgot(b), forgot(a), forgot(b), forgot(a), forgot(b)}
		if !slices.Equal(got, []int{200, 200, 200, 200, 429, 429}) {
			t.Fatalf("4 per hour across two replicas: %v", got)
		}
		if n := a.count("auth_rate_limits", ""); n == 0 {
			t.Fatal("no bucket stored")
		}
		// Buckets idle for longer than the longest period are full: purged.
		a.clock.Advance(2 * time.Hour)
		forgot(a)
		if n := a.count("auth_rate_limits", "last_ns < ?", a.clock.Now().UnixNano()); n != 0 {
			t.Errorf("%d idle buckets kept", n)
		}
		if ok, _, err := a.svc.limiter.Allow(context.Background(), "x", Limit{Max: -1}); !ok || err != nil {
			t.Error("negative Max must mean unlimited")
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
