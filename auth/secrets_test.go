package auth

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/uptrace/bun"
)

// TestNoSecretsInResponses walks every route and then checks that no response
// body holds a password hash, the TOTP secret (outside setup), a sealed value
// or any stored token hash, and that no log line holds a password or token.
func TestNoSecretsInResponses(t *testing.T) {
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, nil)
		ctx := context.Background()
		e.register("ada@example.com")
		pair := e.tokens("ada@example.com")
		tok := pair.AccessToken
		e.do("GET", "/auth/me", tok, nil)
		e.do("PATCH", "/auth/me", tok, map[string]any{"name": "Ada"})
		var setup TwoFactorSetup
		e.want(e.do("POST", "/auth/2fa/setup", tok, nil), http.StatusOK, &setup)
		setupBody := e.bodies[len(e.bodies)-1]
		e.do("POST", "/auth/2fa/verify", tok, map[string]any{"code": "000000"})
		e.want(e.do("POST", "/auth/2fa/verify", tok, map[string]any{"code": e.code(setup.Secret, 0)}), http.StatusOK, nil)
		e.do("GET", "/auth/me", tok, nil)
		e.login("ada@example.com", testPassword, "")
		e.login("ada@example.com", testPassword, "111111")
		e.login("ada@example.com", "wrong-password", "")
		e.clock.Advance(30 * time.Second)
		e.want(e.login("ada@example.com", testPassword, e.code(setup.Secret, 0)), http.StatusOK, nil)
		e.do("POST", "/auth/refresh", "", map[string]any{"refreshToken": pair.RefreshToken})
		e.do("POST", "/auth/refresh", "", map[string]any{"refreshToken": pair.RefreshToken}) // reuse
		e.do("POST", "/auth/forgot-password", "", map[string]any{"email": "ada@example.com"})
		rt := resetToken(t, e.resets()[0])
		e.do("POST", "/auth/reset-password", "", map[string]any{"token": rt, "newPassword": "x", "confirmPassword": "y"})
		e.do("POST", "/auth/reset-password", "", map[string]any{"token": rt, "newPassword": "newpass1", "confirmPassword": "newpass1"})
		e.do("POST", "/auth/2fa/disable", tok, map[string]any{"code": "000000"})
		e.do("POST", "/auth/logout", tok, map[string]any{"refreshToken": pair.RefreshToken})

		var secrets []string
		var hashes []string
		for _, q := range []struct{ table, col string }{
			{"auth_users", "password_hash"}, {"auth_users", "totp_secret"}, {"auth_refresh_tokens", "hash"},
			{"auth_reset_tokens", "hash"}, {"auth_recovery_codes", "hash"},
		} {
			var vals []string
			if err := bdb.NewSelect().Table(q.table).Column(q.col).Scan(ctx, &vals); err != nil {
				t.Fatal(err)
			}
			hashes = append(hashes, vals...)
		}
		secrets = append(secrets, hashes...)
		secrets = append(secrets, "$argon2id$", setup.Secret, testPassword, "newpass1")
		if len(hashes) < 10 {
			t.Fatalf("only %d stored secrets found; the check would prove little", len(hashes))
		}
		for _, body := range e.bodies {
			for _, s := range secrets {
				if s == "" || (body == setupBody && s == setup.Secret) {
					continue
				}
				if strings.Contains(body, s) {
					t.Errorf("a response holds a secret (%.12s...): %s", s, body)
				}
			}
		}
		logs := e.logs.String()
		for _, s := range append(secrets, pair.RefreshToken, rt, tok) {
			if s != "" && strings.Contains(logs, s) {
				t.Errorf("the log holds a secret (%.12s...)", s)
			}
		}
	})
}
