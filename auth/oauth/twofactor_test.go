package oauth_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/auth/oauth"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/pquerna/otp"
	"github.com/pquerna/otp/totp"
	"github.com/uptrace/bun"
)

// enable2FA turns 2FA on for the holder of access and answers the TOTP secret
// and the recovery codes.
func (e *env) enable2FA(access string) (string, []string) {
	e.t.Helper()
	b := newBrowser(e.t)
	var setup struct{ Secret string }
	mustJSON(e.t, b.postWithToken(e.url+"/auth/2fa/setup", access, nil).body, &setup)
	code, err := totp.GenerateCode(setup.Secret, time.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	r := b.postWithToken(e.url+"/auth/2fa/verify", access, map[string]string{"code": code})
	if r.status != http.StatusOK {
		e.t.Fatalf("2fa verify: %d %s", r.status, r.body)
	}
	var on struct{ RecoveryCodes []string }
	mustJSON(e.t, r.body, &on)
	return setup.Secret, on.RecoveryCodes
}

// challenged checks that a login redirect carries a 2FA challenge and nothing
// that logs in, and answers the challenge.
func challenged(t *testing.T, u *url.URL, provider string) string {
	t.Helper()
	q := u.Query()
	if u.Path != "/auth/callback" || q.Get("twoFactorChallenge") == "" || q.Get("provider") != provider ||
		q.Get("accessToken") != "" || q.Get("refreshToken") != "" || q.Get("code") != "" || q.Get("error") != "" {
		t.Fatalf("want a 2FA challenge and no tokens, got %s", u)
	}
	return q.Get("twoFactorChallenge")
}

type errAnswer struct {
	StatusCode int    `json:"statusCode"`
	Message    string `json:"message"`
	Code       string `json:"code"`
}

// TestOAuthLoginOfA2FAAccountAsksForTheCode: someone who controls the
// victim's GitHub (or IdP) account, but not their authenticator, logs in
// through the provider. No tokens, no exchange code: a challenge that only a
// code redeems.
func TestOAuthLoginOfA2FAAccountAsksForTheCode(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{oauth.RedirectTokens, oauth.RedirectCode} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
				e := newEnv(t, bdb, func(d *oauth.Deps) { d.RedirectMode = mode })
				e.gh.AddUser(octo)
				e.gh.SignIn("octocat")
				// The owner's first login (tokens mode) creates the account; they turn 2FA on.
				first := e.flow(newBrowser(t), "/auth/codehost")
				access := ""
				if mode == oauth.RedirectTokens {
					access = first.Query().Get("accessToken")
				} else {
					r := newBrowser(t).postJSON(e.url+"/auth/oauth/exchange", map[string]string{"code": first.Query().Get("code")})
					var tp struct{ AccessToken string }
					mustJSON(t, r.body, &tp)
					access = tp.AccessToken
				}
				ownerID := e.userIDOf(access)
				secret, recovery := e.enable2FA(access)
				sessions := e.count("auth_refresh_tokens")

				// The attacker's provider login: a challenge, no session.
				ch := challenged(t, e.flow(newBrowser(t), "/auth/codehost"), "codehost")
				if n := e.count("auth_refresh_tokens"); n != sessions || e.count("oauth_exchange_codes") > 1 {
					t.Fatalf("a challenged login created a session (%d -> %d refresh tokens)", sessions, n)
				}
				post := func(body any) resp { return newBrowser(t).postJSON(e.url+"/auth/2fa/login", body) }
				var ea errAnswer
				// No code, a wrong code, a forged challenge: refused, no session.
				if r := post(map[string]string{"challenge": ch}); r.status != http.StatusBadRequest {
					t.Fatalf("no code: %d %s", r.status, r.body)
				}
				r := post(map[string]string{"challenge": ch, "code": "000000"})
				mustJSON(t, r.body, &ea)
				if r.status != http.StatusUnauthorized || ea.Code != "TWO_FACTOR_INVALID" {
					t.Fatalf("wrong code: %d %s", r.status, r.body)
				}
				if r := post(map[string]string{"challenge": "forged-" + ch[:10], "code": recovery[0]}); r.status != http.StatusBadRequest {
					t.Fatalf("forged challenge: %d %s", r.status, r.body)
				}
				// Four more wrong codes use the challenge up: then even a right code is refused.
				for i := 0; i < 4; i++ {
					post(map[string]string{"challenge": ch, "code": "000000"})
				}
				if r := post(map[string]string{"challenge": ch, "code": recovery[0]}); r.status != http.StatusBadRequest {
					t.Fatalf("spent challenge: %d %s", r.status, r.body)
				}
				if n := e.count("auth_refresh_tokens"); n != sessions {
					t.Fatalf("refused codes created a session (%d -> %d)", sessions, n)
				}

				// The owner, with the code: the same token pair as a password login, once.
				ch = challenged(t, e.flow(newBrowser(t), "/auth/codehost"), "codehost")
				next, err := totp.GenerateCodeCustom(secret, time.Now().Add(30*time.Second), totp.ValidateOpts{Period: 30, Digits: otp.DigitsSix, Algorithm: otp.AlgorithmSHA1})
				if err != nil {
					t.Fatal(err)
				}
				r = post(map[string]string{"challenge": ch, "code": next})
				if r.status != http.StatusOK {
					t.Fatalf("right TOTP code: %d %s", r.status, r.body)
				}
				var tp struct{ AccessToken, RefreshToken, TokenType string }
				if err := json.Unmarshal(r.body, &tp); err != nil || tp.TokenType != "Bearer" || tp.RefreshToken == "" {
					t.Fatalf("2fa login answered %s", r.body)
				}
				if e.userIDOf(tp.AccessToken) != ownerID {
					t.Fatal("2fa login logged in someone else")
				}
				if r := post(map[string]string{"challenge": ch, "code": recovery[1]}); r.status != http.StatusBadRequest {
					t.Fatalf("challenge replayed: %d %s", r.status, r.body)
				}
				// A recovery code works too.
				ch = challenged(t, e.flow(newBrowser(t), "/auth/codehost"), "codehost")
				if r := post(map[string]string{"challenge": ch, "code": recovery[2]}); r.status != http.StatusOK {
					t.Fatalf("recovery code: %d %s", r.status, r.body)
				}
			})
		})
	}
}

// TestIDPLoginOfA2FAAccountAsksForTheCode: the same through the OIDC provider.
func TestIDPLoginOfA2FAAccountAsksForTheCode(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, nil)
		e.idp.SignIn(grace)
		access := e.flow(newBrowser(t), "/auth/idp").Query().Get("accessToken")
		_, recovery := e.enable2FA(access)
		ch := challenged(t, e.flow(newBrowser(t), "/auth/idp"), "idp")
		if r := newBrowser(t).postJSON(e.url+"/auth/2fa/login", map[string]string{"challenge": ch, "code": recovery[0]}); r.status != http.StatusOK {
			t.Fatalf("recovery code: %d %s", r.status, r.body)
		}
	})
}
