package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

// hobbyPlan is a plan body for the ADMIN-only POST /plans.
func hobbyPlan(name string) map[string]any {
	return map[string]any{"name": name, "tier": "STARTER", "maxProjects": 4, "maxDeployments": 20,
		"maxMemoryMi": 256, "maxCpuM": 250, "maxStorageGi": 1, "maxBandwidthGb": 5, "buildTimeoutMins": 5}
}

// TestAdminRoleFollowsTheVerifiedEmailE2E: register an admin-listed email:
// not ADMIN until verified; verify by the link mailed through SMTP: ADMIN;
// change the email (password + the new address's link): no longer ADMIN.
func TestAdminRoleFollowsTheVerifiedEmailE2E(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, dbURL string) {
		sink := newSMTPSink(t, 0)
		ts := startServer(t, dbURL, func(c *Config) { c.SMTPURL = sink.URL; c.FrontendURL = "https://app.example.test" })
		const pw = "correct horse battery"
		linkPath := "https://app.example.test/verify-email?token="
		type me struct {
			Email         string `json:"email"`
			Role          string `json:"role"`
			EmailVerified bool   `json:"emailVerified"`
		}
		var m me
		ts.doJSON(t, http.StatusCreated, "POST", "/auth/register", "", map[string]any{"email": "admin@example.com", "password": pw, "confirmPassword": pw}, &m)
		if m.Role != "USER" || m.EmailVerified {
			t.Fatalf("registered as %+v", m)
		}
		var tok e2eTokens
		ts.doJSON(t, http.StatusOK, "POST", "/auth/login", "", map[string]any{"email": "admin@example.com", "password": pw}, &tok)
		if st, body, _ := ts.do(t, "POST", "/plans", tok.AccessToken, hobbyPlan("squat")); st != http.StatusForbidden {
			t.Fatalf("unverified listed address created a plan: %d %s", st, body)
		}

		ts.doJSON(t, http.StatusOK, "POST", "/auth/verify-email", "", map[string]any{"token": sink.link(t, "admin@example.com", linkPath, 0)}, nil)
		ts.doJSON(t, http.StatusOK, "GET", "/auth/me", tok.AccessToken, nil, &m)
		if m.Role != "ADMIN" || !m.EmailVerified {
			t.Fatalf("after the link: %+v", m)
		}
		ts.doJSON(t, http.StatusCreated, "POST", "/plans", tok.AccessToken, hobbyPlan("hobby"), nil)

		// Email change: the password is required; the address changes only by
		// the link mailed to it; the old address is told.
		if st, body, _ := ts.do(t, "PATCH", "/auth/me", tok.AccessToken, map[string]any{"email": "ops@example.com"}); st != http.StatusBadRequest || !strings.Contains(string(body), "currentPassword") {
			t.Fatalf("change without password: %d %s", st, body)
		}
		ts.doJSON(t, http.StatusOK, "PATCH", "/auth/me", tok.AccessToken, map[string]any{"email": "ops@example.com", "currentPassword": pw}, &m)
		if m.Email != "admin@example.com" || m.Role != "ADMIN" {
			t.Fatalf("changed before the link: %+v", m)
		}
		ts.doJSON(t, http.StatusOK, "POST", "/auth/verify-email", "", map[string]any{"token": sink.link(t, "ops@example.com", linkPath, 0)}, nil)
		ts.doJSON(t, http.StatusOK, "GET", "/auth/me", tok.AccessToken, nil, &m)
		if m.Email != "ops@example.com" || !m.EmailVerified || m.Role != "USER" {
			t.Fatalf("after the change: %+v", m)
		}
		if st, body, _ := ts.do(t, "POST", "/plans", tok.AccessToken, hobbyPlan("after")); st != http.StatusForbidden {
			t.Fatalf("former admin created a plan: %d %s", st, body)
		}
		// Mail is sent by background senders: the notice to the old address
		// may go out after the link to the new one.
		told := func() bool {
			return slices.ContainsFunc(sink.to("admin@example.com"), func(m sinkMail) bool {
				return strings.Contains(m.Data, "Subject: Your Keelson email address is being changed")
			})
		}
		platformtest.Eventually(t, 30*time.Second, "the notice to the old address", told)
	})
}

// median answers the median of ds.
func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestForgotPasswordTimingE2E: with a mail server that takes 300 ms per
// message, forgot-password answers as fast for an existing account as for an
// unknown address (the mail is sent off the request path). Medians of one
// run, interleaved, compared with a generous factor: no absolute timing.
func TestForgotPasswordTimingE2E(t *testing.T) {
	t.Parallel()
	sink := newSMTPSink(t, 300*time.Millisecond)
	// Behind a (loopback) proxy, each request comes from its own address, so
	// the per-address limit (30 an hour) does not cap the sample.
	ts := startServer(t, "", func(c *Config) {
		c.SMTPURL = sink.URL
		c.FrontendURL = "https://app.example.test"
		c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	})
	const accounts, perAccount, pw = 10, 3, "correct horse battery"
	for i := range accounts {
		doFrom(t, ts, "POST", "/auth/register", map[string]any{"email": fmt.Sprintf("user%d@example.com", i), "password": pw, "confirmPassword": pw},
			"X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i))
	}
	// Let the sign-up mails go out first (they would only add noise).
	platformtest.Eventually(t, 30*time.Second, "the sign-up mails", func() bool {
		return len(sink.to(fmt.Sprintf("user%d@example.com", accounts-1))) > 0 && len(sink.to("user0@example.com")) > 0
	})
	seq := 0
	timeForgot := func(email string) time.Duration {
		seq++
		start := time.Now()
		st, body := doFrom(t, ts, "POST", "/auth/forgot-password", map[string]any{"email": email}, "X-Forwarded-For", fmt.Sprintf("203.0.113.%d", seq))
		d := time.Since(start)
		if st != http.StatusOK {
			t.Fatalf("forgot-password %s: %d %s", email, st, body)
		}
		return d
	}
	var existing, unknown []time.Duration
	for i := range accounts * perAccount {
		existing = append(existing, timeForgot(fmt.Sprintf("user%d@example.com", i%accounts)))
		unknown = append(unknown, timeForgot(fmt.Sprintf("nobody%d@example.com", i)))
	}
	me, mu := median(existing), median(unknown)
	t.Logf("forgot-password medians over %d requests each: existing %v, unknown %v (the SMTP server takes 300ms per mail)", len(existing), me, mu)
	if me > 10*mu || mu > 10*me {
		t.Errorf("forgot-password timing tells accounts apart: existing median %v, unknown median %v", me, mu)
	}
	// The mails do go out (after the answers), through the slow server.
	sink.link(t, "user0@example.com", "https://app.example.test/reset-password?token=", 0)
}

// doFrom sends a JSON request with extra headers (e.g. X-Forwarded-For).
func doFrom(t *testing.T, ts *testServer, method, path string, body any, hdr ...string) (int, []byte) {
	t.Helper()
	raw, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(method, ts.URL+path, bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := ts.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// TestRateLimitsSharedByReplicasE2E: two API replicas behind a proxy (the
// loopback peer, KEELSON_TRUSTED_PROXIES=127.0.0.1) on one Postgres share the
// limits; an attacker's ten wrong passwords, spread over both replicas, lock
// the attacker's address out of the account but not the owner; a replica
// that trusts no proxy ignores X-Forwarded-For.
func TestRateLimitsSharedByReplicasE2E(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.PostgresURL(t)
	behindProxy := func(c *Config) { c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")} }
	a := startServer(t, dbURL, behindProxy)
	b := startServer(t, dbURL, behindProxy)
	direct := startServer(t, dbURL, nil)
	const pw = "correct horse battery"
	a.doJSON(t, http.StatusCreated, "POST", "/auth/register", "", map[string]any{"email": "ada@example.com", "password": pw, "confirmPassword": pw}, nil)
	owner, attacker := []string{"X-Forwarded-For", "198.51.100.7"}, []string{"X-Forwarded-For", "203.0.113.66"}
	login := func(ts *testServer, password string, from []string) int {
		st, _ := doFrom(t, ts, "POST", "/auth/login", map[string]any{"email": "ada@example.com", "password": password}, from...)
		return st
	}
	if st := login(a, pw, owner); st != http.StatusOK {
		t.Fatalf("owner login: %d", st)
	}
	for i := range 10 {
		if st := login([]*testServer{a, b}[i%2], fmt.Sprintf("guess%d", i), attacker); st != http.StatusUnauthorized {
			t.Fatalf("wrong password %d: %d", i, st)
		}
	}
	// Ten failures in all, five per replica: the shared bucket is empty on both.
	for _, ts := range []*testServer{a, b} {
		if st := login(ts, pw, attacker); st != http.StatusTooManyRequests {
			t.Fatalf("attacker's 11th attempt (right password) answered %d, want 429", st)
		}
	}
	if st := login(b, pw, owner); st != http.StatusOK {
		t.Fatalf("the owner is locked out: %d", st)
	}

	// Forgot-password, 30 per address per hour: a client behind the proxy
	// that rotates X-Forwarded-For is a new address each time (the proxy
	// vouches for it), and the two replicas count one address together.
	sent := 0
	forgot := func(ts *testServer, hdr ...string) int {
		sent++ // a new address each time: the per-address limit is the one under test
		st, _ := doFrom(t, ts, "POST", "/auth/forgot-password", map[string]any{"email": fmt.Sprintf("nobody%d@example.com", sent)}, hdr...)
		return st
	}
	for i := range 30 {
		if st := forgot([]*testServer{a, b}[i%2], "X-Forwarded-For", "192.0.2.9"); st != http.StatusOK {
			t.Fatalf("forgot %d: %d", i, st)
		}
	}
	if st, st2 := forgot(a, "X-Forwarded-For", "192.0.2.9"), forgot(b, "X-Forwarded-For", "192.0.2.9"); st != http.StatusTooManyRequests || st2 != http.StatusTooManyRequests {
		t.Fatalf("31st forgot from one address: %d %d, want 429 on both replicas", st, st2)
	}
	if st := forgot(a, "X-Forwarded-For", "192.0.2.10"); st != http.StatusOK {
		t.Fatalf("another address behind the proxy was limited: %d", st)
	}
	// A replica that trusts no proxy: X-Forwarded-For is the client's word,
	// ignored; rotating it does not escape the limit of the real address.
	for i := range 30 {
		if st := forgot(direct, "X-Forwarded-For", fmt.Sprintf("10.0.%d.1", i)); st != http.StatusOK {
			t.Fatalf("direct forgot %d: %d", i, st)
		}
	}
	if st := forgot(direct, "X-Forwarded-For", "10.9.9.9"); st != http.StatusTooManyRequests {
		t.Fatalf("forged X-Forwarded-For escaped the limit: %d", st)
	}
}
