package oauth_test

import (
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/auth"
	"github.com/keelson-dev/keelson/auth/oauth"
	"github.com/keelson-dev/keelson/auth/oauth/oauthtest"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/uptrace/bun"
)

var octo = oauthtest.GitHubUser{
	ID: 583231, Login: "octocat", Name: "The Octocat", AvatarURL: "https://avatars.example/u/583231",
	Emails: []oauthtest.GitHubEmail{
		{Email: "octo-old@example.com", Verified: true},
		{Email: "Octocat@Example.com", Primary: true, Verified: true},
	},
}

func TestCodehostFirstLoginCreatesTheUserAndLaterLoginsFindIt(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, nil)
		e.gh.AddUser(octo)
		e.gh.SignIn("octocat")
		b := newBrowser(t)

		// The start route: state + PKCE S256 to the provider, bound by a cookie.
		r := b.get(e.url + "/auth/codehost")
		authz := r.location(t)
		q := authz.Query()
		if !strings.HasPrefix(authz.String(), e.gh.URL+"/login/oauth/authorize?") || q.Get("client_id") != e.gh.ClientID ||
			q.Get("redirect_uri") != e.url+"/auth/codehost/callback" || len(q.Get("state")) < 40 ||
			q.Get("code_challenge_method") != "S256" || len(q.Get("code_challenge")) != 43 ||
			!strings.Contains(q.Get("scope"), "user:email") {
			t.Fatalf("authorize URL %s", authz)
		}
		c := r.header.Get("Set-Cookie")
		for _, want := range []string{"keelson_oauth_codehost=" + q.Get("state"), "HttpOnly", "SameSite=Lax", "Path=/auth/codehost", "Max-Age=600"} {
			if !strings.Contains(c, want) {
				t.Errorf("state cookie %q lacks %q", c, want)
			}
		}
		if strings.Contains(c, "Secure") {
			t.Errorf("cookie is Secure on an http public URL: %q", c)
		}
		cb := b.get(authz.String()).location(t)
		r = b.get(cb.String())
		u := r.location(t)
		id := e.loggedIn(u)
		if !strings.Contains(r.header.Get("Set-Cookie"), "Max-Age=0") {
			t.Errorf("callback does not clear the state cookie: %q", r.header.Get("Set-Cookie"))
		}
		if e.gh.JSONRequested() != 1 {
			t.Errorf("token request did not ask for JSON")
		}

		// The new account: the primary verified email, profile from the code host.
		usr := e.user(id)
		if usr.Email != "octocat@example.com" || !usr.EmailVerified || usr.HasPassword ||
			deref(usr.CodehostUsername) != "octocat" || deref(usr.Name) != "The Octocat" || deref(usr.Image) != octo.AvatarURL {
			t.Fatalf("created user %+v", usr)
		}
		ctx := context.Background()
		if login, err := e.svc.CodehostLogin(ctx, id); err != nil || login != "octocat" {
			t.Fatalf("CodehostLogin = %q, %v", login, err)
		}
		// The code host's token is stored sealed and opens to what the code host issued.
		var stored string
		if err := bdb.NewSelect().Table("oauth_identities").Column("access_token").Where("user_id = ?", id).Scan(ctx, &stored); err != nil {
			t.Fatal(err)
		}
		issued := e.gh.IssuedTokens()
		if len(issued) != 1 || stored == "" || strings.Contains(stored, issued[0]) {
			t.Fatalf("token at rest %q (issued %v)", stored, issued)
		}
		if tok, err := e.svc.CodehostAccessToken(ctx, id); err != nil || tok != issued[0] {
			t.Fatalf("CodehostAccessToken = %q, %v", tok, err)
		}

		// The user renames themselves at the code host and logs in again: same account, new username.
		renamed := octo
		renamed.Login = "octo-renamed"
		e.gh.AddUser(renamed)
		e.gh.SignIn("octo-renamed")
		if again := e.loggedIn(e.flow(newBrowser(t), "/auth/codehost")); again != id {
			t.Fatalf("second login made user %s, want %s", again, id)
		}
		if e.count("auth_users") != 1 || e.count("oauth_identities") != 1 {
			t.Fatalf("users %d identities %d", e.count("auth_users"), e.count("oauth_identities"))
		}
		if got := deref(e.user(id).CodehostUsername); got != "octo-renamed" {
			t.Fatalf("codehostUsername %q after rename", got)
		}
		if tok, _ := e.svc.CodehostAccessToken(ctx, id); tok == issued[0] {
			t.Fatal("the stored token was not refreshed on the second login")
		}
		// No token, code or state reached the logs.
		logs := e.logs.String()
		for _, secret := range append(e.gh.IssuedTokens(), u.Query().Get("accessToken"), u.Query().Get("refreshToken"), q.Get("state"), cb.Query().Get("code")) {
			if strings.Contains(logs, secret) {
				t.Fatalf("a secret reached the logs")
			}
		}
	})
}

func TestCodehostStateRefusals(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, nil)
		e.gh.AddUser(octo)
		e.gh.SignIn("octocat")
		nothing := func(when string) {
			t.Helper()
			if e.count("auth_users") != 0 || e.count("oauth_identities") != 0 || e.gh.Exchanges() != 0 {
				t.Fatalf("%s: something was created (users %d, identities %d, code exchanges %d)", when,
					e.count("auth_users"), e.count("oauth_identities"), e.gh.Exchanges())
			}
		}
		want400 := func(r resp, word, when string) {
			t.Helper()
			if r.status != http.StatusBadRequest || !strings.Contains(r.message(), word) {
				t.Fatalf("%s: %d %s", when, r.status, r.body)
			}
		}

		// No state cookie: the callback did not start in this browser (login CSRF).
		cb := e.begin(newBrowser(t), "/auth/codehost")
		want400(newBrowser(t).get(cb.String()), "state", "callback in another browser")
		nothing("no cookie")

		// Missing state.
		b := newBrowser(t)
		cb = e.begin(b, "/auth/codehost")
		noState := *cb
		q := cb.Query()
		q.Del("state")
		noState.RawQuery = q.Encode()
		want400(b.get(noState.String()), "state", "missing state")
		nothing("missing state")

		// Mismatched state: a state of another browser's flow with this browser's cookie.
		other := e.begin(newBrowser(t), "/auth/codehost")
		mixed := *cb
		q = cb.Query()
		q.Set("state", other.Query().Get("state"))
		mixed.RawQuery = q.Encode()
		want400(b.get(mixed.String()), "does not match", "mismatched state")
		nothing("mismatched state")

		// The genuine callback works once...
		state := cb.Query().Get("state")
		id := e.loggedIn(b.get(cb.String()).location(t))
		// ...and replaying it fails: the browser's cookie is gone, and with the
		// old cookie put back by hand the state is already used.
		want400(b.get(cb.String()), "state", "replay in the same browser")
		want400(newBrowser(t).get(cb.String(), "Cookie", "keelson_oauth_codehost="+state), "already used", "replay with the cookie")
		if e.count("auth_users") != 1 || e.count("oauth_identities") != 1 || e.gh.Exchanges() != 1 {
			t.Fatalf("replays created something: users %d identities %d exchanges %d", e.count("auth_users"), e.count("oauth_identities"), e.gh.Exchanges())
		}
		_ = id

		// An expired state (the user took longer than StateTTL) is refused.
		b = newBrowser(t)
		cb = e.begin(b, "/auth/codehost")
		e.clock.Advance(11 * time.Minute)
		want400(b.get(cb.String()), "expired", "expired state")
		if e.gh.Exchanges() != 1 {
			t.Fatal("an expired state still traded its code")
		}
	})
}

func TestCodehostAuthorizationCodeInjectionIsRefused(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, nil)
		e.gh.AddUser(octo)
		e.gh.SignIn("octocat")
		// The victim's code is stolen; the attacker injects it into a flow of
		// their own browser. PKCE binds the code to the victim's verifier.
		victimCB := e.begin(newBrowser(t), "/auth/codehost")
		attacker := newBrowser(t)
		attackerCB := e.begin(attacker, "/auth/codehost")
		injected := *attackerCB
		q := attackerCB.Query()
		q.Set("code", victimCB.Query().Get("code"))
		injected.RawQuery = q.Encode()
		e.refused(attacker.get(injected.String()).location(t), oauth.ErrExchangeFailed)
		if e.count("auth_users") != 0 || e.gh.Exchanges() != 0 {
			t.Fatal("an injected code logged someone in")
		}
		// A replayed (already traded) code is refused by the provider too.
		b := newBrowser(t)
		cb := e.begin(b, "/auth/codehost")
		e.loggedIn(b.get(cb.String()).location(t))
		b2 := newBrowser(t)
		cb2 := e.begin(b2, "/auth/codehost")
		q = cb2.Query()
		q.Set("code", cb.Query().Get("code"))
		cb2.RawQuery = q.Encode()
		e.refused(b2.get(cb2.String()).location(t), oauth.ErrExchangeFailed)
		if e.gh.Exchanges() != 1 {
			t.Fatalf("exchanges %d", e.gh.Exchanges())
		}
	})
}

func TestCodehostEmailVerificationRules(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, nil)
		ctx := context.Background()

		// Unverified email, no account: nothing is created.
		e.gh.AddUser(oauthtest.GitHubUser{ID: 1, Login: "unv", Emails: []oauthtest.GitHubEmail{{Email: "unv@example.com", Primary: true}}})
		e.gh.SignIn("unv")
		e.refused(e.flow(newBrowser(t), "/auth/codehost"), oauth.ErrEmailNotVerified)
		if e.count("auth_users") != 0 || e.count("oauth_identities") != 0 {
			t.Fatal("an unverified email created an account")
		}
		// No email at all.
		e.gh.AddUser(oauthtest.GitHubUser{ID: 2, Login: "noemail"})
		e.gh.SignIn("noemail")
		e.refused(e.flow(newBrowser(t), "/auth/codehost"), oauth.ErrEmailMissing)

		// Unverified email matching an existing account: no link, no login.
		victim, _ := e.password("victim@example.com")
		e.gh.AddUser(oauthtest.GitHubUser{ID: 3, Login: "squatter", Emails: []oauthtest.GitHubEmail{{Email: "victim@example.com", Primary: true}}})
		e.gh.SignIn("squatter")
		e.refused(e.flow(newBrowser(t), "/auth/codehost"), oauth.ErrEmailNotVerified)
		if e.count("oauth_identities") != 0 || deref(e.user(victim.ID).CodehostUsername) != "" {
			t.Fatal("an unverified email was linked to an existing account")
		}

		// A verified email matching a password account is not linked: nobody
		// verified that the registrant owns the address (pre-registration
		// squatting). The owner logs in and connects instead.
		squatted, _ := e.password("taken@example.com")
		e.gh.AddUser(oauthtest.GitHubUser{ID: 6, Login: "real-owner", Emails: []oauthtest.GitHubEmail{{Email: "taken@example.com", Primary: true, Verified: true}}})
		e.gh.SignIn("real-owner")
		e.refused(e.flow(newBrowser(t), "/auth/codehost"), oauth.ErrLinkRequiresLogin)
		if login, _ := e.svc.CodehostLogin(ctx, squatted.ID); login != "" {
			t.Fatalf("a password account with an unverified email was linked to %q", login)
		}

		// Nor any other account whose email we never verified, with or without
		// a password: unverified accounts are never linked by email.
		unverified, err := e.accounts.CreateUser(ctx, auth.CreateUserParams{Email: "nopw@example.com"})
		if err != nil {
			t.Fatal(err)
		}
		e.gh.AddUser(oauthtest.GitHubUser{ID: 7, Login: "nopw-owner", Emails: []oauthtest.GitHubEmail{{Email: "nopw@example.com", Primary: true, Verified: true}}})
		e.gh.SignIn("nopw-owner")
		e.refused(e.flow(newBrowser(t), "/auth/codehost"), oauth.ErrLinkRequiresLogin)
		if login, _ := e.svc.CodehostLogin(ctx, unverified.ID); login != "" {
			t.Fatalf("an unverified account was linked to %q", login)
		}

		// A verified (non-primary) email of an existing verified, password-less
		// account (e.g. made by an earlier idp login) links to it.
		ada, err := e.accounts.CreateUser(ctx, auth.CreateUserParams{Email: "ada@example.com", EmailVerified: true})
		if err != nil {
			t.Fatal(err)
		}
		e.gh.AddUser(oauthtest.GitHubUser{ID: 4, Login: "ada-gh", Emails: []oauthtest.GitHubEmail{
			{Email: "ada-unverified@example.com", Primary: true}, {Email: "ADA@example.com", Verified: true},
		}})
		e.gh.SignIn("ada-gh")
		if got := e.loggedIn(e.flow(newBrowser(t), "/auth/codehost")); got != ada.ID {
			t.Fatalf("verified email logged into %s, want %s", got, ada.ID)
		}
		if login, _ := e.svc.CodehostLogin(ctx, ada.ID); login != "ada-gh" || deref(e.user(ada.ID).CodehostUsername) != "ada-gh" {
			t.Fatalf("link not recorded: %q", login)
		}

		// Another code-host account with a verified email of ada's: ada is
		// already linked to ada-gh, so this one is not linked behind her back.
		e.gh.AddUser(oauthtest.GitHubUser{ID: 5, Login: "ada-second", Emails: []oauthtest.GitHubEmail{{Email: "ada@example.com", Primary: true, Verified: true}}})
		e.gh.SignIn("ada-second")
		e.refused(e.flow(newBrowser(t), "/auth/codehost"), oauth.ErrAccountLinked)
		if login, _ := e.svc.CodehostLogin(ctx, ada.ID); login != "ada-gh" {
			t.Fatalf("ada's link changed to %q", login)
		}

		// The user declines at the provider.
		e.gh.Deny(true)
		e.refused(e.flow(newBrowser(t), "/auth/codehost"), oauth.ErrAccessDenied)
		if e.count("auth_users") != 4 || e.count("oauth_identities") != 1 {
			t.Fatalf("users %d identities %d", e.count("auth_users"), e.count("oauth_identities"))
		}
	})
}

func TestCodehostConnect(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, nil)
		ctx := context.Background()
		e.gh.AddUser(octo)
		e.gh.AddUser(oauthtest.GitHubUser{ID: 42, Login: "octo-work", Emails: []oauthtest.GitHubEmail{{Email: "work@corp.example", Primary: true, Verified: true}}})
		// The account's email differs from the code host's: connect links by the
		// signed-in user, not by email.
		alice, aliceTok := e.password("alice@example.com")
		bob, bobTok := e.password("bob@example.com")

		// No token, a bad token: 401, and no redirect to the provider.
		if r := newBrowser(t).get(e.url + "/auth/codehost/connect"); r.status != http.StatusUnauthorized || !strings.Contains(r.message(), "token") {
			t.Fatalf("connect without a token: %d %s", r.status, r.body)
		}
		if r := newBrowser(t).postWithToken(e.url+"/auth/codehost/connect", "not-a-jwt", nil); r.status != http.StatusUnauthorized {
			t.Fatalf("ticket with a bad token: %d %s", r.status, r.body)
		}
		// The access token as a query parameter is refused outright.
		if r := newBrowser(t).get(e.url + "/auth/codehost/connect?token=" + aliceTok); r.status != http.StatusBadRequest || !strings.Contains(r.message(), "ticket") {
			t.Fatalf("connect with ?token=: %d %s", r.status, r.body)
		}

		// A browser: a ticket from POST (Bearer), opened in the same browser.
		e.gh.SignIn("octocat")
		b := newBrowser(t)
		tk := e.ticket(b, aliceTok)
		u := e.flow(b, tk)
		if u.Path != "/settings/connected-accounts" || u.Query().Get("codehost") != "connected" || u.Query().Get("accessToken") != "" {
			t.Fatalf("connect ended on %s", u)
		}
		if login, _ := e.svc.CodehostLogin(ctx, alice.ID); login != "octocat" || deref(e.user(alice.ID).CodehostUsername) != "octocat" {
			t.Fatalf("alice's link %q", login)
		}
		if strings.Contains(e.logs.String(), aliceTok) {
			t.Fatal("the access token reached the logs")
		}
		// The ticket works once.
		if r := b.get(e.url + tk); r.status != http.StatusBadRequest || !strings.Contains(r.message(), "ticket") {
			t.Fatalf("replayed ticket: %d %s", r.status, r.body)
		}
		// Logging in through the code host now lands in alice's account.
		if got := e.loggedIn(e.flow(newBrowser(t), "/auth/codehost")); got != alice.ID {
			t.Fatalf("login after connect: %s, want alice %s", got, alice.ID)
		}

		// Bob tries to connect the same code-host account (Bearer header this time): refused.
		u = e.flow(newBrowser(t), "/auth/codehost/connect", "Authorization", "Bearer "+bobTok)
		if u.Path != "/settings/connected-accounts" || u.Query().Get("codehost") != "error" || u.Query().Get("reason") != oauth.ErrAlreadyLinked {
			t.Fatalf("connecting alice's identity as bob ended on %s", u)
		}
		if login, _ := e.svc.CodehostLogin(ctx, bob.ID); login != "" {
			t.Fatalf("bob got %q", login)
		}
		if login, _ := e.svc.CodehostLogin(ctx, alice.ID); login != "octocat" {
			t.Fatalf("alice lost her link: %q", login)
		}

		// Alice connects another code-host account: it replaces the first.
		e.gh.SignIn("octo-work")
		b = newBrowser(t)
		if u = e.flow(b, e.ticket(b, aliceTok)); u.Query().Get("codehost") != "connected" {
			t.Fatalf("reconnect ended on %s", u)
		}
		if login, _ := e.svc.CodehostLogin(ctx, alice.ID); login != "octo-work" {
			t.Fatalf("alice's link after reconnect %q", login)
		}
		// octocat is free now, so bob may connect it.
		e.gh.SignIn("octocat")
		if u = e.flow(newBrowser(t), "/auth/codehost/connect", "Authorization", "Bearer "+bobTok); u.Query().Get("codehost") != "connected" {
			t.Fatalf("bob's connect ended on %s", u)
		}
		if e.count("auth_users") != 2 || e.count("oauth_identities") != 2 {
			t.Fatalf("users %d identities %d", e.count("auth_users"), e.count("oauth_identities"))
		}
	})
}

func TestRedirectModeCode(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, func(d *oauth.Deps) { d.RedirectMode = oauth.RedirectCode })
		e.gh.AddUser(octo)
		e.gh.SignIn("octocat")
		b := newBrowser(t)
		u := e.flow(b, "/auth/codehost")
		code := u.Query().Get("code")
		if u.Path != "/auth/callback" || code == "" || u.Query().Get("accessToken") != "" || u.Query().Get("refreshToken") != "" {
			t.Fatalf("code mode redirect %s", u)
		}
		r := b.postJSON(e.url+"/auth/oauth/exchange", map[string]string{"code": code})
		if r.status != http.StatusOK || r.header.Get("Cache-Control") != "no-store" {
			t.Fatalf("exchange: %d %s", r.status, r.body)
		}
		var tp struct{ AccessToken, RefreshToken, TokenType string }
		mustJSON(t, r.body, &tp)
		if tp.TokenType != "Bearer" || tp.RefreshToken == "" {
			t.Fatalf("token pair %s", r.body)
		}
		id := e.userIDOf(tp.AccessToken)
		if deref(e.user(id).CodehostUsername) != "octocat" {
			t.Fatal("exchanged tokens are not octocat's")
		}
		// Single use.
		if r = b.postJSON(e.url+"/auth/oauth/exchange", map[string]string{"code": code}); r.status != http.StatusBadRequest || !strings.Contains(r.message(), "code") {
			t.Fatalf("replayed code: %d %s", r.status, r.body)
		}
		// Unknown, empty, unknown fields.
		if r = b.postJSON(e.url+"/auth/oauth/exchange", map[string]string{"code": "nope"}); r.status != http.StatusBadRequest {
			t.Fatalf("unknown code: %d", r.status)
		}
		if r = b.postJSON(e.url+"/auth/oauth/exchange", map[string]string{"code": ""}); r.status != http.StatusBadRequest || !strings.Contains(r.message(), "body.code") {
			t.Fatalf("empty code: %d %s", r.status, r.body)
		}
		// Expired: codes live under a minute (30 s by default).
		u = e.flow(newBrowser(t), "/auth/codehost")
		e.clock.Advance(31 * time.Second)
		if r = b.postJSON(e.url+"/auth/oauth/exchange", map[string]string{"code": u.Query().Get("code")}); r.status != http.StatusBadRequest {
			t.Fatalf("expired code: %d %s", r.status, r.body)
		}
		if _, err := oauth.New(oauth.Deps{DB: bdb, Accounts: e.accounts, Authn: e.accounts, Sealer: e.sealer, CodeTTL: 2 * time.Minute}); err == nil {
			t.Fatal("a CodeTTL over a minute was accepted")
		}
		if _, err := oauth.New(oauth.Deps{DB: bdb, Accounts: e.accounts, Authn: e.accounts, Sealer: e.sealer, RedirectMode: "cookie"}); err == nil || !strings.Contains(err.Error(), "RedirectMode") {
			t.Fatalf("bad RedirectMode: %v", err)
		}
	})
}

func TestConcurrentCallbacksWithOneStateLogInOnce(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, nil)
		e.gh.AddUser(octo)
		e.gh.SignIn("octocat")
		cb := e.begin(newBrowser(t), "/auth/codehost")
		cookie := "keelson_oauth_codehost=" + cb.Query().Get("state")
		const n = 4
		statuses := make(chan resp, n)
		for range n {
			go func() { statuses <- newBrowser(t).get(cb.String(), "Cookie", cookie) }()
		}
		ok, refused := 0, 0
		for range n {
			switch r := <-statuses; {
			case r.status == http.StatusFound && strings.Contains(r.header.Get("Location"), "accessToken="):
				ok++
			case r.status == http.StatusBadRequest:
				refused++
			default:
				t.Errorf("unexpected answer %d %s %s", r.status, r.header.Get("Location"), r.body)
			}
		}
		if ok != 1 || refused != n-1 || e.gh.Exchanges() != 1 || e.count("auth_users") != 1 {
			t.Fatalf("ok %d refused %d exchanges %d users %d", ok, refused, e.gh.Exchanges(), e.count("auth_users"))
		}
	})
}

// TestConnectTicketForcedLinking is attack 3 of issue 14: Mallory gets a
// connect ticket for her own account and gets it opened in Victor's browser
// (a link, an <img>, a redirect), where Victor is signed in to the code host.
// Nothing may be linked: the ticket works only with the cookie of the browser
// that asked for it. Before the fix the link carried ?token=<Mallory's token>
// and Victor's code-host account ended up in Mallory's Keelson account.
func TestConnectTicketForcedLinking(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, nil)
		ctx := context.Background()
		e.gh.AddUser(octo) // Victor's code-host account
		e.gh.SignIn("octocat")
		mallory, malloryTok := e.password("mallory@example.com")
		victor, victorTok := e.password("victor@example.com")

		// Mallory asks for a ticket from her own machine.
		attacker := newBrowser(t)
		ticketURL := e.ticket(attacker, malloryTok)
		before := e.count("oauth_identities")

		// Victor's browser opens it: no cookie for it there.
		victim := newBrowser(t)
		r := victim.get(e.url + ticketURL)
		if r.status != http.StatusBadRequest || !strings.Contains(r.message(), "ticket") || r.header.Get("Location") != "" {
			t.Fatalf("attacker's ticket in the victim's browser: %d %s (Location %q)", r.status, r.body, r.header.Get("Location"))
		}
		// Victor's browser holding a cookie of its own (he asked for a ticket
		// himself earlier) fares no better with Mallory's ticket.
		e.ticket(victim, victorTok)
		if r := victim.get(e.url + ticketURL); r.status != http.StatusBadRequest {
			t.Fatalf("attacker's ticket with the victim's own connect cookie: %d %s", r.status, r.body)
		}
		// Nor does a browser sending Mallory's ticket with a made-up cookie.
		if r := newBrowser(t).get(e.url+ticketURL, "Cookie", "keelson_connect=made-up"); r.status != http.StatusBadRequest {
			t.Fatalf("attacker's ticket with a forged cookie: %d %s", r.status, r.body)
		}
		// The old form of the attack: the access token in the link.
		if r := victim.get(e.url + "/auth/codehost/connect?token=" + malloryTok); r.status != http.StatusBadRequest {
			t.Fatalf("?token= in the victim's browser: %d %s", r.status, r.body)
		}
		if n := e.count("oauth_identities"); n != before {
			t.Fatalf("identities %d, want %d: something was linked", n, before)
		}
		if e.gh.Exchanges() != 0 || e.count("oauth_states") != 0 {
			t.Fatal("a refused ticket started a flow at the code host")
		}
		for _, id := range []string{mallory.ID, victor.ID} {
			if login, _ := e.svc.CodehostLogin(ctx, id); login != "" {
				t.Fatalf("user %s got linked to %q", id, login)
			}
		}
		// Victor's next "log in with the code host" does not land in Mallory's
		// account (it is refused: his email matches a password account).
		u := e.flow(newBrowser(t), "/auth/codehost")
		if u.Query().Get("accessToken") != "" && e.userIDOf(u.Query().Get("accessToken")) == mallory.ID {
			t.Fatal("the victim's code-host login landed in the attacker's account")
		}

		// Mallory's ticket still works in her own browser (it was never used up)...
		e.gh.AddUser(oauthtest.GitHubUser{ID: 666, Login: "mallory-gh", Emails: []oauthtest.GitHubEmail{{Email: "m@evil.example", Primary: true, Verified: true}}})
		e.gh.SignIn("mallory-gh")
		if u := e.flow(attacker, ticketURL); u.Query().Get("codehost") != "connected" {
			t.Fatalf("ticket in its own browser: %s", u)
		}
		// ...and a ticket expires after 5 minutes.
		b := newBrowser(t)
		late := e.ticket(b, victorTok)
		e.clock.Advance(oauth.ConnectTicketTTL + time.Second)
		if r := b.get(e.url + late); r.status != http.StatusBadRequest {
			t.Fatalf("expired ticket: %d %s", r.status, r.body)
		}
	})
}

func TestConnectTicketCookie(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		for _, c := range []struct {
			public string
			want   []string
			not    string
		}{
			{"", []string{"keelson_connect=", "HttpOnly", "SameSite=Lax", "Path=/auth/codehost/connect", "Max-Age=300"}, "Secure"},
			{"https://api.keelson.example", []string{"__Host-keelson_connect=", "HttpOnly", "SameSite=Lax", "Path=/;", "Secure", "Max-Age=300"}, "Domain"},
		} {
			e := newEnv(t, bdb, func(d *oauth.Deps) {
				if c.public != "" {
					d.PublicURL = c.public
				}
			})
			_, tok := e.password(platform.NewID() + "@example.com")
			r := newBrowser(t).postWithToken(e.url+"/auth/codehost/connect", tok, nil)
			if r.status != http.StatusOK || r.header.Get("Cache-Control") != "no-store" {
				t.Fatalf("POST /auth/codehost/connect: %d %s", r.status, r.body)
			}
			var body struct {
				Ticket, ConnectURL string
				ExpiresAt          time.Time
			}
			if err := json.Unmarshal(r.body, &body); err != nil || len(body.Ticket) < 40 {
				t.Fatalf("ticket answer %s", r.body)
			}
			base := cmp.Or(c.public, e.url)
			if body.ConnectURL != base+"/auth/codehost/connect?ticket="+body.Ticket {
				t.Fatalf("connectUrl %q", body.ConnectURL)
			}
			ck := r.header.Get("Set-Cookie") + ";"
			for _, w := range c.want {
				if !strings.Contains(ck, w) {
					t.Errorf("%s: cookie %q lacks %q", cmp.Or(c.public, "http"), ck, w)
				}
			}
			if strings.Contains(ck, c.not) || strings.Contains(ck, body.Ticket) {
				t.Errorf("cookie %q has %q or the ticket itself", ck, c.not)
			}
			if n, _ := bdb.NewSelect().Table("oauth_connect_tickets").Where("id = ?", body.Ticket).Count(context.Background()); n != 0 {
				t.Error("the ticket is stored in clear")
			}
		}
	})
}

// TestConnectTicketNext: a ticket another module issues with next ends a
// successful link there (the codehost install page), and only a next on the
// code host, the frontend or this API is accepted.
func TestConnectTicketNext(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, nil)
		ctx := context.Background()
		e.gh.AddUser(octo)
		e.gh.SignIn("octocat")
		u, _ := e.password("next@example.com")
		for _, bad := range []string{"https://evil.example/apps/x", "javascript:alert(1)", "//evil.example/x", e.gh.URL + "@evil.example/"} {
			if _, err := e.svc.IssueConnectTicket(ctx, u.ID, bad); err == nil {
				t.Fatalf("next %q accepted", bad)
			}
		}
		next := e.gh.URL + "/apps/keelson/installations/new?state=abc"
		tk, err := e.svc.IssueConnectTicket(ctx, u.ID, next)
		if err != nil {
			t.Fatal(err)
		}
		b := newBrowser(t)
		jarURL, _ := url.Parse(e.url + "/auth/codehost/connect")
		b.c.Jar.SetCookies(jarURL, []*http.Cookie{tk.Cookie})
		cb := e.begin(b, "/auth/codehost/connect?ticket="+url.QueryEscape(tk.Ticket))
		if got := b.get(cb.String()).location(t).String(); got != next {
			t.Fatalf("connect ended on %s, want %s", got, next)
		}
		if login, _ := e.svc.CodehostLogin(ctx, u.ID); login != "octocat" {
			t.Fatalf("linked %q", login)
		}
	})
}
