package auth

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/auth/internal/onetime"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/uptrace/bun"
)

func TestTwoFactor(t *testing.T) {
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, nil)
		u := e.register("ada@example.com")
		tok := e.tokens("ada@example.com").AccessToken

		e.wantErr(e.do("POST", "/auth/2fa/setup", "", nil), 401, "")
		e.wantErr(e.do("POST", "/auth/2fa/verify", tok, map[string]any{"code": "123456"}), 400, "not set up")

		var setup TwoFactorSetup
		e.want(e.do("POST", "/auth/2fa/setup", tok, nil), http.StatusOK, &setup)
		ou, err := url.Parse(setup.OtpauthURL)
		if err != nil || ou.Scheme != "otpauth" || ou.Host != "totp" || ou.Query().Get("secret") != setup.Secret ||
			ou.Query().Get("algorithm") != "SHA1" || ou.Query().Get("digits") != "6" || ou.Query().Get("period") != "30" ||
			!strings.Contains(ou.Path, "ada@example.com") || len(setup.Secret) != 32 {
			t.Fatalf("setup answered %+v", setup)
		}
		// Sealed at rest: the column holds neither the secret nor anything readable.
		var stored string
		if err := bdb.NewSelect().Table("auth_users").Column("totp_secret").Where("id = ?", u.ID).Scan(context.Background(), &stored); err != nil {
			t.Fatal(err)
		}
		if stored == "" || strings.Contains(stored, setup.Secret) || !strings.HasPrefix(stored, "v1:") {
			t.Fatalf("TOTP secret not sealed at rest: %q", stored)
		}
		// Setup alone does not enable 2FA.
		e.want(e.login("ada@example.com", testPassword, ""), http.StatusOK, nil)

		// A wrong code does not enable it.
		e.wantErr(e.do("POST", "/auth/2fa/verify", tok, map[string]any{"code": "000000"}), 400, "code: invalid")
		e.wantErr(e.do("POST", "/auth/2fa/verify", tok, map[string]any{}), 400, "code")
		var me User
		e.want(e.do("GET", "/auth/me", tok, nil), http.StatusOK, &me)
		if me.TwoFactorEnabled {
			t.Fatal("2FA enabled by a wrong code")
		}

		code := e.code(setup.Secret, 0)
		var enabled TwoFactorEnabled
		e.want(e.do("POST", "/auth/2fa/verify", tok, map[string]any{"code": code}), http.StatusOK, &enabled)
		if !enabled.Enabled || len(enabled.RecoveryCodes) != 10 {
			t.Fatalf("verify answered %+v", enabled)
		}
		if e.count("auth_recovery_codes", "user_id = ? AND hash = ?", u.ID, onetime.Hash(onetime.NormalizeRecovery(enabled.RecoveryCodes[0]))) != 1 ||
			e.count("auth_recovery_codes", "hash = ?", enabled.RecoveryCodes[0]) != 0 {
			t.Fatal("recovery codes not stored hashed")
		}
		e.want(e.do("GET", "/auth/me", tok, nil), http.StatusOK, &me)
		if !me.TwoFactorEnabled {
			t.Fatal("me does not show 2FA enabled")
		}
		e.wantErr(e.do("POST", "/auth/2fa/setup", tok, nil), 409, "already enabled")

		// Login: no code, wrong code, replayed code, then a fresh one.
		if b := e.wantErr(e.login("ada@example.com", testPassword, ""), 401, ""); b.Code != "TWO_FACTOR_REQUIRED" {
			t.Errorf("no code: %+v", b)
		}
		if b := e.wantErr(e.login("ada@example.com", testPassword, "999999"), 401, ""); b.Code != "TWO_FACTOR_INVALID" {
			t.Errorf("wrong code: %+v", b)
		}
		if b := e.wantErr(e.login("ada@example.com", testPassword, code), 401, ""); b.Code != "TWO_FACTOR_INVALID" {
			t.Errorf("replayed code (used by verify) accepted: %+v", b)
		}
		// A wrong password with 2FA on is the plain credentials error, not a 2FA hint.
		if b := e.wantErr(e.login("ada@example.com", "wrong-password", ""), 401, "invalid email or password"); b.Code != "" {
			t.Errorf("wrong password: %+v", b)
		}
		e.clock.Advance(30 * time.Second)
		next := e.code(setup.Secret, 0)
		e.want(e.login("ada@example.com", testPassword, next), http.StatusOK, nil)
		if b := e.wantErr(e.login("ada@example.com", testPassword, next), 401, ""); b.Code != "TWO_FACTOR_INVALID" {
			t.Errorf("replayed login code accepted: %+v", b)
		}
		// A code of an earlier step than the last accepted one is refused too.
		e.clock.Advance(30 * time.Second)
		if b := e.wantErr(e.login("ada@example.com", testPassword, e.code(setup.Secret, -60*time.Second)), 401, ""); b.Code != "TWO_FACTOR_INVALID" {
			t.Errorf("older code accepted: %+v", b)
		}
		// One step of clock drift either way is tolerated.
		e.want(e.login("ada@example.com", testPassword, e.code(setup.Secret, 30*time.Second)), http.StatusOK, nil)

		// A recovery code works once, in any case and with spaces.
		rc := strings.ToUpper(strings.ReplaceAll(enabled.RecoveryCodes[3], "-", " "))
		e.want(e.login("ada@example.com", testPassword, rc), http.StatusOK, nil)
		if b := e.wantErr(e.login("ada@example.com", testPassword, enabled.RecoveryCodes[3]), 401, ""); b.Code != "TWO_FACTOR_INVALID" {
			t.Errorf("used recovery code accepted again: %+v", b)
		}

		// A password reset leaves 2FA on.
		e.want(e.do("POST", "/auth/forgot-password", "", map[string]any{"email": "ada@example.com"}), http.StatusOK, nil)
		rt := resetToken(t, e.resets()[0])
		e.want(e.do("POST", "/auth/reset-password", "", map[string]any{"token": rt, "newPassword": "newpass1", "confirmPassword": "newpass1"}), http.StatusOK, nil)
		if b := e.wantErr(e.login("ada@example.com", "newpass1", ""), 401, ""); b.Code != "TWO_FACTOR_REQUIRED" {
			t.Errorf("after reset: %+v", b)
		}
		e.clock.Advance(60 * time.Second)
		var pair TokenPair
		e.want(e.login("ada@example.com", "newpass1", e.code(setup.Secret, 0)), http.StatusOK, &pair)
		tok = pair.AccessToken

		// Disable needs a valid code; a recovery code does.
		e.wantErr(e.do("POST", "/auth/2fa/disable", tok, map[string]any{"code": "123456"}), 400, "code: invalid")
		e.wantErr(e.do("POST", "/auth/2fa/disable", tok, map[string]any{"code": enabled.RecoveryCodes[3]}), 400, "code: invalid")
		var dis map[string]any
		e.want(e.do("POST", "/auth/2fa/disable", tok, map[string]any{"code": enabled.RecoveryCodes[5]}), http.StatusOK, &dis)
		if dis["enabled"] != false {
			t.Errorf("disable answered %v", dis)
		}
		e.want(e.login("ada@example.com", "newpass1", ""), http.StatusOK, nil)
		e.wantErr(e.do("POST", "/auth/2fa/disable", tok, map[string]any{"code": "123456"}), 400, "not enabled")
		if e.count("auth_recovery_codes", "user_id = ?", u.ID) != 0 {
			t.Error("recovery codes kept after disable")
		}

		// Enable again with a new secret and disable with a TOTP code.
		e.want(e.do("POST", "/auth/2fa/setup", tok, nil), http.StatusOK, &setup)
		e.want(e.do("POST", "/auth/2fa/verify", tok, map[string]any{"code": e.code(setup.Secret, 0)}), http.StatusOK, nil)
		e.clock.Advance(30 * time.Second)
		e.want(e.do("POST", "/auth/2fa/disable", tok, map[string]any{"code": e.code(setup.Secret, 0)}), http.StatusOK, nil)
	})
}

func TestTwoFactorWrongCodesLimited(t *testing.T) {
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, func(d *Deps) { d.Limits.TwoFactorPerUser = Limit{Max: 3, Per: 15 * time.Minute} })
		e.register("ada@example.com")
		tok := e.tokens("ada@example.com").AccessToken
		var setup TwoFactorSetup
		e.want(e.do("POST", "/auth/2fa/setup", tok, nil), http.StatusOK, &setup)
		for i := 0; i < 3; i++ {
			e.wantErr(e.do("POST", "/auth/2fa/verify", tok, map[string]any{"code": "000000"}), 400, "code")
		}
		// Even the right code is refused now, with Retry-After.
		resp := e.do("POST", "/auth/2fa/verify", tok, map[string]any{"code": e.code(setup.Secret, 0)})
		e.wantErr(resp, 429, "too many attempts")
		if ra := resp.Header().Get("Retry-After"); ra == "" || ra == "0" {
			t.Errorf("Retry-After %q", ra)
		}
		// After a while attempts come back (one per 5 minutes here).
		e.clock.Advance(5 * time.Minute)
		e.want(e.do("POST", "/auth/2fa/verify", tok, map[string]any{"code": e.code(setup.Secret, 0)}), http.StatusOK, nil)

		// The same budget guards login codes.
		e.clock.Advance(15 * time.Minute)
		for i := 0; i < 3; i++ {
			e.wantErr(e.login("ada@example.com", testPassword, "000000"), 401, "")
		}
		e.wantErr(e.login("ada@example.com", testPassword, "000000"), 429, "")
	})
}
