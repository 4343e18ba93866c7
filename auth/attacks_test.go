package auth

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/uptrace/bun"
)

// TestAdminByEmailSquattingIsRefused: issue 14 attack 4. Eve registers the
// listed admin address first; it never makes her ADMIN, and no other path
// (resend, a forged link, changing her own verified account onto the
// address) does either. Removing an address from the list demotes at once.
func TestAdminByEmailSquattingIsRefused(t *testing.T) {
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, nil)
		squat := e.register("boss@example.com")
		if squat.Role != platform.RoleUser || squat.EmailVerified {
			t.Fatalf("squatter registered as %s (verified %v)", squat.Role, squat.EmailVerified)
		}
		eve := e.tokens("boss@example.com").AccessToken
		var me User
		e.want(e.do("GET", "/auth/me", eve, nil), http.StatusOK, &me)
		if me.Role != platform.RoleUser {
			t.Fatalf("unverified listed address is %s", me.Role)
		}
		// Resending mails the address's owner, not Eve; a forged token is a 400.
		e.want(e.do("POST", "/auth/verify-email/resend", eve, nil), http.StatusOK, nil)
		// (The links went to the mailbox Eve does not read.)
		if len(e.mailsTo("boss@example.com")) != 2 {
			t.Fatalf("verification links mailed: %d, want 2 (sign-up, resend)", len(e.mailsTo("boss@example.com")))
		}
		e.wantErr(e.do("POST", "/auth/verify-email", "", map[string]any{"token": "forged-token-forged-token-forged-token-123"}), 400, "token")
		if e.count("auth_users", "email_verified = ?", true) != 0 {
			t.Fatal("a refused verification verified someone")
		}
		e.want(e.do("GET", "/auth/me", eve, nil), http.StatusOK, &me)
		if me.Role != platform.RoleUser || me.EmailVerified {
			t.Fatalf("after refused attempts: %s verified %v", me.Role, me.EmailVerified)
		}

		// Eve's own verified account asks to move onto a listed address: the
		// link goes to that address; until it is redeemed nothing changes.
		e.register("eve@example.com")
		e.verify("eve@example.com")
		eve2 := e.tokens("eve@example.com").AccessToken
		e.want(e.do("PATCH", "/auth/me", eve2, map[string]any{"email": "root@example.com", "currentPassword": testPassword}), http.StatusOK, &me)
		if me.Email != "eve@example.com" || me.Role != platform.RoleUser {
			t.Fatalf("email change took effect before the link: %+v", me)
		}

		// The real owner (who reads boss@example.com) verifies: ADMIN. When the
		// operator removes the address from the list, the role goes at once.
		e.verify("boss@example.com")
		e.want(e.do("GET", "/auth/me", eve, nil), http.StatusOK, &me)
		if me.Role != platform.RoleAdmin {
			t.Fatalf("verified listed address is %s", me.Role)
		}
		e.wantErr(e.do("POST", "/auth/verify-email/resend", eve, nil), 409, "already verified")
		e.svc.admins = map[string]bool{} // a replica started with the address removed
		if p, err := e.svc.Authenticate(context.Background(), eve); err != nil || p.Role != platform.RoleUser {
			t.Fatalf("removed from the list: %+v %v", p, err)
		}
	})
}

// TestEmailChangeTakeoverIsRefused: issue 14 attack 5. With a stolen access
// token only, the email cannot be changed: no password (400), a wrong one
// (403), nothing stored, nothing mailed, the owner's sessions untouched.
func TestEmailChangeTakeoverIsRefused(t *testing.T) {
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, nil)
		e.register("ada@example.com")
		e.verify("ada@example.com")
		phone := e.tokens("ada@example.com")
		stolen := e.tokens("ada@example.com")
		mails := len(e.mail.all())

		e.wantErr(e.do("PATCH", "/auth/me", stolen.AccessToken, map[string]any{"email": "eve@evil.example"}), 400, "currentPassword")
		e.wantErr(e.do("PATCH", "/auth/me", stolen.AccessToken, map[string]any{"email": "eve@evil.example", "currentPassword": "guess"}), 403, "currentPassword")
		e.wantErr(e.do("PATCH", "/auth/me", stolen.AccessToken, map[string]any{"email": "eve@evil.example", "twoFactorCode": "123456", "name": "Eve"}), 400, "currentPassword")
		e.settle()
		var me User
		e.want(e.do("GET", "/auth/me", phone.AccessToken, nil), http.StatusOK, &me)
		if me.Email != "ada@example.com" || !me.EmailVerified || me.Name != nil {
			t.Fatalf("refused changes changed the profile: %+v", me)
		}
		if n := e.count("auth_email_tokens", "kind = ?", "change"); n != 0 || len(e.mail.all()) != mails {
			t.Fatalf("refused changes stored %d change links, mailed %d", n, len(e.mail.all())-mails)
		}
		// Forgot-password for the attacker's address reaches nobody's account.
		e.want(e.do("POST", "/auth/forgot-password", "", map[string]any{"email": "eve@evil.example"}), http.StatusOK, nil)
		if len(e.resets()) != 0 {
			t.Fatal("a reset mail went out")
		}
		e.want(e.refresh(phone.RefreshToken), http.StatusOK, nil)

		// The owner, with the password: pending until the new address's link;
		// the old address is told; every other session ends at once.
		e.want(e.do("PATCH", "/auth/me", phone.AccessToken, map[string]any{"email": "ada@new.example", "currentPassword": testPassword}), http.StatusOK, &me)
		if me.Email != "ada@example.com" {
			t.Fatalf("changed before verification: %q", me.Email)
		}
		e.wantErr(e.do("GET", "/auth/me", stolen.AccessToken, nil), 401, "")
		e.wantErr(e.refresh(stolen.RefreshToken), 401, "")
		e.want(e.do("GET", "/auth/me", phone.AccessToken, nil), http.StatusOK, nil)
		if old := e.mailsTo("ada@example.com"); len(old) == 0 || old[len(old)-1].Subject != "Your Keelson email address is being changed" {
			t.Fatalf("old address not told: %+v", old)
		}
		e.verify("ada@new.example")
		e.want(e.do("GET", "/auth/me", phone.AccessToken, nil), http.StatusOK, &me)
		if me.Email != "ada@new.example" || !me.EmailVerified {
			t.Fatalf("after the link: %+v", me)
		}
		// The link works once.
		e.wantErr(e.do("POST", "/auth/verify-email", "", map[string]any{"token": e.emailLink("ada@new.example")}), 400, "token")

		// An attacker who knows the password asks for a change to their
		// address; the owner, told by mail, resets the password: the
		// attacker's link is dead.
		e.want(e.do("PATCH", "/auth/me", phone.AccessToken, map[string]any{"email": "eve@evil.example", "currentPassword": testPassword}), http.StatusOK, nil)
		evesLink := e.emailLink("eve@evil.example")
		e.want(e.do("POST", "/auth/forgot-password", "", map[string]any{"email": "ada@new.example"}), http.StatusOK, nil)
		resets := e.resets()
		e.want(e.do("POST", "/auth/reset-password", "", map[string]any{"token": resetToken(t, resets[len(resets)-1]), "newPassword": "owner again", "confirmPassword": "owner again"}), http.StatusOK, nil)
		e.wantErr(e.do("POST", "/auth/verify-email", "", map[string]any{"token": evesLink}), 400, "token")
		if e.count("auth_users", "email = ?", "ada@new.example") != 1 {
			t.Fatal("the attacker's change went through after the reset")
		}
	})
}

// TestEmailChangeProofForOAuthAnd2FAAccounts: an account without a password
// proves an email change with a fresh 2FA code (none: 403); an account with a
// password and 2FA needs both.
func TestEmailChangeProofForOAuthAnd2FAAccounts(t *testing.T) {
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, nil)
		ctx := context.Background()
		u, err := e.svc.CreateUser(ctx, CreateUserParams{Email: "octo@example.com", EmailVerified: true})
		if err != nil {
			t.Fatal(err)
		}
		tp, err := e.svc.IssueTokens(ctx, u.ID)
		if err != nil {
			t.Fatal(err)
		}
		tok := tp.AccessToken
		e.wantErr(e.do("PATCH", "/auth/me", tok, map[string]any{"email": "x@example.com"}), 403, "no password")
		var setup TwoFactorSetup
		e.want(e.do("POST", "/auth/2fa/setup", tok, nil), http.StatusOK, &setup)
		e.want(e.do("POST", "/auth/2fa/verify", tok, map[string]any{"code": e.code(setup.Secret, 0)}), http.StatusOK, nil)
		e.wantErr(e.do("PATCH", "/auth/me", tok, map[string]any{"email": "x@example.com"}), 400, "twoFactorCode")
		e.wantErr(e.do("PATCH", "/auth/me", tok, map[string]any{"email": "x@example.com", "twoFactorCode": "000000"}), 403, "twoFactorCode")
		// The code already used by verify is not fresh.
		e.wantErr(e.do("PATCH", "/auth/me", tok, map[string]any{"email": "x@example.com", "twoFactorCode": e.code(setup.Secret, 0)}), 403, "twoFactorCode")
		if e.count("auth_email_tokens", "kind = ?", "change") != 0 {
			t.Fatal("a refused change stored a link")
		}
		e.clock.Advance(30 * time.Second)
		e.want(e.do("PATCH", "/auth/me", tok, map[string]any{"email": "x@example.com", "twoFactorCode": e.code(setup.Secret, 0)}), http.StatusOK, nil)
		e.verify("x@example.com")

		// Password and 2FA: both.
		e.register("ada@example.com")
		at := e.tokens("ada@example.com").AccessToken
		e.want(e.do("POST", "/auth/2fa/setup", at, nil), http.StatusOK, &setup)
		e.want(e.do("POST", "/auth/2fa/verify", at, map[string]any{"code": e.code(setup.Secret, 0)}), http.StatusOK, nil)
		e.wantErr(e.do("PATCH", "/auth/me", at, map[string]any{"email": "y@example.com", "currentPassword": testPassword}), 400, "twoFactorCode")
		e.clock.Advance(30 * time.Second)
		e.want(e.do("PATCH", "/auth/me", at, map[string]any{"email": "y@example.com", "currentPassword": testPassword, "twoFactorCode": e.code(setup.Secret, 0)}), http.StatusOK, nil)
	})
}
