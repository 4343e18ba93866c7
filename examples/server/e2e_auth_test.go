package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pquerna/otp"
	"github.com/pquerna/otp/totp"
)

type e2eTokens struct {
	AccessToken  string `json:"accessToken"`
	RefreshToken string `json:"refreshToken"`
	TokenType    string `json:"tokenType"`
	ExpiresIn    int    `json:"expiresIn"`
}

type e2eError struct {
	StatusCode int    `json:"statusCode"`
	Message    any    `json:"message"`
	Code       string `json:"code"`
}

// totpAt computes the code an authenticator app shows at t.
func totpAt(t *testing.T, secret string, at time.Time) string {
	t.Helper()
	c, err := totp.GenerateCodeCustom(secret, at, totp.ValidateOpts{Period: 30, Digits: otp.DigitsSix, Algorithm: otp.AlgorithmSHA1})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestE2EAuth walks SPEC 4.1/4.2 over real HTTP: register -> login -> me ->
// 2FA setup -> verify -> login without code (401 TWO_FACTOR_REQUIRED) ->
// login with a computed code -> refresh -> logout, then a password reset with
// the link the log mailer wrote (no SMTP configured).
func TestE2EAuth(t *testing.T) {
	eachDB(t, func(t *testing.T, dbURL string) {
		ts := startServer(t, dbURL, func(c *Config) { c.FrontendURL = "https://app.example.test" })
		const email, pw = "ada@example.com", "correct horse battery"

		var user map[string]any
		ts.doJSON(t, http.StatusCreated, "POST", "/auth/register", "", map[string]any{
			"email": "Ada@Example.com", "password": pw, "confirmPassword": pw, "name": "Ada",
		}, &user)
		if user["email"] != email || user["role"] != "USER" || user["twoFactorEnabled"] != false {
			t.Fatalf("register answered %v", user)
		}
		status, body, _ := ts.do(t, "POST", "/auth/register", "", map[string]any{"email": email, "password": pw, "confirmPassword": pw})
		if status != http.StatusConflict {
			t.Fatalf("duplicate register: %d %s", status, body)
		}
		status, body, _ = ts.do(t, "POST", "/auth/register", "", map[string]any{"email": "b@example.com", "password": "12345", "confirmPassword": "12345"})
		if status != http.StatusBadRequest || !strings.Contains(string(body), "body.password: expected length >= 6") {
			t.Fatalf("short password: %d %s", status, body)
		}

		var tok e2eTokens
		ts.doJSON(t, http.StatusOK, "POST", "/auth/login", "", map[string]any{"email": email, "password": pw}, &tok)
		if tok.TokenType != "Bearer" || tok.ExpiresIn != 900 || tok.AccessToken == "" || tok.RefreshToken == "" {
			t.Fatalf("login answered %+v", tok)
		}

		var me map[string]any
		ts.doJSON(t, http.StatusOK, "GET", "/auth/me", tok.AccessToken, nil, &me)
		if me["id"] != user["id"] || me["name"] != "Ada" {
			t.Fatalf("me answered %v", me)
		}
		if status, _, _ := ts.do(t, "GET", "/auth/me", "", nil); status != http.StatusUnauthorized {
			t.Fatalf("me without token: %d", status)
		}

		var setup struct {
			Secret     string `json:"secret"`
			OtpauthURL string `json:"otpauthUrl"`
		}
		ts.doJSON(t, http.StatusOK, "POST", "/auth/2fa/setup", tok.AccessToken, nil, &setup)
		if setup.Secret == "" || !strings.HasPrefix(setup.OtpauthURL, "otpauth://totp/") {
			t.Fatalf("setup answered %+v", setup)
		}
		var enabled struct {
			Enabled       bool     `json:"enabled"`
			RecoveryCodes []string `json:"recoveryCodes"`
		}
		ts.doJSON(t, http.StatusOK, "POST", "/auth/2fa/verify", tok.AccessToken,
			map[string]any{"code": totpAt(t, setup.Secret, time.Now())}, &enabled)
		if !enabled.Enabled || len(enabled.RecoveryCodes) != 10 {
			t.Fatalf("verify answered %+v", enabled)
		}

		var e e2eError
		ts.doJSON(t, http.StatusUnauthorized, "POST", "/auth/login", "", map[string]any{"email": email, "password": pw}, &e)
		if e.Code != "TWO_FACTOR_REQUIRED" {
			t.Fatalf("login without code: %+v", e)
		}
		ts.doJSON(t, http.StatusUnauthorized, "POST", "/auth/login", "", map[string]any{"email": email, "password": pw, "twoFactorCode": "000000"}, &e)
		if e.Code != "TWO_FACTOR_INVALID" {
			t.Fatalf("login with a wrong code: %+v", e)
		}
		// The next time step's code: later than the one verify used up, and
		// within the one-step drift the server accepts whatever the wall clock does.
		code := totpAt(t, setup.Secret, time.Now().Add(30*time.Second))
		ts.doJSON(t, http.StatusOK, "POST", "/auth/login", "", map[string]any{"email": email, "password": pw, "twoFactorCode": code}, &tok)
		ts.doJSON(t, http.StatusUnauthorized, "POST", "/auth/login", "", map[string]any{"email": email, "password": pw, "twoFactorCode": code}, &e)
		if e.Code != "TWO_FACTOR_INVALID" {
			t.Fatalf("replayed code: %+v", e)
		}

		var next e2eTokens
		ts.doJSON(t, http.StatusOK, "POST", "/auth/refresh", "", map[string]any{"refreshToken": tok.RefreshToken}, &next)
		if next.RefreshToken == tok.RefreshToken || next.AccessToken == "" {
			t.Fatalf("refresh answered %+v", next)
		}
		ts.doJSON(t, http.StatusOK, "GET", "/auth/me", next.AccessToken, nil, nil)

		var ack map[string]any
		ts.doJSON(t, http.StatusOK, "POST", "/auth/logout", next.AccessToken, map[string]any{"refreshToken": next.RefreshToken}, &ack)
		if ack["ok"] != true {
			t.Fatalf("logout answered %v", ack)
		}
		if status, body, _ := ts.do(t, "POST", "/auth/refresh", "", map[string]any{"refreshToken": next.RefreshToken}); status != http.StatusUnauthorized {
			t.Fatalf("refresh after logout: %d %s", status, body)
		}

		// Password reset through the log mailer (KEELSON_SMTP_URL unset): the
		// link is in the log, built from KEELSON_FRONTEND_URL.
		ts.doJSON(t, http.StatusOK, "POST", "/auth/forgot-password", "", map[string]any{"email": email}, nil)
		resetTok := loggedLink(t, ts.Logs, email, "https://app.example.test/reset-password?token=")
		ts.doJSON(t, http.StatusOK, "POST", "/auth/reset-password", "", map[string]any{"token": resetTok, "newPassword": "brand new pw", "confirmPassword": "brand new pw"}, nil)
		if status, _, _ := ts.do(t, "GET", "/auth/me", next.AccessToken, nil); status != http.StatusUnauthorized {
			t.Fatalf("access token survived the reset: %d", status)
		}
		ts.doJSON(t, http.StatusOK, "POST", "/auth/login", "", map[string]any{
			"email": email, "password": "brand new pw", "twoFactorCode": enabled.RecoveryCodes[0]}, &tok)

		// The admin email of the config gets the ADMIN role once verified.
		var admin map[string]any
		ts.doJSON(t, http.StatusCreated, "POST", "/auth/register", "", map[string]any{"email": "admin@example.com", "password": pw, "confirmPassword": pw}, &admin)
		if admin["role"] != "USER" || admin["emailVerified"] != false {
			t.Fatalf("unverified admin registered as %v", admin)
		}

		// Nothing the server logged holds a password, a hash or a token other
		// than the dev-mode reset link.
		logs := ts.Logs.String()
		for _, s := range []string{pw, "brand new pw", "$argon2id$", setup.Secret, tok.RefreshToken, tok.AccessToken, next.RefreshToken} {
			if strings.Contains(logs, s) {
				t.Errorf("the server log holds a secret (%.10s...)", s)
			}
		}
		var lines int
		for _, l := range strings.Split(strings.TrimSpace(logs), "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(l), &rec) == nil {
				lines++
			}
		}
		if lines == 0 {
			t.Error("the server logged nothing")
		}
	})
}
