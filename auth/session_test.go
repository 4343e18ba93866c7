package auth

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/auth/internal/onetime"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/uptrace/bun"
)

func (e *env) refresh(tok string) *httptestResp {
	e.t.Helper()
	return e.do("POST", "/auth/refresh", "", map[string]any{"refreshToken": tok})
}

func TestRefreshRotationAndReuse(t *testing.T) {
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, nil)
		e.register("ada@example.com")
		first := e.tokens("ada@example.com")
		other := e.tokens("ada@example.com") // a second login: its own family

		var second TokenPair
		e.want(e.refresh(first.RefreshToken), http.StatusOK, &second)
		if second.RefreshToken == first.RefreshToken || second.AccessToken == "" || second.TokenType != "Bearer" || second.ExpiresIn != 900 {
			t.Fatalf("refresh answered %+v", second)
		}
		e.want(e.do("GET", "/auth/me", second.AccessToken, nil), http.StatusOK, nil)

		// Reusing the used token fails and revokes the whole family, including
		// the token that replaced it; the other login is untouched.
		e.wantErr(e.refresh(first.RefreshToken), 401, "invalid or expired refresh token")
		e.wantErr(e.refresh(second.RefreshToken), 401, "invalid or expired refresh token")
		e.want(e.refresh(other.RefreshToken), http.StatusOK, nil)
		if !strings.Contains(e.logs.String(), "refresh token reused") {
			t.Error("reuse was not logged")
		}

		e.wantErr(e.refresh("not-a-token"), 401, "invalid or expired refresh token")
		e.wantErr(e.do("POST", "/auth/refresh", "", map[string]any{}), 400, "refreshToken")
	})
}

func TestRefreshAbsoluteLifetime(t *testing.T) {
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, func(d *Deps) { d.RefreshTTL = 10 * time.Hour })
		e.register("ada@example.com")
		tok := e.tokens("ada@example.com").RefreshToken
		// Rotating every 3 hours does not extend the session past 10 hours.
		for i := 0; i < 3; i++ {
			e.clock.Advance(3 * time.Hour)
			var p TokenPair
			e.want(e.refresh(tok), http.StatusOK, &p)
			tok = p.RefreshToken
		}
		e.clock.Advance(time.Hour + time.Second) // 10h01s after login
		e.wantErr(e.refresh(tok), 401, "invalid or expired refresh token")
	})
}

func TestConcurrentRefresh(t *testing.T) {
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, nil)
		e.register("ada@example.com")
		for round := 0; round < 5; round++ {
			tok := e.tokens("ada@example.com").RefreshToken
			codes := make([]int, 2)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range codes {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					codes[i] = e.api.Do("POST", "/auth/refresh", map[string]any{"refreshToken": tok}).Code
				}()
			}
			close(start)
			wg.Wait()
			ok := 0
			for _, c := range codes {
				switch c {
				case 200:
					ok++
				case 401:
				default:
					t.Fatalf("round %d: unexpected status %d", round, c)
				}
			}
			if ok != 1 {
				t.Fatalf("round %d: %d concurrent refreshes of one token succeeded, want exactly 1 (%v)", round, ok, codes)
			}
		}
	})
}

func TestLogout(t *testing.T) {
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, nil)
		e.register("ada@example.com")
		e.register("bob@example.com")
		a1 := e.tokens("ada@example.com")
		a2 := e.tokens("ada@example.com")
		b := e.tokens("bob@example.com")

		var ack map[string]any
		e.want(e.do("POST", "/auth/logout", a1.AccessToken, nil), http.StatusOK, &ack)
		if ack["ok"] != true {
			t.Errorf("logout answered %v", ack)
		}
		// Stateless without a body: the refresh token still works.
		var p TokenPair
		e.want(e.refresh(a1.RefreshToken), http.StatusOK, &p)

		// With refreshToken: that session ends, its access tokens too (at
		// once); other sessions and other users' tokens stay.
		e.want(e.do("POST", "/auth/logout", a1.AccessToken, map[string]any{"refreshToken": p.RefreshToken}), http.StatusOK, nil)
		e.wantErr(e.refresh(p.RefreshToken), 401, "")
		e.wantErr(e.do("GET", "/auth/me", a1.AccessToken, nil), 401, "invalid or expired access token")
		e.wantErr(e.do("GET", "/auth/me", p.AccessToken, nil), 401, "invalid or expired access token")
		e.want(e.do("POST", "/auth/logout", a2.AccessToken, map[string]any{"refreshToken": b.RefreshToken}), http.StatusOK, nil)
		e.want(e.refresh(b.RefreshToken), http.StatusOK, nil)
		e.want(e.do("GET", "/auth/me", b.AccessToken, nil), http.StatusOK, nil)
		e.want(e.refresh(a2.RefreshToken), http.StatusOK, nil)

		e.wantErr(e.do("POST", "/auth/logout", "", nil), 401, "")
		e.wantErr(e.do("POST", "/auth/logout", a2.AccessToken, map[string]any{"other": 1}), 400, "other")
	})
}

func resetToken(t *testing.T, m Mail) string {
	t.Helper()
	const prefix = "https://app.example.com/reset-password?token="
	i := strings.Index(m.Text, prefix)
	if i < 0 {
		t.Fatalf("mail has no reset link: %q", m.Text)
	}
	rest := m.Text[i+len(prefix):]
	tok, err := url.QueryUnescape(strings.Fields(rest)[0])
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestPasswordReset(t *testing.T) {
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, nil)
		u := e.register("ada@example.com")
		session := e.tokens("ada@example.com")

		// Same answer for unknown and known emails; only the known one gets mail.
		// The link comes from FrontendURL, never from request headers.
		unknown := e.do("POST", "/auth/forgot-password", "", map[string]any{"email": "nobody@example.com"})
		known := e.do("POST", "/auth/forgot-password", "", map[string]any{"email": "ADA@example.com"},
			"Host: evil.example", "X-Forwarded-Host: evil.example", "Origin: https://evil.example")
		if unknown.Code != 200 || known.Code != 200 || unknown.Body.String() != known.Body.String() {
			t.Fatalf("forgot-password: unknown %d %s, known %d %s", unknown.Code, unknown.Body, known.Code, known.Body)
		}
		mails := e.resets()
		if len(mails) != 1 || mails[0].To != "ada@example.com" {
			t.Fatalf("mails %+v", mails)
		}
		if strings.Contains(mails[0].Text, "evil") {
			t.Fatal("reset link built from request headers")
		}
		tok1 := resetToken(t, mails[0])
		if len(tok1) != 43 || e.count("auth_reset_tokens", "hash = ?", onetime.Hash(tok1)) != 1 || e.count("auth_reset_tokens", "hash = ?", tok1) != 0 {
			t.Fatal("reset token not 32 bytes or not stored hashed")
		}
		e.want(e.do("POST", "/auth/forgot-password", "", map[string]any{"email": "ada@example.com"}), http.StatusOK, nil)
		tok2 := resetToken(t, e.resets()[1])

		// Validation failures name the field and use nothing up.
		e.wantErr(e.do("POST", "/auth/reset-password", "", map[string]any{"token": tok1, "newPassword": "newpass1", "confirmPassword": "other11"}),
			400, "body.confirmPassword: passwords do not match")
		e.wantErr(e.do("POST", "/auth/reset-password", "", map[string]any{"token": tok1, "newPassword": "short", "confirmPassword": "short"}),
			400, "body.newPassword: expected length >= 6")
		e.wantErr(e.do("POST", "/auth/reset-password", "", map[string]any{"token": "bogus", "newPassword": "newpass1", "confirmPassword": "newpass1"}),
			400, "token: invalid or expired reset token")

		e.want(e.do("POST", "/auth/reset-password", "", map[string]any{"token": tok1, "newPassword": "newpass1", "confirmPassword": "newpass1"}), http.StatusOK, nil)
		e.wantErr(e.login("ada@example.com", testPassword, ""), 401, "invalid email or password")
		e.want(e.login("ada@example.com", "newpass1", ""), http.StatusOK, nil)

		// Old sessions are over: refresh token revoked, access token refused.
		e.wantErr(e.refresh(session.RefreshToken), 401, "")
		e.wantErr(e.do("GET", "/auth/me", session.AccessToken, nil), 401, "")
		if n := e.count("auth_refresh_tokens", "user_id = ? AND revoked_at IS NULL", u.ID); n != 1 { // only the new login's
			t.Errorf("%d live refresh tokens after reset, want 1", n)
		}

		// The token works once, and the older token requested before is dead too.
		e.wantErr(e.do("POST", "/auth/reset-password", "", map[string]any{"token": tok1, "newPassword": "again12", "confirmPassword": "again12"}), 400, "token")
		e.wantErr(e.do("POST", "/auth/reset-password", "", map[string]any{"token": tok2, "newPassword": "again12", "confirmPassword": "again12"}), 400, "token")
		e.want(e.login("ada@example.com", "newpass1", ""), http.StatusOK, nil)

		// Tokens expire after ResetTTL (30m).
		e.want(e.do("POST", "/auth/forgot-password", "", map[string]any{"email": "ada@example.com"}), http.StatusOK, nil)
		tok3 := resetToken(t, e.resets()[2])
		e.clock.Advance(30*time.Minute + time.Second)
		e.wantErr(e.do("POST", "/auth/reset-password", "", map[string]any{"token": tok3, "newPassword": "again12", "confirmPassword": "again12"}), 400, "token")

		// Malformed email: 400 naming the field.
		e.wantErr(e.do("POST", "/auth/forgot-password", "", map[string]any{"email": "nope"}), 400, "body.email")

		// No log line holds a token (the capture mailer stands in for SMTP).
		for _, tok := range []string{tok1, tok2, tok3, session.RefreshToken} {
			if strings.Contains(e.logs.String(), tok) {
				t.Fatalf("a token appears in the logs")
			}
		}
	})
}

// A mailer failure is logged and the answer stays the same (no enumeration).
type failingMailer struct{}

func (failingMailer) Send(context.Context, Mail) error { return errFakeSMTP }

type fakeErr string

func (e fakeErr) Error() string { return string(e) }

const errFakeSMTP = fakeErr("550 mailbox unavailable")

func TestForgotPasswordMailFailure(t *testing.T) {
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, func(d *Deps) { d.Mailer = failingMailer{} })
		e.register("ada@example.com")
		known := e.do("POST", "/auth/forgot-password", "", map[string]any{"email": "ada@example.com"})
		unknown := e.do("POST", "/auth/forgot-password", "", map[string]any{"email": "x@example.com"})
		if known.Code != 200 || known.Body.String() != unknown.Body.String() {
			t.Fatalf("known %d %s unknown %s", known.Code, known.Body, unknown.Body)
		}
		e.settle()
		if l := e.logs.String(); !strings.Contains(l, "mail job failed") || !strings.Contains(l, "reset-password") {
			t.Error("mail failure not logged")
		}
	})
}
