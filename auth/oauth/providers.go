package oauth

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/keelson-dev/keelson/platform"
	"golang.org/x/oauth2"
)

const (
	providerCodehost = "codehost"
	providerIDP      = "idp"
)

// email is one address the provider reports for the user.
type email struct {
	Address  string
	Verified bool
	Primary  bool
}

// profile is who the provider says the user is.
type profile struct {
	Issuer      string // the provider's origin or OIDC issuer: identities are per issuer
	Subject     string // stable provider user id (GitHub numeric id, OIDC sub)
	Login       string // GitHub login, OIDC preferred_username
	Name        string
	Image       string
	Emails      []email // primary first
	AccessToken string  // the code host's user token (stored sealed); empty for the idp
	// RefreshToken renews an expiring AccessToken (stored sealed); "" when
	// the code host issued none.
	RefreshToken string
	// ExpiresIn is AccessToken's lifetime in seconds; 0: it does not expire.
	ExpiresIn int64
}

// errIDToken marks an ID token that failed verification.
var errIDToken = errors.New("id token rejected")

// provider is one OAuth/OIDC login provider.
type provider interface {
	name() string
	// missing names the settings that are not configured (empty: ready).
	missing() []string
	// authCodeURL is where the browser goes to approve the login.
	authCodeURL(ctx context.Context, state, verifier, nonce string) (string, error)
	// exchange trades the authorization code for the user's profile.
	exchange(ctx context.Context, code, verifier, nonce string) (*profile, error)
}

// ---- the GitHub-style code host ----

type codehostProvider struct {
	cfg    CodehostConfig
	client *http.Client
	oc     *oauth2.Config
}

func newCodehostProvider(d Deps) *codehostProvider {
	c := d.Codehost
	return &codehostProvider{
		cfg: c,
		// GitHub answers the token endpoint with a form body unless asked for JSON.
		client: withHeader(d.HTTPClient, "Accept", "application/json"),
		oc: &oauth2.Config{
			ClientID: c.ClientID, ClientSecret: c.ClientSecret,
			Endpoint: oauth2.Endpoint{
				AuthURL:   c.WebURL + "/login/oauth/authorize",
				TokenURL:  c.WebURL + "/login/oauth/access_token",
				AuthStyle: oauth2.AuthStyleInParams,
			},
			RedirectURL: d.PublicURL + "/auth/codehost/callback",
			Scopes:      c.Scopes,
		},
	}
}

func (p *codehostProvider) name() string { return providerCodehost }

// refresh trades a refresh token for a new access token (and a new refresh
// token: GitHub's are single-use) at the token endpoint, grant_type
// refresh_token. A refusal is an *oauth2.RetrieveError (GitHub:
// bad_refresh_token).
func (p *codehostProvider) refresh(ctx context.Context, refreshToken string) (*oauth2.Token, error) {
	return p.oc.TokenSource(context.WithValue(ctx, oauth2.HTTPClient, p.client),
		&oauth2.Token{RefreshToken: refreshToken}).Token()
}

func (p *codehostProvider) missing() []string {
	var m []string
	if p.cfg.ClientID == "" {
		m = append(m, "KEELSON_CODEHOST_CLIENT_ID")
	}
	if p.cfg.ClientSecret == "" {
		m = append(m, "KEELSON_CODEHOST_CLIENT_SECRET")
	}
	return m
}

func (p *codehostProvider) authCodeURL(_ context.Context, state, verifier, _ string) (string, error) {
	return p.oc.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier)), nil
}

type githubUser struct {
	ID        int64  `json:"id"`
	Login     string `json:"login"`
	Name      string `json:"name"`
	AvatarURL string `json:"avatar_url"`
}

type githubEmail struct {
	Email    string `json:"email"`
	Primary  bool   `json:"primary"`
	Verified bool   `json:"verified"`
}

func (p *codehostProvider) exchange(ctx context.Context, code, verifier, _ string) (*profile, error) {
	tok, err := p.oc.Exchange(context.WithValue(ctx, oauth2.HTTPClient, p.client), code, oauth2.VerifierOption(verifier))
	if err != nil {
		return nil, fmt.Errorf("token exchange: %w", err)
	}
	var u githubUser
	if err := p.get(ctx, tok.AccessToken, "/user", &u); err != nil {
		return nil, err
	}
	if u.ID == 0 || u.Login == "" {
		return nil, errors.New("GET /user: no id or login")
	}
	var ems []githubEmail
	if err := p.get(ctx, tok.AccessToken, "/user/emails", &ems); err != nil {
		return nil, err
	}
	pr := &profile{
		Issuer: p.cfg.WebURL, Subject: strconv.FormatInt(u.ID, 10), Login: u.Login,
		Name: u.Name, Image: u.AvatarURL, AccessToken: tok.AccessToken,
		RefreshToken: tok.RefreshToken, ExpiresIn: tok.ExpiresIn,
	}
	for _, primary := range []bool{true, false} {
		for _, e := range ems {
			if e.Primary == primary && e.Email != "" {
				pr.Emails = append(pr.Emails, email{Address: e.Email, Verified: e.Verified, Primary: e.Primary})
			}
		}
	}
	return pr, nil
}

// get GETs the code host's REST API at path with the user's token into out.
func (p *codehostProvider) get(ctx context.Context, token, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.cfg.APIURL+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	resp, err := p.client.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d", path, resp.StatusCode)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}

// ---- any OpenID Connect provider ----

type idpProvider struct {
	d      Deps
	cfg    IDPConfig
	client *http.Client

	mu       sync.Mutex // guards the fields below, set once by discovery
	oc       *oauth2.Config
	verifier *oidc.IDTokenVerifier
}

func newIDPProvider(d Deps) *idpProvider {
	return &idpProvider{d: d, cfg: d.IDP, client: d.HTTPClient}
}

func (p *idpProvider) name() string { return providerIDP }

func (p *idpProvider) missing() []string {
	var m []string
	if p.cfg.Issuer == "" {
		m = append(m, "KEELSON_IDP_ISSUER")
	}
	if p.cfg.ClientID == "" {
		m = append(m, "KEELSON_IDP_CLIENT_ID")
	}
	if p.cfg.ClientSecret == "" {
		m = append(m, "KEELSON_IDP_CLIENT_SECRET")
	}
	return m
}

// discover fetches the issuer's configuration once, at first use, so an idp
// that is down does not stop the server from starting. A failure is not
// cached: the next login tries again.
func (p *idpProvider) discover(ctx context.Context) (*oauth2.Config, *oidc.IDTokenVerifier, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.oc != nil {
		return p.oc, p.verifier, nil
	}
	dctx, cancel := context.WithTimeout(oidc.ClientContext(ctx, p.client), p.d.DiscoveryTimeout)
	defer cancel()
	// The provider keeps dctx's HTTP client (not its deadline) for JWKS fetches.
	prov, err := oidc.NewProvider(dctx, p.cfg.Issuer)
	if err != nil {
		return nil, nil, err
	}
	p.oc = &oauth2.Config{
		ClientID: p.cfg.ClientID, ClientSecret: p.cfg.ClientSecret,
		Endpoint:    prov.Endpoint(),
		RedirectURL: p.d.PublicURL + "/auth/idp/callback",
		Scopes:      p.cfg.Scopes,
	}
	p.verifier = prov.Verifier(&oidc.Config{ClientID: p.cfg.ClientID, Now: p.d.Clock.Now})
	return p.oc, p.verifier, nil
}

func (p *idpProvider) authCodeURL(ctx context.Context, state, verifier, nonce string) (string, error) {
	oc, _, err := p.discover(ctx)
	if err != nil {
		return "", err
	}
	opts := []oauth2.AuthCodeOption{oauth2.S256ChallengeOption(verifier), oidc.Nonce(nonce)}
	return oc.AuthCodeURL(state, opts...), nil
}

type idClaims struct {
	Email             string `json:"email"`
	EmailVerified     any    `json:"email_verified"` // bool; some providers send "true"
	Name              string `json:"name"`
	PreferredUsername string `json:"preferred_username"`
	Picture           string `json:"picture"`
}

func (p *idpProvider) exchange(ctx context.Context, code, verifier, nonce string) (*profile, error) {
	oc, v, err := p.discover(ctx)
	if err != nil {
		return nil, err
	}
	tok, err := oc.Exchange(oidc.ClientContext(ctx, p.client), code, oauth2.VerifierOption(verifier))
	if err != nil {
		return nil, fmt.Errorf("token exchange: %w", err)
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return nil, fmt.Errorf("%w: the token response has no id_token", errIDToken)
	}
	// Verify checks the RS256 signature against the JWKS, iss, aud and exp.
	idt, err := v.Verify(oidc.ClientContext(ctx, p.client), raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errIDToken, err)
	}
	if subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(nonce)) != 1 {
		return nil, fmt.Errorf("%w: nonce does not match this login", errIDToken)
	}
	var c idClaims
	if err := idt.Claims(&c); err != nil {
		return nil, fmt.Errorf("%w: %w", errIDToken, err)
	}
	pr := &profile{
		Issuer: idt.Issuer, Subject: idt.Subject, Login: c.PreferredUsername, Name: c.Name, Image: c.Picture,
	}
	if pr.Subject == "" {
		return nil, fmt.Errorf("%w: no sub", errIDToken)
	}
	if c.Email != "" {
		verified := c.EmailVerified == true || c.EmailVerified == "true"
		pr.Emails = []email{{Address: c.Email, Verified: verified, Primary: true}}
	}
	return pr, nil
}

// withHeader returns a client like c that sets header k on requests that lack it.
func withHeader(c *http.Client, k, v string) *http.Client {
	cc := *c
	base := c.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	cc.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Header.Get(k) == "" {
			r = r.Clone(r.Context())
			r.Header.Set(k, v)
		}
		return base.RoundTrip(r)
	})
	return &cc
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// unavailable is the 503 of a provider whose settings are missing.
func unavailable(p provider) error {
	m := p.missing()
	if len(m) == 0 {
		return nil
	}
	what := map[string]string{providerCodehost: "code-host login", providerIDP: "identity-provider login"}[p.name()]
	return platform.Unavailable(what + " is not configured: set " + strings.Join(m, ", "))
}
