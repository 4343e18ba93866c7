package auth

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/keelson-dev/keelson/auth/internal/onetime"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/uptrace/bun"
)

func TestRegister(t *testing.T) {
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, nil)
		var u map[string]any
		e.want(e.do("POST", "/auth/register", "", map[string]any{
			"email": "  Ada@Example.COM ", "password": "secret1", "confirmPassword": "secret1",
			"name": "Ada", "company": "Analytical", "codehostUsername": "ada",
		}), http.StatusCreated, &u)
		for _, k := range []string{"id", "email", "name", "username", "bio", "company", "location", "website",
			"codehostUsername", "image", "role", "twoFactorEnabled", "emailVerified", "createdAt", "updatedAt"} {
			if _, ok := u[k]; !ok {
				t.Errorf("register response lacks %q: %v", k, u)
			}
		}
		if len(u) != 15 {
			t.Errorf("register response has extra fields: %v", u)
		}
		if u["email"] != "ada@example.com" || u["name"] != "Ada" || u["role"] != "USER" || u["twoFactorEnabled"] != false || u["emailVerified"] != false {
			t.Errorf("register response: %v", u)
		}
		if !platform.ValidID(u["id"].(string)) {
			t.Errorf("id %v is not a UUID", u["id"])
		}
		if ts, err := time.Parse(time.RFC3339, u["createdAt"].(string)); err != nil || !ts.Equal(e.clock.Now()) {
			t.Errorf("createdAt %v", u["createdAt"])
		}
		var hash string
		if err := bdb.NewSelect().Table("auth_users").Column("password_hash").Where("id = ?", u["id"]).Scan(context.Background(), &hash); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(hash, "$argon2id$v=19$m=19456,t=2,p=1$") {
			t.Errorf("stored hash %q is not argon2id with OWASP parameters", hash)
		}

		// An email listed in AdminEmails (any case) is ADMIN only once verified.
		if admin := e.register("boss@example.com"); admin.Role != platform.RoleUser || admin.EmailVerified {
			t.Errorf("unverified admin email got role %q (verified %v)", admin.Role, admin.EmailVerified)
		}
		e.verify("boss@example.com")
		var me User
		e.want(e.do("GET", "/auth/me", e.tokens("boss@example.com").AccessToken, nil), http.StatusOK, &me)
		if me.Role != platform.RoleAdmin || !me.EmailVerified {
			t.Errorf("verified admin email: role %q verified %v", me.Role, me.EmailVerified)
		}

		// Every rejected request answers 400/409 naming the problem and changes nothing.
		before := e.count("auth_users", "")
		cases := []struct {
			body   map[string]any
			status int
			msg    string
		}{
			{map[string]any{"email": "ADA@example.com", "password": "secret1", "confirmPassword": "secret1"}, 409, "email: an account with this email already exists"},
			{map[string]any{"email": "new@example.com", "password": "short", "confirmPassword": "short"}, 400, "body.password: expected length >= 6"},
			{map[string]any{"email": "new@example.com", "password": "secret1", "confirmPassword": "secret2"}, 400, "body.confirmPassword: passwords do not match"},
			{map[string]any{"email": "not-an-email", "password": "secret1", "confirmPassword": "secret1"}, 400, "body.email"},
			{map[string]any{"email": "Eve <eve@example.com>", "password": "secret1", "confirmPassword": "secret1"}, 400, "body.email"},
			{map[string]any{"email": strings.Repeat("a", 250) + "@example.com", "password": "secret1", "confirmPassword": "secret1"}, 400, "body.email"},
			{map[string]any{"password": "secret1", "confirmPassword": "secret1"}, 400, "email"},
			{map[string]any{"email": "new@example.com", "password": "secret1"}, 400, "confirmPassword"},
			{map[string]any{"email": "new@example.com", "password": "secret1", "confirmPassword": "secret1", "role": "ADMIN"}, 400, "role"},
			{map[string]any{"email": "new@example.com", "password": "secret1", "confirmPassword": "secret1", "name": strings.Repeat("n", 101)}, 400, "body.name"},
		}
		for _, c := range cases {
			b := e.wantErr(e.do("POST", "/auth/register", "", c.body), c.status, c.msg)
			if b.StatusCode != c.status || b.Error == "" {
				t.Errorf("error body %+v", b)
			}
		}
		if after := e.count("auth_users", ""); after != before {
			t.Errorf("rejected registrations changed the user count: %d -> %d", before, after)
		}
	})
}

func TestLoginAndMe(t *testing.T) {
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, nil)
		u := e.register("ada@example.com")

		var p map[string]any
		e.want(e.login("ADA@example.com", testPassword, ""), http.StatusOK, &p)
		if p["tokenType"] != "Bearer" || p["expiresIn"] != float64(900) || p["accessToken"] == "" || p["refreshToken"] == "" || p["deviceToken"] == "" || len(p) != 5 {
			t.Fatalf("login response %v", p)
		}
		// Refresh token: 32 random bytes, base64url, stored only as its SHA-256.
		rt := p["refreshToken"].(string)
		if len(rt) != 43 {
			t.Errorf("refresh token %q is not 32 bytes base64url", rt)
		}
		if e.count("auth_refresh_tokens", "hash = ?", rt) != 0 || e.count("auth_refresh_tokens", "hash = ?", onetime.Hash(rt)) != 1 {
			t.Error("refresh token is not stored (only) hashed")
		}

		var me User
		e.want(e.do("GET", "/auth/me", p["accessToken"].(string), nil), http.StatusOK, &me)
		if me.ID != u.ID || me.Email != "ada@example.com" {
			t.Errorf("me %+v", me)
		}
		e.wantErr(e.do("GET", "/auth/me", "", nil), 401, "missing bearer token")
		e.wantErr(e.do("GET", "/auth/me", "garbage", nil), 401, "invalid or expired access token")

		// Wrong password, unknown email and a password-less (OAuth) account all
		// answer the identical 401.
		if _, err := e.svc.CreateUser(context.Background(), CreateUserParams{Email: "oauth@example.com", EmailVerified: true}); err != nil {
			t.Fatal(err)
		}
		runs := e.svc.hasher.Runs()
		wrong := e.login("ada@example.com", "wrong password", "")
		if n := e.svc.hasher.Runs() - runs; n != 1 {
			t.Errorf("wrong password ran %d hashes, want 1", n)
		}
		runs = e.svc.hasher.Runs()
		unknown := e.login("nobody@example.com", testPassword, "")
		if n := e.svc.hasher.Runs() - runs; n != 1 {
			t.Errorf("unknown email ran %d hashes, want 1 (same work as a wrong password)", n)
		}
		nopw := e.login("oauth@example.com", "", "")
		nopw2 := e.login("oauth@example.com", "anything", "")
		e.wantErr(wrong, 401, "invalid email or password")
		if unknown.Code != wrong.Code || unknown.Body.String() != wrong.Body.String() {
			t.Errorf("unknown email answered %d %s, wrong password %d %s", unknown.Code, unknown.Body, wrong.Code, wrong.Body)
		}
		if nopw2.Code != 401 || nopw2.Body.String() != wrong.Body.String() {
			t.Errorf("password-less account: %d %s", nopw2.Code, nopw2.Body)
		}
		if nopw.Code != 400 { // an empty password fails validation before anything else
			t.Errorf("empty password: %d %s", nopw.Code, nopw.Body)
		}
	})
}

func TestAuthenticateRejectsBadTokens(t *testing.T) {
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, nil)
		u := e.register("ada@example.com")
		good := e.tokens("ada@example.com").AccessToken
		ctx := context.Background()
		if p, err := e.svc.Authenticate(ctx, good); err != nil || p.UserID != u.ID || p.Role != platform.RoleUser || p.Email != "ada@example.com" {
			t.Fatalf("good token: %+v %v", p, err)
		}
		now := e.clock.Now()
		goodClaims, err := e.svc.parseAccess(good)
		if err != nil {
			t.Fatal(err)
		}
		other := e.tokens("ada@example.com") // another session, revoked below
		otherClaims, _ := e.svc.parseAccess(other.AccessToken)
		e.want(e.do("POST", "/auth/logout", other.AccessToken, map[string]any{"refreshToken": other.RefreshToken}), http.StatusOK, nil)
		claims := func(mut func(*accessClaims)) *accessClaims {
			c := &accessClaims{
				RegisteredClaims: jwt.RegisteredClaims{
					Issuer: "keelson", Subject: u.ID, Audience: jwt.ClaimStrings{"keelson-api"},
					IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(time.Minute)),
				},
				Role: "USER", Type: "access", Fam: goodClaims.Fam,
			}
			if mut != nil {
				mut(c)
			}
			return c
		}
		sign := func(m jwt.SigningMethod, key any, c *accessClaims) string {
			s, err := jwt.NewWithClaims(m, c).SignedString(key)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		if _, err := e.svc.Authenticate(ctx, sign(jwt.SigningMethodHS256, testSecret, claims(nil))); err != nil {
			t.Fatalf("hand-made valid token refused: %v", err)
		}
		bad := map[string]string{
			"alg none":        sign(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, claims(nil)),
			"HS384":           sign(jwt.SigningMethodHS384, testSecret, claims(nil)),
			"other key":       sign(jwt.SigningMethodHS256, []byte("another-secret-0123456789abcdef0123"), claims(nil)),
			"wrong issuer":    sign(jwt.SigningMethodHS256, testSecret, claims(func(c *accessClaims) { c.Issuer = "evil" })),
			"no session":      sign(jwt.SigningMethodHS256, testSecret, claims(func(c *accessClaims) { c.Fam = "" })),
			"unknown session": sign(jwt.SigningMethodHS256, testSecret, claims(func(c *accessClaims) { c.Fam = platform.NewID() })),
			"revoked session": sign(jwt.SigningMethodHS256, testSecret, claims(func(c *accessClaims) { c.Fam = otherClaims.Fam })),
			"wrong audience":  sign(jwt.SigningMethodHS256, testSecret, claims(func(c *accessClaims) { c.Audience = jwt.ClaimStrings{"other"} })),
			"no exp":          sign(jwt.SigningMethodHS256, testSecret, claims(func(c *accessClaims) { c.ExpiresAt = nil })),
			"expired":         sign(jwt.SigningMethodHS256, testSecret, claims(func(c *accessClaims) { c.ExpiresAt = jwt.NewNumericDate(now.Add(-time.Second)) })),
			"not access":      sign(jwt.SigningMethodHS256, testSecret, claims(func(c *accessClaims) { c.Type = "refresh" })),
			"unknown user":    sign(jwt.SigningMethodHS256, testSecret, claims(func(c *accessClaims) { c.Subject = platform.NewID() })),
			"old session":     sign(jwt.SigningMethodHS256, testSecret, claims(func(c *accessClaims) { c.SV = 7 })),
			"role forged":     "",
		}
		delete(bad, "role forged")
		for name, tok := range bad {
			if _, err := e.svc.Authenticate(ctx, tok); !errors.Is(err, platform.ErrUnauthorized) {
				t.Errorf("%s: accepted or wrong error: %v", name, err)
			}
			e.wantErr(e.do("GET", "/auth/me", tok, nil), 401, "")
		}
		// A token claiming ADMIN for a USER gets the stored role, not the claim.
		forged := sign(jwt.SigningMethodHS256, testSecret, claims(func(c *accessClaims) { c.Role = "ADMIN" }))
		if p, err := e.svc.Authenticate(ctx, forged); err != nil || p.Role != platform.RoleUser {
			t.Errorf("role claim trusted over the stored role: %+v %v", p, err)
		}
		// The real token expires after AccessTTL.
		e.clock.Advance(15*time.Minute + time.Second)
		if _, err := e.svc.Authenticate(ctx, good); !errors.Is(err, platform.ErrUnauthorized) {
			t.Errorf("expired access token accepted: %v", err)
		}
		// A deleted user's token stops working.
		e.clock.Advance(-15 * time.Minute)
		if _, err := e.svc.Authenticate(ctx, good); err != nil { // and is remembered by the bearer cache
			t.Fatal(err)
		}
		if err := e.svc.DeleteUser(ctx, u.ID); err != nil {
			t.Fatal(err)
		}
		if err := e.svc.DeleteUser(ctx, u.ID); !errors.Is(err, platform.ErrNotFound) {
			t.Errorf("deleting an absent user: %v", err)
		}
		if _, err := e.svc.Authenticate(ctx, good); !errors.Is(err, platform.ErrUnauthorized) {
			t.Errorf("token of a deleted user accepted: %v", err)
		}
		if e.count("auth_refresh_tokens", "user_id = ?", u.ID) != 0 {
			t.Error("deleting a user left its refresh tokens")
		}
	})
}

func TestProfile(t *testing.T) {
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, nil)
		u := e.register("ada@example.com")
		e.register("taken@example.com")
		tok := e.tokens("ada@example.com").AccessToken

		var got User
		e.clock.Advance(time.Minute)
		e.want(e.do("PATCH", "/auth/me", tok, map[string]any{
			"name": "Ada L", "bio": "math", "website": "https://ada.example", "codehostUsername": "ada-gh", "image": "https://img/x.png",
		}), http.StatusOK, &got)
		if *got.Name != "Ada L" || *got.Bio != "math" || *got.CodehostUsername != "ada-gh" || got.Company != nil ||
			!got.UpdatedAt.After(got.CreatedAt) || got.ID != u.ID {
			t.Errorf("patched profile %+v", got)
		}
		// An empty string clears a field; absent fields stay.
		e.want(e.do("PATCH", "/auth/me", tok, map[string]any{"bio": ""}), http.StatusOK, &got)
		if got.Bio != nil || got.Name == nil {
			t.Errorf("clearing bio: %+v", got)
		}

		// Mass assignment: fields outside SPEC's list are refused, and nothing changes.
		snapshot := e.do("GET", "/auth/me", tok, nil).Body.String()
		for _, body := range []map[string]any{
			{"role": "ADMIN"}, {"id": platform.NewID()}, {"passwordHash": "x"}, {"twoFactorEnabled": true},
			{"name": "Mallory", "role": "ADMIN"}, {"email": "not an email"}, {"name": strings.Repeat("x", 101)},
		} {
			resp := e.do("PATCH", "/auth/me", tok, body)
			if resp.Code != 400 {
				t.Errorf("PATCH %v: %d %s", body, resp.Code, resp.Body)
			}
		}
		e.wantErr(e.do("PATCH", "/auth/me", tok, map[string]any{"role": "ADMIN"}), 400, "role")
		if now := e.do("GET", "/auth/me", tok, nil).Body.String(); now != snapshot {
			t.Errorf("rejected PATCH changed the profile:\n%s\n%s", snapshot, now)
		}

		// Email: a new one needs the password; it is normalized and takes
		// effect when the link mailed to it is redeemed.
		e.want(e.do("PATCH", "/auth/me", tok, map[string]any{"email": " Ada.New@Example.com", "currentPassword": testPassword}), http.StatusOK, &got)
		if got.Email != "ada@example.com" {
			t.Errorf("email changed before the new address was verified: %q", got.Email)
		}
		e.verify("ada.new@example.com")
		e.want(e.do("GET", "/auth/me", tok, nil), http.StatusOK, &got)
		if got.Email != "ada.new@example.com" || !got.EmailVerified {
			t.Errorf("after the link: email %q verified %v", got.Email, got.EmailVerified)
		}
		e.want(e.login("ada.new@example.com", testPassword, ""), http.StatusOK, nil)
		// A taken address (any case): the request looks the same; the link answers 409 and changes nothing.
		e.want(e.do("PATCH", "/auth/me", tok, map[string]any{"email": "TAKEN@example.com", "currentPassword": testPassword, "name": "X"}), http.StatusOK, nil)
		e.wantErr(e.do("POST", "/auth/verify-email", "", map[string]any{"token": e.emailLink("taken@example.com")}), 409, "email")
		e.want(e.do("GET", "/auth/me", tok, nil), http.StatusOK, &got)
		if got.Email != "ada.new@example.com" {
			t.Errorf("409 link changed the email: %+v", got)
		}
		// The same email again is not a change: no password needed.
		e.want(e.do("PATCH", "/auth/me", tok, map[string]any{"email": "ada.new@example.com"}), http.StatusOK, nil)
	})
}

func TestServiceSurfaceForOAuth(t *testing.T) {
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, nil)
		ctx := context.Background()
		u, err := e.svc.CreateUser(ctx, CreateUserParams{Email: "Gh@Example.com", EmailVerified: true, Name: "GH", Image: "https://i/x"})
		if err != nil {
			t.Fatal(err)
		}
		if u.HasPassword || !u.EmailVerified || u.Email != "gh@example.com" {
			t.Errorf("created %+v", u)
		}
		if _, err := e.svc.CreateUser(ctx, CreateUserParams{Email: "GH@example.com"}); !errors.Is(err, platform.ErrConflict) {
			t.Errorf("duplicate CreateUser: %v", err)
		}
		byEmail, err := e.svc.UserByEmail(ctx, " gh@EXAMPLE.com")
		if err != nil || byEmail.ID != u.ID {
			t.Fatalf("UserByEmail: %+v %v", byEmail, err)
		}
		if _, err := e.svc.UserByID(ctx, platform.NewID()); !errors.Is(err, platform.ErrNotFound) {
			t.Errorf("UserByID unknown: %v", err)
		}
		if err := e.svc.SetCodehostUsername(ctx, u.ID, "octo"); err != nil {
			t.Fatal(err)
		}
		pair, err := e.svc.IssueTokens(ctx, u.ID)
		if err != nil {
			t.Fatal(err)
		}
		var me User
		e.want(e.do("GET", "/auth/me", pair.AccessToken, nil), http.StatusOK, &me)
		if me.CodehostUsername == nil || *me.CodehostUsername != "octo" {
			t.Errorf("me %+v", me)
		}
		e.want(e.do("POST", "/auth/refresh", "", map[string]any{"refreshToken": pair.RefreshToken}), http.StatusOK, nil)
	})
}
