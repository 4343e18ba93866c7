package oauth_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/auth/oauth"
	"github.com/keelson-dev/keelson/auth/oauth/oauthtest"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/pquerna/otp/totp"
	"github.com/uptrace/bun"
)

func mustJSON(t *testing.T, raw []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
}

var grace = oauthtest.OIDCUser{Subject: "idp|1001", Email: "grace@navy.example", EmailVerified: true, Name: "Grace Hopper", PreferredUsername: "grace"}

func TestIDPLogin(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, nil)
		e.idp.SignIn(grace)
		b := newBrowser(t)
		r := b.get(e.url + "/auth/idp")
		authz := r.location(t)
		q := authz.Query()
		if !strings.HasPrefix(authz.String(), e.idp.URL+"/authorize?") || q.Get("client_id") != e.idp.ClientID ||
			q.Get("redirect_uri") != e.url+"/auth/idp/callback" || q.Get("response_type") != "code" ||
			len(q.Get("nonce")) < 40 || q.Get("code_challenge_method") != "S256" || !strings.Contains(q.Get("scope"), "openid") {
			t.Fatalf("authorize URL %s", authz)
		}
		if c := r.header.Get("Set-Cookie"); !strings.Contains(c, "keelson_oauth_idp="+q.Get("state")) || !strings.Contains(c, "HttpOnly") {
			t.Fatalf("state cookie %q", c)
		}
		u := b.get(b.get(authz.String()).location(t).String()).location(t)
		id := e.loggedIn(u)
		usr := e.user(id)
		if usr.Email != "grace@navy.example" || !usr.EmailVerified || deref(usr.Name) != "Grace Hopper" || deref(usr.Username) != "grace" || usr.CodehostUsername != nil {
			t.Fatalf("created user %+v", usr)
		}
		if again := e.loggedIn(e.flow(newBrowser(t), "/auth/idp")); again != id {
			t.Fatalf("second login %s, want %s", again, id)
		}
		// The idp identity is not a code-host link.
		if login, _ := e.svc.CodehostLogin(context.Background(), id); login != "" {
			t.Fatalf("CodehostLogin %q for an idp user", login)
		}
		if e.count("auth_users") != 1 || e.count("oauth_identities") != 1 {
			t.Fatalf("users %d identities %d", e.count("auth_users"), e.count("oauth_identities"))
		}
	})
}

func TestIDPTokenRefusals(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, nil)
		e.idp.SignIn(grace)
		cases := []struct {
			name   string
			tamper func(c map[string]any)
			forged bool
			want   string
		}{
			{"wrong nonce", func(c map[string]any) { c["nonce"] = "someone-elses-nonce" }, false, oauth.ErrInvalidIDToken},
			{"no nonce", func(c map[string]any) { delete(c, "nonce") }, false, oauth.ErrInvalidIDToken},
			{"wrong issuer", func(c map[string]any) { c["iss"] = "https://evil.example" }, false, oauth.ErrInvalidIDToken},
			{"wrong audience", func(c map[string]any) { c["aud"] = "another-client" }, false, oauth.ErrInvalidIDToken},
			{"expired", func(c map[string]any) { c["exp"] = time.Now().Add(-time.Minute).Unix() }, false, oauth.ErrInvalidIDToken},
			{"forged signature", nil, true, oauth.ErrInvalidIDToken},
			{"unverified email", func(c map[string]any) { c["email_verified"] = false }, false, oauth.ErrEmailNotVerified},
			{"email_verified absent", func(c map[string]any) { delete(c, "email_verified") }, false, oauth.ErrEmailNotVerified},
		}
		for _, c := range cases {
			e.idp.Tamper(c.tamper)
			e.idp.SignWithForeignKey(c.forged)
			u := e.flow(newBrowser(t), "/auth/idp")
			if u.Query().Get("error") != c.want || u.Query().Get("accessToken") != "" {
				t.Fatalf("%s: ended on %s, want error=%s", c.name, u, c.want)
			}
			if e.count("auth_users") != 0 || e.count("oauth_identities") != 0 {
				t.Fatalf("%s: something was created", c.name)
			}
		}
		// An existing account whose address the idp does not vouch for is not logged into.
		_, _ = e.password("grace@navy.example")
		e.idp.Tamper(func(c map[string]any) { c["email_verified"] = "false" })
		e.idp.SignWithForeignKey(false)
		e.refused(e.flow(newBrowser(t), "/auth/idp"), oauth.ErrEmailNotVerified)
		if e.count("oauth_identities") != 0 {
			t.Fatal("an unverified idp email was linked")
		}
		// Honest tokens ("true" as a string counts as verified: some providers
		// send it so) still do not log into a password account whose email we
		// never verified; its owner logs in with the password instead.
		e.idp.Tamper(func(c map[string]any) { c["email_verified"] = "true" })
		e.refused(e.flow(newBrowser(t), "/auth/idp"), oauth.ErrLinkRequiresLogin)
	})
}

func TestTwoFactorAccountIsNotLinkedByEmail(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, nil)
		_, tok := e.password("grace@navy.example")
		b := newBrowser(t)
		var setup struct{ Secret string }
		mustJSON(t, b.postWithToken(e.url+"/auth/2fa/setup", tok, nil).body, &setup)
		code, err := totp.GenerateCode(setup.Secret, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if r := b.postWithToken(e.url+"/auth/2fa/verify", tok, map[string]string{"code": code}); r.status != http.StatusOK {
			t.Fatalf("2fa verify: %d %s", r.status, r.body)
		}
		e.idp.SignIn(grace)
		e.refused(e.flow(newBrowser(t), "/auth/idp"), oauth.ErrLinkRequiresLogin)
		if e.count("oauth_identities") != 0 {
			t.Fatal("a 2FA account was linked by email")
		}
	})
}

func TestUnconfiguredProvidersAnswer503NamingTheSettings(t *testing.T) {
	t.Parallel()
	bdb := dbtest.SQLite(t, sets...)
	e := newEnv(t, bdb, func(d *oauth.Deps) {
		d.Codehost.ClientSecret = ""
		d.IDP = oauth.IDPConfig{}
	})
	b := newBrowser(t)
	for path, want := range map[string][]string{
		"/auth/codehost":                  {"KEELSON_CODEHOST_CLIENT_SECRET"},
		"/auth/codehost/callback?state=x": {"KEELSON_CODEHOST_CLIENT_SECRET"},
		"/auth/codehost/connect?token=x":  {"KEELSON_CODEHOST_CLIENT_SECRET"},
		"/auth/idp":                       {"KEELSON_IDP_ISSUER", "KEELSON_IDP_CLIENT_ID", "KEELSON_IDP_CLIENT_SECRET"},
		"/auth/idp/callback?state=x":      {"KEELSON_IDP_ISSUER"},
	} {
		r := b.get(e.url + path)
		if r.status != http.StatusServiceUnavailable {
			t.Fatalf("%s: %d %s", path, r.status, r.body)
		}
		for _, w := range want {
			if !strings.Contains(r.message(), w) {
				t.Errorf("%s: %q does not name %s", path, r.message(), w)
			}
		}
		if strings.Contains(r.message(), "KEELSON_CODEHOST_CLIENT_ID") {
			t.Errorf("%s: names a setting that is set: %q", path, r.message())
		}
	}
}

func TestIDPDiscoveryIsLazyAndRetried(t *testing.T) {
	t.Parallel()
	bdb := dbtest.SQLite(t, sets...)
	// The idp is down when the server starts: start-up does not care.
	idp := oauthtest.NewOIDC(t)
	idp.Down(true)
	e := newEnv(t, bdb, func(d *oauth.Deps) {
		d.IDP = oauth.IDPConfig{Issuer: idp.URL, ClientID: idp.ClientID, ClientSecret: idp.ClientSecret}
		d.DiscoveryTimeout = 5 * time.Second
	})
	r := newBrowser(t).get(e.url + "/auth/idp")
	if r.status != http.StatusServiceUnavailable || !strings.Contains(r.message(), "identity provider") {
		t.Fatalf("idp down: %d %s", r.status, r.body)
	}
	if r.header.Get("Set-Cookie") != "" {
		t.Fatal("a failed start set a state cookie")
	}
	// It comes back: the next login discovers it.
	idp.Down(false)
	idp.SignIn(grace)
	e.loggedIn(e.flow(newBrowser(t), "/auth/idp"))
}

func TestSecureCookieOnHTTPSPublicURL(t *testing.T) {
	t.Parallel()
	bdb := dbtest.SQLite(t, sets...)
	e := newEnv(t, bdb, func(d *oauth.Deps) { d.PublicURL = "https://api.example.com" })
	r := newBrowser(t).get(e.url + "/auth/codehost")
	if c := r.header.Get("Set-Cookie"); r.status != http.StatusFound || !strings.Contains(c, "Secure") {
		t.Fatalf("%d cookie %q", r.status, c)
	}
	if q := r.location(t).Query(); q.Get("redirect_uri") != "https://api.example.com/auth/codehost/callback" {
		t.Fatalf("redirect_uri %q", q.Get("redirect_uri"))
	}
	// On https the state cookie is __Host- (Path=/, Secure, no Domain), so a
	// sibling subdomain (a deployed app) cannot toss one into a victim's browser.
	if c := r.header.Get("Set-Cookie") + ";"; !strings.HasPrefix(c, "__Host-keelson_oauth_codehost=") || !strings.Contains(c, "Path=/;") || strings.Contains(c, "Domain") {
		t.Fatalf("state cookie %q", c)
	}
}

// TestTossedStateCookieLinksNothing: Mallory starts a connect with her own
// ticket in her own browser, stops at the provider, and plants the state in
// Victor's browser from a sibling subdomain (a cookie without the __Host-
// prefix, which a subdomain can set for the parent domain), then sends Victor
// through the provider's authorize page. On https the callback only believes
// the __Host- cookie: 400, nothing linked.
func TestTossedStateCookieLinksNothing(t *testing.T) {
	t.Parallel()
	bdb := dbtest.SQLite(t, sets...)
	e := newEnv(t, bdb, func(d *oauth.Deps) { d.PublicURL = "https://api.example.com" })
	e.gh.AddUser(octo)
	e.gh.SignIn("octocat") // Victor at the code host
	mallory, malloryTok := e.password("mallory@example.com")
	// Mallory's browser: the ticket's __Host- cookie is Secure, which the test
	// client (plain http) would not send by itself, so it is sent by hand.
	r := newBrowser(t).postWithToken(e.url+"/auth/codehost/connect", malloryTok, nil)
	var tk struct{ Ticket string }
	mustJSON(t, r.body, &tk)
	binding := strings.TrimPrefix(strings.Split(r.header.Get("Set-Cookie"), ";")[0], "__Host-keelson_connect=")
	start := newBrowser(t).get(e.url+"/auth/codehost/connect?ticket="+tk.Ticket, "Cookie", "__Host-keelson_connect="+binding)
	authz := start.location(t)
	state := authz.Query().Get("state")
	// Victor's browser: the tossed cookie, then the provider's redirect back.
	victim := newBrowser(t)
	cb := victim.get(authz.String()).location(t)
	cbURL := e.url + cb.Path + "?" + cb.RawQuery
	if r := victim.get(cbURL, "Cookie", "keelson_oauth_codehost="+state); r.status != http.StatusBadRequest {
		t.Fatalf("callback with a tossed state cookie: %d %s", r.status, r.body)
	}
	if login, _ := e.svc.CodehostLogin(context.Background(), mallory.ID); login != "" || e.count("oauth_identities") != 0 {
		t.Fatalf("linked %q", login)
	}
	// The __Host- cookie itself is what the callback believes on https (the
	// state was not used up by the refusal).
	if u := victim.get(cbURL, "Cookie", "__Host-keelson_oauth_codehost="+state).location(t); u.Query().Get("codehost") != "connected" {
		t.Fatalf("callback with the __Host- state cookie: %s", u)
	}
}

func TestOpenAPIDescribesTheRedirectRoutes(t *testing.T) {
	t.Parallel()
	bdb := dbtest.SQLite(t, sets...)
	e := newEnv(t, bdb, nil)
	raw, err := json.Marshal(e.api.OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]struct {
			Parameters []struct{ Name, In string } `json:"parameters"`
			Responses  map[string]struct {
				Headers map[string]any `json:"headers"`
			} `json:"responses"`
		} `json:"paths"`
	}
	mustJSON(t, raw, &doc)
	for path, params := range map[string][]string{
		"/auth/codehost":          nil,
		"/auth/codehost/connect":  {"query:token"},
		"/auth/codehost/callback": {"query:code", "query:state", "query:error"},
		"/auth/idp":               nil,
		"/auth/idp/callback":      {"query:code", "query:state", "query:error"},
	} {
		op, ok := doc.Paths[path]["get"]
		if !ok {
			t.Fatalf("OpenAPI lacks GET %s", path)
		}
		r302, ok := op.Responses["302"]
		if !ok || r302.Headers["Location"] == nil {
			t.Errorf("GET %s: no 302 with Location: %+v", path, op.Responses)
		}
		have := map[string]bool{}
		for _, p := range op.Parameters {
			have[p.In+":"+p.Name] = true
		}
		for _, p := range params {
			if !have[p] {
				t.Errorf("GET %s: parameter %s undocumented (%v)", path, p, have)
			}
		}
	}
	if _, ok := doc.Paths["/auth/oauth/exchange"]["post"]; !ok {
		t.Fatal("OpenAPI lacks POST /auth/oauth/exchange")
	}
}
