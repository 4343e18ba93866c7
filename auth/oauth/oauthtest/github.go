// Package oauthtest holds local fakes of the third-party OAuth providers the
// oauth module talks to, speaking their real wire formats over real HTTP
// (httptest servers): a GitHub-style OAuth app server (authorize, token
// exchange, GET /user, GET /user/emails) and an OpenID Connect provider
// (discovery, JWKS, authorize, token with RS256-signed ID tokens). Tests play
// the browser: they follow the start route's redirect to the fake's authorize
// endpoint, which "approves" as the signed-in fake user and redirects back
// with code and state, exactly as the provider would.
//
// It is for tests only; nothing here is secure.
package oauthtest

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// GitHubEmail is one entry of GET /user/emails.
type GitHubEmail struct {
	Email    string
	Primary  bool
	Verified bool
}

// GitHubUser is an account at the fake code host.
type GitHubUser struct {
	ID        int64
	Login     string
	Name      string
	AvatarURL string
	Emails    []GitHubEmail
}

type ghGrant struct {
	login, clientID, redirectURI, challenge string
	used                                    bool
}

// GitHub is a fake GitHub OAuth server, as a GitHub App's user authorization
// (its tokens are user-to-server tokens, ghu_...). Its URL serves both the web
// endpoints (/login/oauth/...) and the REST API (/user, /user/emails,
// /user/installations), so it is both the WebURL and the APIURL. SetAPI puts
// the rest of the API (codehost/githubfake's App endpoints) behind the same
// origin, as api.github.com serves both.
type GitHub struct {
	URL          string
	ClientID     string
	ClientSecret string

	mu        sync.Mutex
	users     map[string]*GitHubUser // by login
	signedIn  string
	deny      bool
	grants    map[string]*ghGrant
	tokens    map[string]string // access token -> login
	api       http.Handler      // the rest of the REST API (SetAPI)
	exchanges int
	jsonAsked int
	// Expiring user tokens (ExpireTokens): each access token's expiry, and
	// the unused refresh tokens with the access token they were issued with.
	ttl       time.Duration
	now       func() time.Time
	expiry    map[string]time.Time
	refreshes map[string]ghRefresh
	refreshed int
}

type ghRefresh struct {
	login, access string
	expires       time.Time
}

// NewGitHub starts a fake code host, closed when t ends.
func NewGitHub(t testing.TB) *GitHub {
	g := &GitHub{
		ClientID: "Iv1.fakeclient", ClientSecret: "fake-client-secret-" + randString(8),
		users: map[string]*GitHubUser{}, grants: map[string]*ghGrant{}, tokens: map[string]string{},
		expiry: map[string]time.Time{}, refreshes: map[string]ghRefresh{}, now: time.Now,
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /login/oauth/authorize", g.authorize)
	mux.HandleFunc("POST /login/oauth/access_token", g.accessToken)
	mux.HandleFunc("GET /user", g.user)
	mux.HandleFunc("GET /user/emails", g.emails)
	mux.HandleFunc("GET /user/installations", g.installations)
	mux.HandleFunc("/", g.rest)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	g.URL = srv.URL
	return g
}

// AddUser adds (or replaces, by login) an account.
func (g *GitHub) AddUser(u GitHubUser) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for login, old := range g.users {
		if old.ID == u.ID {
			delete(g.users, login)
		}
	}
	g.users[u.Login] = &u
}

// SignIn makes login the account that approves the next authorizations, as if
// the browser were signed in to the code host as that user.
func (g *GitHub) SignIn(login string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.signedIn = login
}

// Deny makes the user decline the next authorizations (error=access_denied).
func (g *GitHub) Deny(deny bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.deny = deny
}

// Exchanges counts token requests that traded a valid code for a token.
func (g *GitHub) Exchanges() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.exchanges
}

// JSONRequested counts token requests that sent Accept: application/json.
func (g *GitHub) JSONRequested() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.jsonAsked
}

// IssuedTokens lists the access tokens handed out so far.
func (g *GitHub) IssuedTokens() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for tok := range g.tokens {
		out = append(out, tok)
	}
	return out
}

// SetAPI serves every other request (the App endpoints, GET
// /user/installations) with h, typically (*githubfake.Server).Handler() of a
// fake whose Options.UserLogin is g.LoginForToken.
func (g *GitHub) SetAPI(h http.Handler) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.api = h
}

// ExpireTokens makes the tokens issued from now on expire after ttl on the
// clock now, each with a refresh token valid 6 months, as a GitHub App
// with "expire user authorization tokens" on (GitHub: 8 hours;
// docs.github.com/en/apps/creating-github-apps/authenticating-with-a-github-app/refreshing-user-access-tokens).
func (g *GitHub) ExpireTokens(ttl time.Duration, now func() time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ttl, g.now = ttl, now
}

// Refreshed counts refresh_token grants that issued a new token.
func (g *GitHub) Refreshed() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.refreshed
}

// RevokeRefreshTokens makes every refresh token issued so far fail
// (bad_refresh_token), as when the user revokes the app's authorization.
func (g *GitHub) RevokeRefreshTokens() {
	g.mu.Lock()
	defer g.mu.Unlock()
	clear(g.refreshes)
}

// LoginForToken answers the login an access token this fake issued belongs
// to, while it has not expired.
func (g *GitHub) LoginForToken(tok string) (string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.loginLocked(tok)
}

func (g *GitHub) loginLocked(tok string) (string, bool) {
	login, ok := g.tokens[tok]
	if exp, expires := g.expiry[tok]; ok && expires && !g.now().Before(exp) {
		return "", false
	}
	return login, ok
}

// issueLocked issues an access token for login (and, with ExpireTokens, its
// refresh token) and answers the token endpoint's fields.
func (g *GitHub) issueLocked(login string) map[string]any {
	tok := "ghu_" + randString(18)
	g.tokens[tok] = login
	out := map[string]any{"access_token": tok, "token_type": "bearer", "scope": ""}
	if g.ttl > 0 {
		const refreshTTL = 15897600 // seconds, about 6 months, as GitHub
		rt := "ghr_" + randString(30)
		g.expiry[tok] = g.now().Add(g.ttl)
		g.refreshes[rt] = ghRefresh{login: login, access: tok, expires: g.now().Add(refreshTTL * time.Second)}
		out["expires_in"] = int64(g.ttl / time.Second)
		out["refresh_token"] = rt
		out["refresh_token_expires_in"] = refreshTTL
	}
	return out
}

// RevokeToken makes an access token fail from now on (401), as when the user
// revokes the app's authorization or the token expires.
func (g *GitHub) RevokeToken(tok string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.tokens, tok)
}

// installations is GET /user/installations ("List app installations
// accessible to the user access token", docs.github.com/en/rest/apps/installations
// #list-app-installations-accessible-to-the-user-access-token). The
// installations live in the App fake given to SetAPI, which answers it (with
// this fake's tokens); without one, an authenticated user has none:
// {"total_count":0,"installations":[]}.
func (g *GitHub) installations(w http.ResponseWriter, r *http.Request) {
	if g.servedByAPI(w, r) {
		return
	}
	if g.authUser(w, r) == nil {
		return
	}
	writeJSON(w, map[string]any{"total_count": 0, "installations": []any{}})
}

// servedByAPI passes the request to SetAPI's handler, if there is one.
func (g *GitHub) servedByAPI(w http.ResponseWriter, r *http.Request) bool {
	g.mu.Lock()
	api := g.api
	g.mu.Unlock()
	if api != nil {
		api.ServeHTTP(w, r)
	}
	return api != nil
}

// rest answers the routes this fake does not serve: SetAPI's handler, or 404.
func (g *GitHub) rest(w http.ResponseWriter, r *http.Request) {
	if g.servedByAPI(w, r) {
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(http.StatusNotFound)
	_, _ = w.Write([]byte(`{"message":"Not Found","documentation_url":"https://docs.github.com/rest","status":"404"}`))
}

// authorize is GET /login/oauth/authorize: the user approves (or declines) at
// once and is redirected to redirect_uri with code and state.
func (g *GitHub) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("client_id") != g.ClientID {
		http.Error(w, "unknown client_id", http.StatusNotFound)
		return
	}
	redirectURI, err := url.Parse(q.Get("redirect_uri"))
	if err != nil || redirectURI.Scheme == "" {
		http.Error(w, "redirect_uri is required by this fake", http.StatusBadRequest)
		return
	}
	if m := q.Get("code_challenge_method"); q.Get("code_challenge") != "" && m != "S256" {
		http.Error(w, "code_challenge_method must be S256", http.StatusBadRequest)
		return
	}
	g.mu.Lock()
	login, deny := g.signedIn, g.deny
	if _, ok := g.users[login]; !ok && !deny {
		g.mu.Unlock()
		http.Error(w, "no user signed in to the fake code host", http.StatusUnauthorized)
		return
	}
	back := redirectURI.Query()
	if deny {
		back.Set("error", "access_denied")
		back.Set("error_description", "The user has denied your application access.")
		back.Set("error_uri", "https://docs.github.com/apps/troubleshooting-authorization-request-errors/#access-denied")
	} else {
		code := randString(10)
		g.grants[code] = &ghGrant{login: login, clientID: g.ClientID, redirectURI: q.Get("redirect_uri"), challenge: q.Get("code_challenge")}
		back.Set("code", code)
	}
	g.mu.Unlock()
	if s := q.Get("state"); s != "" {
		back.Set("state", s)
	}
	redirectURI.RawQuery = back.Encode()
	http.Redirect(w, r, redirectURI.String(), http.StatusFound)
}

// accessToken is POST /login/oauth/access_token. Like GitHub it answers 200
// with an "error" field on failure, as JSON when asked, else form-encoded.
func (g *GitHub) accessToken(w http.ResponseWriter, r *http.Request) {
	wantJSON := strings.Contains(r.Header.Get("Accept"), "application/json")
	reply := func(v map[string]any) {
		if wantJSON {
			w.Header().Set("Content-Type", "application/json; charset=utf-8")
			_ = json.NewEncoder(w).Encode(v)
			return
		}
		form := url.Values{}
		for k, s := range v {
			form.Set(k, fmt.Sprint(s))
		}
		w.Header().Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
		_, _ = w.Write([]byte(form.Encode()))
	}
	fail := func(code, desc string) {
		reply(map[string]any{"error": code, "error_description": desc, "error_uri": "https://docs.github.com/apps/managing-oauth-apps/troubleshooting-oauth-app-access-token-request-errors"})
	}
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	id, secret := r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	if u, p, ok := r.BasicAuth(); ok {
		id, secret = u, p
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if wantJSON {
		g.jsonAsked++
	}
	if id != g.ClientID || subtle.ConstantTimeCompare([]byte(secret), []byte(g.ClientSecret)) != 1 {
		fail("incorrect_client_credentials", "The client_id and/or client_secret passed are incorrect.")
		return
	}
	if r.PostForm.Get("grant_type") == "refresh_token" {
		// "Refreshing user access tokens": a refresh token works once, and
		// using it ends the access token it came with.
		rt, ok := g.refreshes[r.PostForm.Get("refresh_token")]
		if !ok || !g.now().Before(rt.expires) {
			fail("bad_refresh_token", "The refresh token passed is incorrect or expired.")
			return
		}
		delete(g.refreshes, r.PostForm.Get("refresh_token"))
		delete(g.tokens, rt.access)
		g.refreshed++
		reply(g.issueLocked(rt.login))
		return
	}
	gr, ok := g.grants[r.PostForm.Get("code")]
	if !ok || gr.used {
		fail("bad_verification_code", "The code passed is incorrect or expired.")
		return
	}
	gr.used = true // a code is good for one try
	if ru := r.PostForm.Get("redirect_uri"); ru != "" && ru != gr.redirectURI {
		fail("redirect_uri_mismatch", "The redirect_uri MUST match the registered callback URL for this application.")
		return
	}
	if gr.challenge != "" && s256(r.PostForm.Get("code_verifier")) != gr.challenge {
		fail("bad_verification_code", "The code_verifier does not match the code_challenge.")
		return
	}
	g.exchanges++
	out := g.issueLocked(gr.login)
	out["scope"] = "read:user,user:email"
	reply(out)
}

func (g *GitHub) authUser(w http.ResponseWriter, r *http.Request) *GitHubUser {
	h := r.Header.Get("Authorization")
	tok := strings.TrimPrefix(strings.TrimPrefix(h, "Bearer "), "token ")
	g.mu.Lock()
	defer g.mu.Unlock()
	login, ok := g.loginLocked(tok)
	u := g.users[login]
	if h == "" || !ok || u == nil {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"message":"Bad credentials","documentation_url":"https://docs.github.com/rest","status":"401"}`))
		return nil
	}
	cp := *u
	return &cp
}

// user is GET /user.
func (g *GitHub) user(w http.ResponseWriter, r *http.Request) {
	u := g.authUser(w, r)
	if u == nil {
		return
	}
	writeJSON(w, map[string]any{
		"login": u.Login, "id": u.ID, "node_id": "U_" + u.Login, "avatar_url": u.AvatarURL,
		"html_url": g.URL + "/" + u.Login, "type": "User", "site_admin": false,
		"name": u.Name, "email": nil,
	})
}

// emails is GET /user/emails.
func (g *GitHub) emails(w http.ResponseWriter, r *http.Request) {
	u := g.authUser(w, r)
	if u == nil {
		return
	}
	out := []map[string]any{}
	for _, e := range u.Emails {
		vis := any(nil)
		if e.Primary {
			vis = "private"
		}
		out = append(out, map[string]any{"email": e.Email, "primary": e.Primary, "verified": e.Verified, "visibility": vis})
	}
	writeJSON(w, out)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	_ = json.NewEncoder(w).Encode(v)
}

func s256(verifier string) string {
	sum := sha256.Sum256([]byte(verifier))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

func randString(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
