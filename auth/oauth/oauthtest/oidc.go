package oauthtest

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/subtle"
	"encoding/base64"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// OIDCUser is the account signed in at the fake identity provider.
type OIDCUser struct {
	Subject           string
	Email             string
	EmailVerified     bool
	Name              string
	PreferredUsername string
}

type oidcGrant struct {
	user                          OIDCUser
	redirectURI, challenge, nonce string
	used                          bool
}

// OIDC is a fake OpenID Connect provider: discovery at
// /.well-known/openid-configuration, an RS256 key at /jwks, /authorize and
// /token. Its URL is the issuer.
type OIDC struct {
	URL          string
	ClientID     string
	ClientSecret string

	key, foreign *rsa.PrivateKey
	kid          string

	mu        sync.Mutex
	user      *OIDCUser
	grants    map[string]*oidcGrant
	tamper    func(claims map[string]any)
	badSig    bool
	down      bool
	exchanges int
}

// NewOIDC starts a fake identity provider, closed when t ends.
func NewOIDC(t testing.TB) *OIDC {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	o := &OIDC{
		ClientID: "keelson-test", ClientSecret: "oidc-secret-" + randString(8),
		key: key, foreign: foreign, kid: "k1-" + randString(4), grants: map[string]*oidcGrant{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", o.discovery)
	mux.HandleFunc("GET /jwks", o.jwks)
	mux.HandleFunc("GET /authorize", o.authorize)
	mux.HandleFunc("POST /token", o.token)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	o.URL = srv.URL
	return o
}

// SignIn makes u the user who approves the next authorizations.
func (o *OIDC) SignIn(u OIDCUser) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.user = &u
}

// Tamper lets f change the claims of the ID tokens issued from now on (nil:
// issue honest tokens). The claims hold iss, sub, aud, exp, iat, nonce, email,
// email_verified, name and preferred_username.
func (o *OIDC) Tamper(f func(claims map[string]any)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.tamper = f
}

// SignWithForeignKey makes ID tokens carry the provider's kid but a signature
// of another key, as a forger would.
func (o *OIDC) SignWithForeignKey(on bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.badSig = on
}

// Down makes discovery answer 503, as a provider that is down.
func (o *OIDC) Down(down bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.down = down
}

// Exchanges counts codes traded for tokens.
func (o *OIDC) Exchanges() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.exchanges
}

func (o *OIDC) discovery(w http.ResponseWriter, _ *http.Request) {
	o.mu.Lock()
	down := o.down
	o.mu.Unlock()
	if down {
		http.Error(w, "temporarily unavailable", http.StatusServiceUnavailable)
		return
	}
	writeJSON(w, map[string]any{
		"issuer":                                o.URL,
		"authorization_endpoint":                o.URL + "/authorize",
		"token_endpoint":                        o.URL + "/token",
		"jwks_uri":                              o.URL + "/jwks",
		"response_types_supported":              []string{"code"},
		"subject_types_supported":               []string{"public"},
		"id_token_signing_alg_values_supported": []string{"RS256"},
		"scopes_supported":                      []string{"openid", "profile", "email"},
		"token_endpoint_auth_methods_supported": []string{"client_secret_basic", "client_secret_post"},
		"code_challenge_methods_supported":      []string{"S256"},
		"claims_supported":                      []string{"sub", "iss", "aud", "exp", "iat", "nonce", "email", "email_verified", "name", "preferred_username"},
	})
}

func (o *OIDC) jwks(w http.ResponseWriter, _ *http.Request) {
	pub := o.key.PublicKey
	writeJSON(w, map[string]any{"keys": []map[string]any{{
		"kty": "RSA", "use": "sig", "alg": "RS256", "kid": o.kid,
		"n": base64.RawURLEncoding.EncodeToString(pub.N.Bytes()),
		"e": base64.RawURLEncoding.EncodeToString(big.NewInt(int64(pub.E)).Bytes()),
	}}})
}

// authorize approves at once as the signed-in user and redirects back with
// code and state (RFC 6749 4.1.2).
func (o *OIDC) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("client_id") != o.ClientID {
		http.Error(w, "unknown client_id", http.StatusBadRequest)
		return
	}
	redirectURI, err := url.Parse(q.Get("redirect_uri"))
	if err != nil || redirectURI.Scheme == "" {
		http.Error(w, "invalid redirect_uri", http.StatusBadRequest)
		return
	}
	back := redirectURI.Query()
	back.Set("state", q.Get("state"))
	switch {
	case q.Get("response_type") != "code":
		back.Set("error", "unsupported_response_type")
	case !slices.Contains(strings.Fields(q.Get("scope")), "openid"):
		back.Set("error", "invalid_scope")
	case q.Get("code_challenge") != "" && q.Get("code_challenge_method") != "S256":
		back.Set("error", "invalid_request")
	default:
		o.mu.Lock()
		if o.user == nil {
			o.mu.Unlock()
			http.Error(w, "no user signed in to the fake identity provider", http.StatusUnauthorized)
			return
		}
		code := randString(10)
		o.grants[code] = &oidcGrant{user: *o.user, redirectURI: q.Get("redirect_uri"), challenge: q.Get("code_challenge"), nonce: q.Get("nonce")}
		o.mu.Unlock()
		back.Set("code", code)
	}
	redirectURI.RawQuery = back.Encode()
	http.Redirect(w, r, redirectURI.String(), http.StatusFound)
}

// token is the token endpoint (RFC 6749 4.1.3, OIDC core 3.1.3.3).
func (o *OIDC) token(w http.ResponseWriter, r *http.Request) {
	fail := func(status int, code string) {
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(status)
		writeJSON(w, map[string]string{"error": code})
	}
	if err := r.ParseForm(); err != nil {
		fail(http.StatusBadRequest, "invalid_request")
		return
	}
	id, secret := r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	if u, p, ok := r.BasicAuth(); ok {
		id, _ = url.QueryUnescape(u)
		secret, _ = url.QueryUnescape(p)
	}
	if id != o.ClientID || subtle.ConstantTimeCompare([]byte(secret), []byte(o.ClientSecret)) != 1 {
		fail(http.StatusUnauthorized, "invalid_client")
		return
	}
	if r.PostForm.Get("grant_type") != "authorization_code" {
		fail(http.StatusBadRequest, "unsupported_grant_type")
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	gr, ok := o.grants[r.PostForm.Get("code")]
	if !ok || gr.used {
		fail(http.StatusBadRequest, "invalid_grant")
		return
	}
	gr.used = true
	if r.PostForm.Get("redirect_uri") != gr.redirectURI ||
		gr.challenge != "" && s256(r.PostForm.Get("code_verifier")) != gr.challenge {
		fail(http.StatusBadRequest, "invalid_grant")
		return
	}
	now := time.Now()
	claims := map[string]any{
		"iss": o.URL, "sub": gr.user.Subject, "aud": o.ClientID,
		"exp": now.Add(5 * time.Minute).Unix(), "iat": now.Unix(), "nonce": gr.nonce,
		"email": gr.user.Email, "email_verified": gr.user.EmailVerified,
		"name": gr.user.Name, "preferred_username": gr.user.PreferredUsername,
	}
	if o.tamper != nil {
		o.tamper(claims)
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims(claims))
	tok.Header["kid"] = o.kid
	key := o.key
	if o.badSig {
		key = o.foreign
	}
	idToken, err := tok.SignedString(key)
	if err != nil {
		fail(http.StatusInternalServerError, "server_error")
		return
	}
	o.exchanges++
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, map[string]any{
		"access_token": "at-" + randString(16), "token_type": "Bearer", "expires_in": 3600, "id_token": idToken,
	})
}
