package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/auth/oauth/oauthtest"
)

const oauthFrontend = "http://app.keelson.test"

// oauthBrowser is a cookie-keeping client that does not follow redirects, so
// the test sees the hop to the provider and the hop to the frontend.
type oauthBrowser struct {
	t  *testing.T
	ts *testServer
	c  *http.Client
}

func newOAuthBrowser(t *testing.T, ts *testServer) *oauthBrowser {
	jar, _ := cookiejar.New(nil)
	return &oauthBrowser{t: t, ts: ts, c: &http.Client{
		Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

type oauthHop struct {
	status int
	header http.Header
	body   string
	loc    *url.URL
}

func (b *oauthBrowser) get(u string, hdr ...string) oauthHop {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := b.c.Do(req)
	if err != nil {
		b.t.Fatalf("GET %s: %v", req.URL.Path, err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	h := oauthHop{status: res.StatusCode, header: res.Header, body: string(body)}
	if res.StatusCode == http.StatusFound {
		h.loc, _ = url.Parse(res.Header.Get("Location"))
	}
	return h
}

// begin opens a start route of the server and lets the fake provider approve;
// it answers the callback URL on the server (the provider redirects to the
// configured public URL, which the test server does not know, so the
// callback's path and query are replayed against the server as a browser
// would).
func (b *oauthBrowser) begin(path string, hdr ...string) string {
	b.t.Helper()
	start := b.get(b.ts.URL+path, hdr...)
	if start.status != http.StatusFound {
		b.t.Fatalf("GET %s: %d %s", path, start.status, start.body)
	}
	approve := b.get(start.loc.String())
	if approve.status != http.StatusFound {
		b.t.Fatalf("provider authorize: %d %s", approve.status, approve.body)
	}
	return b.ts.URL + approve.loc.Path + "?" + approve.loc.RawQuery
}

// finish visits a callback URL and answers the frontend URL it redirects to.
func (b *oauthBrowser) finish(cb string) *url.URL {
	b.t.Helper()
	h := b.get(cb)
	if h.status != http.StatusFound || !strings.HasPrefix(h.loc.String(), oauthFrontend+"/") {
		b.t.Fatalf("callback: %d %s %v", h.status, h.body, h.loc)
	}
	if h.header.Get("Referrer-Policy") != "no-referrer" || h.header.Get("Cache-Control") != "no-store" {
		b.t.Errorf("callback headers %v", h.header)
	}
	return h.loc
}

// connectTicket asks for a connect ticket as token from this browser (which
// keeps its cookie) and answers the path and query of its connectUrl.
func (b *oauthBrowser) connectTicket(token string) string {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.ts.URL+"/auth/codehost/connect", nil)
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer res.Body.Close()
	var out struct {
		ConnectURL string `json:"connectUrl"`
	}
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil || res.StatusCode != http.StatusOK {
		b.t.Fatalf("POST /auth/codehost/connect: %d %v", res.StatusCode, err)
	}
	u, err := url.Parse(out.ConnectURL)
	if err != nil || u.Query().Get("ticket") == "" {
		b.t.Fatalf("connectUrl %q", out.ConnectURL)
	}
	return u.Path + "?" + u.RawQuery
}

func (b *oauthBrowser) flow(path string, hdr ...string) *url.URL {
	b.t.Helper()
	return b.finish(b.begin(path, hdr...))
}

type oauthFakes struct {
	gh  *oauthtest.GitHub
	idp *oauthtest.OIDC
}

func startOAuthServer(t *testing.T, dbURL, mode string) (*testServer, oauthFakes) {
	f := oauthFakes{gh: oauthtest.NewGitHub(t), idp: oauthtest.NewOIDC(t)}
	ts := startServer(t, dbURL, func(c *Config) {
		c.FrontendURL = oauthFrontend
		c.CodehostClientID, c.CodehostClientSecret = f.gh.ClientID, f.gh.ClientSecret
		c.CodehostWebURL, c.CodehostAPIURL = f.gh.URL, f.gh.URL
		c.IDPIssuer, c.IDPClientID, c.IDPClientSecret = f.idp.URL, f.idp.ClientID, f.idp.ClientSecret
		c.OAuthRedirectMode = mode
	})
	return ts, f
}

// me answers GET /auth/me of token.
func oauthMe(t *testing.T, ts *testServer, token string) map[string]any {
	t.Helper()
	var me map[string]any
	ts.doJSON(t, http.StatusOK, "GET", "/auth/me", token, nil, &me)
	return me
}

func TestOAuthE2E(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, dbURL string) {
		ts, f := startOAuthServer(t, dbURL, "")
		f.gh.AddUser(oauthtest.GitHubUser{ID: 9001, Login: "linus", Name: "Linus", Emails: []oauthtest.GitHubEmail{
			{Email: "linus@kernel.example", Primary: true, Verified: true}}})
		f.gh.AddUser(oauthtest.GitHubUser{ID: 9002, Login: "mallory", Emails: []oauthtest.GitHubEmail{
			{Email: "owner@example.com", Primary: true, Verified: false}}})
		f.gh.SignIn("linus")

		// First login through the code host creates the account; tokens in the query.
		u := newOAuthBrowser(t, ts).flow("/auth/codehost")
		access := u.Query().Get("accessToken")
		if u.Path != "/auth/callback" || access == "" || u.Query().Get("refreshToken") == "" {
			t.Fatalf("login ended on %s", u)
		}
		me := oauthMe(t, ts, access)
		if me["email"] != "linus@kernel.example" || me["codehostUsername"] != "linus" || me["name"] != "Linus" {
			t.Fatalf("GET /auth/me after first login: %v", me)
		}
		linusID, _ := me["id"].(string)
		if login, err := ts.App.OAuth.CodehostLogin(t.Context(), linusID); err != nil || login != "linus" {
			t.Fatalf("CodehostLogin %q %v", login, err)
		}
		// The refresh token from the redirect works like a login's.
		var pair map[string]any
		ts.doJSON(t, http.StatusOK, "POST", "/auth/refresh", "", map[string]string{"refreshToken": u.Query().Get("refreshToken")}, &pair)
		// A second login finds the same account.
		u = newOAuthBrowser(t, ts).flow("/auth/codehost")
		if oauthMe(t, ts, u.Query().Get("accessToken"))["id"] != linusID {
			t.Fatal("second login made another account")
		}
		// Each login left one audit row (the refresh none), actor linus, no address of the provider.
		var logins []auditRow
		for _, r := range auditRows(t, ts) {
			if r.ActorID == linusID && r.Action == "account.login" {
				logins = append(logins, r)
			}
		}
		if len(logins) != 2 || logins[0].Summary != "logged in through an identity provider" || logins[0].Addr != "127.0.0.1" {
			t.Fatalf("audit rows of two OAuth logins: %+v", logins)
		}

		// Bad state: a callback this browser did not start; a tampered state.
		cb := newOAuthBrowser(t, ts).begin("/auth/codehost")
		if h := newOAuthBrowser(t, ts).get(cb); h.status != http.StatusBadRequest || !strings.Contains(h.body, "state") {
			t.Fatalf("foreign callback: %d %s", h.status, h.body)
		}
		b := newOAuthBrowser(t, ts)
		cb = b.begin("/auth/codehost")
		if h := b.get(strings.Replace(cb, "state=", "state=x", 1)); h.status != http.StatusBadRequest || !strings.Contains(h.body, "state") {
			t.Fatalf("tampered state: %d %s", h.status, h.body)
		}
		// Replayed code/state: the genuine callback works once only.
		b.finish(cb)
		if h := b.get(cb); h.status != http.StatusBadRequest {
			t.Fatalf("replayed callback: %d %s", h.status, h.body)
		}
		cookieState := func(cb string) string { u, _ := url.Parse(cb); return u.Query().Get("state") }(cb)
		if h := newOAuthBrowser(t, ts).get(cb, "Cookie", "keelson_oauth_codehost="+cookieState); h.status != http.StatusBadRequest || !strings.Contains(h.body, "already used") {
			t.Fatalf("replayed callback with its cookie: %d %s", h.status, h.body)
		}

		// Unverified email matching an existing account: no link, no login.
		owner := ts.signup(t, "owner@example.com")
		f.gh.SignIn("mallory")
		u = newOAuthBrowser(t, ts).flow("/auth/codehost")
		if u.Query().Get("error") != "email_not_verified" || u.Query().Get("accessToken") != "" {
			t.Fatalf("unverified email ended on %s", u)
		}
		if me := oauthMe(t, ts, owner); me["codehostUsername"] != nil {
			t.Fatalf("the owner's account got linked: %v", me)
		}

		// Connect mode: the owner links linus's code-host account? It is linus's
		// already: refused, with a clear status.
		f.gh.SignIn("linus")
		ob := newOAuthBrowser(t, ts)
		u = ob.flow(ob.connectTicket(owner))
		if u.Path != "/settings/connected-accounts" || u.Query().Get("codehost") != "error" || u.Query().Get("reason") != "already_linked" {
			t.Fatalf("connecting another user's identity ended on %s", u)
		}
		// Connecting mallory's code-host account (the email does not matter here) works.
		f.gh.SignIn("mallory")
		u = newOAuthBrowser(t, ts).flow("/auth/codehost/connect", "Authorization", "Bearer "+owner)
		if u.Query().Get("codehost") != "connected" {
			t.Fatalf("connect ended on %s", u)
		}
		if me := oauthMe(t, ts, owner); me["codehostUsername"] != "mallory" {
			t.Fatalf("after connect: %v", me)
		}
		// and now logs into the owner's account.
		u = newOAuthBrowser(t, ts).flow("/auth/codehost")
		if oauthMe(t, ts, u.Query().Get("accessToken"))["email"] != "owner@example.com" {
			t.Fatalf("login after connect ended on %s", u)
		}
		if h := newOAuthBrowser(t, ts).get(ts.URL + "/auth/codehost/connect"); h.status != http.StatusUnauthorized {
			t.Fatalf("connect without a token: %d", h.status)
		}

		// The identity provider: first login creates the account...
		f.idp.SignIn(oauthtest.OIDCUser{Subject: "u-77", Email: "ida@idp.example", EmailVerified: true, Name: "Ida"})
		u = newOAuthBrowser(t, ts).flow("/auth/idp")
		if me := oauthMe(t, ts, u.Query().Get("accessToken")); me["email"] != "ida@idp.example" {
			t.Fatalf("idp login: %v", me)
		}
		// ...and every bad ID token is refused without creating anything.
		f.idp.SignIn(oauthtest.OIDCUser{Subject: "u-78", Email: "eve@idp.example", EmailVerified: true})
		for name, c := range map[string]struct {
			tamper func(map[string]any)
			want   string
		}{
			"wrong nonce":      {func(c map[string]any) { c["nonce"] = "n" }, "invalid_id_token"},
			"wrong issuer":     {func(c map[string]any) { c["iss"] = "https://other-idp.example" }, "invalid_id_token"},
			"wrong audience":   {func(c map[string]any) { c["aud"] = "someone-else" }, "invalid_id_token"},
			"unverified email": {func(c map[string]any) { c["email_verified"] = false }, "email_not_verified"},
		} {
			f.idp.Tamper(c.tamper)
			u = newOAuthBrowser(t, ts).flow("/auth/idp")
			if u.Query().Get("error") != c.want || u.Query().Get("accessToken") != "" {
				t.Fatalf("%s: ended on %s", name, u)
			}
		}
		f.idp.Tamper(nil)
		if n, err := ts.App.DB.NewSelect().Table("auth_users").Where("email = ?", "eve@idp.example").Count(t.Context()); err != nil || n != 0 {
			t.Fatalf("refused idp logins left %d accounts behind (%v)", n, err)
		}
		u = newOAuthBrowser(t, ts).flow("/auth/idp")
		if oauthMe(t, ts, u.Query().Get("accessToken"))["email"] != "eve@idp.example" {
			t.Fatal("honest token after the tampered ones did not log in")
		}

		// Nothing secret in the server's logs.
		logs := ts.Logs.String()
		for _, s := range append(f.gh.IssuedTokens(), access, owner, f.gh.ClientSecret, f.idp.ClientSecret) {
			if strings.Contains(logs, s) {
				t.Fatalf("a secret reached the server's logs")
			}
		}

		// The OpenAPI document describes the redirect routes and their query parameters.
		var doc struct {
			Paths map[string]map[string]struct {
				Parameters []struct{ Name, In string }
				Responses  map[string]json.RawMessage
			}
		}
		ts.doJSON(t, http.StatusOK, "GET", "/openapi.json", "", nil, &doc)
		for path, param := range map[string]string{
			"/auth/codehost/callback": "state", "/auth/idp/callback": "state", "/auth/codehost/connect": "ticket",
		} {
			op := doc.Paths[path]["get"]
			found := false
			for _, p := range op.Parameters {
				found = found || p.In == "query" && p.Name == param
			}
			if _, ok := op.Responses["302"]; !ok || !found {
				t.Errorf("GET %s: 302 documented %v, query %s documented %v", path, ok, param, found)
			}
		}
	})
}

func TestOAuthE2ECodeMode(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, dbURL string) {
		ts, f := startOAuthServer(t, dbURL, "code")
		f.gh.AddUser(oauthtest.GitHubUser{ID: 1, Login: "grace", Emails: []oauthtest.GitHubEmail{{Email: "grace@example.com", Primary: true, Verified: true}}})
		f.gh.SignIn("grace")
		u := newOAuthBrowser(t, ts).flow("/auth/codehost")
		code := u.Query().Get("code")
		if code == "" || u.Query().Get("accessToken") != "" || u.Query().Get("refreshToken") != "" {
			t.Fatalf("code mode ended on %s", u)
		}
		var tp struct {
			AccessToken, RefreshToken, TokenType string
			ExpiresIn                            int
		}
		ts.doJSON(t, http.StatusOK, "POST", "/auth/oauth/exchange", "", map[string]string{"code": code}, &tp)
		if tp.TokenType != "Bearer" || tp.RefreshToken == "" || tp.ExpiresIn <= 0 {
			t.Fatalf("exchange answered %+v", tp)
		}
		if me := oauthMe(t, ts, tp.AccessToken); me["email"] != "grace@example.com" || me["codehostUsername"] != "grace" {
			t.Fatalf("exchanged tokens: %v", me)
		}
		// The code is single use.
		status, body, _ := ts.do(t, "POST", "/auth/oauth/exchange", "", map[string]string{"code": code})
		if status != http.StatusBadRequest || !strings.Contains(string(body), "code") {
			t.Fatalf("replayed exchange code: %d %s", status, body)
		}
	})
}

func TestOAuthE2EUnconfigured(t *testing.T) {
	t.Parallel()
	ts := startServer(t, "", nil)
	for path, want := range map[string]string{
		"/auth/codehost": "KEELSON_CODEHOST_CLIENT_ID", "/auth/idp": "KEELSON_IDP_ISSUER",
	} {
		status, body, _ := ts.do(t, "GET", path, "", nil)
		if status != http.StatusServiceUnavailable || !strings.Contains(string(body), want) {
			t.Fatalf("%s: %d %s", path, status, body)
		}
	}
	// A bad redirect mode stops start-up, naming the variable.
	_, err := LoadConfig(func(k string) string {
		if k == "KEELSON_OAUTH_REDIRECT_MODE" {
			return "fragment"
		}
		return ""
	})
	if err == nil || !strings.Contains(err.Error(), "KEELSON_OAUTH_REDIRECT_MODE") {
		t.Fatalf("LoadConfig: %v", err)
	}
}
