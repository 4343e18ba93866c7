// Package github is the GitHub adapter of the codehost module: it
// authenticates as a GitHub App (an RS256 JWT signed with the app's private
// key), mints and caches installation access tokens, reads installations and
// their repositories through the REST API (following Link pagination), and
// decodes webhook payloads. It implements codehost.Provider.
//
// It is not a general GitHub client: only the calls the codehost module makes.
// Tokens live in memory only and never appear in errors or logs.
package github

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/keelson-dev/keelson/codehost"
	"github.com/keelson-dev/keelson/platform"
	"golang.org/x/sync/singleflight"
)

// Defaults of Config.
const (
	DefaultAPIURL = "https://api.github.com"
	DefaultWebURL = "https://github.com"
	// APIVersion is sent as X-GitHub-Api-Version.
	APIVersion = "2022-11-28"
	// tokenRefreshMargin: a cached installation token is replaced this long
	// before it expires, so a clone or a listing never starts with a token
	// about to die.
	tokenRefreshMargin = 5 * time.Minute
	maxPages           = 100 // 10,000 repositories per installation
)

// Config configures the GitHub App client.
type Config struct {
	AppID      int64
	AppSlug    string
	PrivateKey *rsa.PrivateKey
	// APIURL is the REST API origin (GitHub Enterprise: https://HOST/api/v3).
	// Default https://api.github.com.
	APIURL string
	// WebURL is the web origin of install pages. Default https://github.com.
	WebURL string
	// HTTPClient makes the API calls. Default: a client with a 30 s timeout.
	HTTPClient *http.Client
	// Clock tells the time (JWTs, token expiry). Default platform.SystemClock.
	Clock platform.Clock
}

// Client is a GitHub App client. It is safe for concurrent use.
type Client struct {
	c      Config
	api    *url.URL
	mu     sync.Mutex
	tokens map[int64]cachedToken
	group  singleflight.Group
}

type cachedToken struct {
	token     string
	expiresAt time.Time
}

var _ codehost.Provider = (*Client)(nil)

// New checks c and returns a client.
func New(c Config) (*Client, error) {
	var errs platform.Problems
	if c.AppID <= 0 {
		errs = append(errs, errors.New("AppID must be a positive number"))
	}
	if c.AppSlug == "" || strings.ContainsAny(c.AppSlug, "/?#% ") {
		errs = append(errs, errors.New("AppSlug must be the app's URL name"))
	}
	errs.Require("PrivateKey", c.PrivateKey != nil)
	c.APIURL = strings.TrimRight(cmp.Or(c.APIURL, DefaultAPIURL), "/")
	c.WebURL = strings.TrimRight(cmp.Or(c.WebURL, DefaultWebURL), "/")
	errs.RequireHTTPURL("APIURL", c.APIURL)
	errs.RequireHTTPURL("WebURL", c.WebURL)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("github: %w", err)
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	if c.Clock == nil {
		c.Clock = platform.SystemClock{}
	}
	api, _ := url.Parse(c.APIURL) // checked above
	return &Client{c: c, api: api, tokens: map[int64]cachedToken{}}, nil
}

// ParsePrivateKey reads the app's private key: PEM text (PKCS#1 as GitHub
// issues it, or PKCS#8), or "@path" naming a file that holds it.
func ParsePrivateKey(value string) (*rsa.PrivateKey, error) {
	if path, ok := strings.CutPrefix(value, "@"); ok {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("github: read private key file: %w", err)
		}
		value = string(b)
	}
	// Keys pasted into an environment variable often have literal \n.
	value = strings.ReplaceAll(strings.TrimSpace(value), `\n`, "\n")
	key, err := jwt.ParseRSAPrivateKeyFromPEM([]byte(value))
	if err != nil {
		return nil, errors.New("github: private key is not an RSA private key in PEM form")
	}
	return key, nil
}

// Missing names the settings (DESIGN.md section 3) an app needs that are empty.
func Missing(appID, appSlug, privateKey, webhookSecret string) []string {
	var m []string
	for _, s := range []struct{ name, v string }{
		{"KEELSON_CODEHOST_APP_ID", appID}, {"KEELSON_CODEHOST_APP_SLUG", appSlug},
		{"KEELSON_CODEHOST_APP_PRIVATE_KEY", privateKey}, {"KEELSON_CODEHOST_WEBHOOK_SECRET", webhookSecret},
	} {
		if strings.TrimSpace(s.v) == "" {
			m = append(m, s.name)
		}
	}
	return m
}

// InstallURL implements codehost.Provider.
func (c *Client) InstallURL(state string) string {
	return c.c.WebURL + "/apps/" + url.PathEscape(c.c.AppSlug) + "/installations/new?state=" + url.QueryEscape(state)
}

// AppJWT returns a JWT that authenticates as the app: RS256, issued 60 s in
// the past against clock drift, valid 9 minutes (GitHub allows 10).
func (c *Client) AppJWT() (string, error) {
	now := c.c.Clock.Now()
	claims := jwt.RegisteredClaims{
		Issuer:    strconv.FormatInt(c.c.AppID, 10),
		IssuedAt:  jwt.NewNumericDate(now.Add(-60 * time.Second)),
		ExpiresAt: jwt.NewNumericDate(now.Add(9 * time.Minute)),
	}
	return jwt.NewWithClaims(jwt.SigningMethodRS256, claims).SignedString(c.c.PrivateKey)
}

// Installation implements codehost.Provider: GET /app/installations/{id}.
func (c *Client) Installation(ctx context.Context, id int64) (*codehost.Installation, error) {
	appJWT, err := c.AppJWT()
	if err != nil {
		return nil, fmt.Errorf("github: sign app JWT: %w", err)
	}
	var in installationJSON
	if _, err := c.do(ctx, http.MethodGet, c.c.APIURL+"/app/installations/"+strconv.FormatInt(id, 10), "Bearer "+appJWT, &in); err != nil {
		return nil, err
	}
	return in.toInstallation(), nil
}

// InstallationToken implements codehost.Provider: POST
// /app/installations/{id}/access_tokens, cached until 5 minutes before the
// token expires; concurrent callers share one request.
func (c *Client) InstallationToken(ctx context.Context, id int64) (string, time.Time, error) {
	if t, ok := c.cached(id); ok {
		return t.token, t.expiresAt, nil
	}
	v, err, _ := c.group.Do(strconv.FormatInt(id, 10), func() (any, error) {
		if t, ok := c.cached(id); ok {
			return t, nil
		}
		appJWT, err := c.AppJWT()
		if err != nil {
			return nil, fmt.Errorf("github: sign app JWT: %w", err)
		}
		var out struct {
			Token     string    `json:"token"`
			ExpiresAt time.Time `json:"expires_at"`
		}
		path := c.c.APIURL + "/app/installations/" + strconv.FormatInt(id, 10) + "/access_tokens"
		if _, err := c.do(context.WithoutCancel(ctx), http.MethodPost, path, "Bearer "+appJWT, &out); err != nil {
			return nil, err
		}
		if out.Token == "" || out.ExpiresAt.IsZero() {
			return nil, errors.New("github: access token response without token or expires_at")
		}
		t := cachedToken{token: out.Token, expiresAt: out.ExpiresAt}
		c.mu.Lock()
		c.tokens[id] = t
		c.mu.Unlock()
		return t, nil
	})
	if err != nil {
		return "", time.Time{}, err
	}
	t := v.(cachedToken)
	return t.token, t.expiresAt, nil
}

func (c *Client) cached(id int64) (cachedToken, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.tokens[id]
	if !ok || !c.c.Clock.Now().Before(t.expiresAt.Add(-tokenRefreshMargin)) {
		return cachedToken{}, false
	}
	return t, true
}

func (c *Client) forget(id int64) {
	c.mu.Lock()
	delete(c.tokens, id)
	c.mu.Unlock()
}

// Repositories implements codehost.Provider: GET /installation/repositories
// with an installation token, 100 per page, following the Link header's
// rel="next" (only on the API's own origin, so the token never leaves it).
func (c *Client) Repositories(ctx context.Context, id int64) ([]codehost.Repository, error) {
	repos, err := c.repositories(ctx, id)
	var ae *APIError
	if errors.As(err, &ae) && ae.Status == http.StatusUnauthorized {
		// The cached token was revoked early: mint a fresh one, once.
		c.forget(id)
		repos, err = c.repositories(ctx, id)
	}
	return repos, err
}

func (c *Client) repositories(ctx context.Context, id int64) ([]codehost.Repository, error) {
	tok, _, err := c.InstallationToken(ctx, id)
	if err != nil {
		return nil, err
	}
	repos, err := c.repoPages(ctx, c.c.APIURL+"/installation/repositories?per_page=100", "Bearer "+tok)
	if errors.Is(err, errTooManyPages) {
		return nil, fmt.Errorf("github: installation %d lists more than %d pages of repositories", id, maxPages)
	}
	return repos, err
}

var errTooManyPages = errors.New("too many pages")

// repoPages gathers a repository listing ({"total_count", "repositories"})
// from first on, following Link rel="next" on the API's origin only.
func (c *Client) repoPages(ctx context.Context, first, authz string) ([]codehost.Repository, error) {
	next := first
	var out []codehost.Repository
	for page := 0; next != ""; page++ {
		if page == maxPages {
			return nil, errTooManyPages
		}
		var body struct {
			TotalCount   int              `json:"total_count"`
			Repositories []repositoryJSON `json:"repositories"`
		}
		hdr, err := c.do(ctx, http.MethodGet, next, authz, &body)
		if err != nil {
			return nil, err
		}
		for _, r := range body.Repositories {
			out = append(out, r.toRepository())
		}
		next = c.sameOrigin(nextLink(hdr.Get("Link")))
	}
	return out, nil
}

// UserRepositories implements codehost.Provider: GET
// /user/installations/{installation_id}/repositories ("List repositories
// accessible to the user access token", docs.github.com/en/rest/apps/installations)
// with the user's own user-to-server token: the installation's repositories
// the user has explicit permission to access, 100 per page, following Link
// rel="next" on the API's origin only. A rejected token (401) wraps
// platform.ErrUnauthorized; an installation the user cannot access (404)
// platform.ErrNotFound.
func (c *Client) UserRepositories(ctx context.Context, userToken string, installationID int64) ([]codehost.Repository, error) {
	if userToken == "" {
		return nil, fmt.Errorf("github: GET /user/installations/{id}/repositories: no user token: %w", platform.ErrUnauthorized)
	}
	repos, err := c.repoPages(ctx, fmt.Sprintf("%s/user/installations/%d/repositories?per_page=100", c.c.APIURL, installationID),
		"Bearer "+userToken)
	if errors.Is(err, errTooManyPages) {
		return nil, fmt.Errorf("github: the user can access more than %d pages of installation %d's repositories", maxPages, installationID)
	}
	return repos, err
}

// UserInstallations implements codehost.Provider: GET /user/installations
// ("List app installations accessible to the user access token",
// docs.github.com/en/rest/apps/installations) with the user's own
// user-to-server token, 100 per page, following Link rel="next" on the API's
// origin only. GitHub answers it only for a GitHub App's user token (so the
// OAuth client must be the app's own client id and secret). A rejected token
// (401) wraps platform.ErrUnauthorized.
func (c *Client) UserInstallations(ctx context.Context, userToken string) ([]codehost.Installation, error) {
	if userToken == "" {
		return nil, fmt.Errorf("github: GET /user/installations: no user token: %w", platform.ErrUnauthorized)
	}
	next := c.c.APIURL + "/user/installations?per_page=100"
	var out []codehost.Installation
	for page := 0; next != ""; page++ {
		if page == maxPages {
			return nil, fmt.Errorf("github: the user can access more than %d pages of installations", maxPages)
		}
		var body struct {
			TotalCount    int                `json:"total_count"`
			Installations []installationJSON `json:"installations"`
		}
		hdr, err := c.do(ctx, http.MethodGet, next, "Bearer "+userToken, &body)
		if err != nil {
			return nil, err
		}
		for _, in := range body.Installations {
			out = append(out, *in.toInstallation())
		}
		next = c.sameOrigin(nextLink(hdr.Get("Link")))
	}
	return out, nil
}

// sameOrigin returns u if it is on the API's origin, else "".
func (c *Client) sameOrigin(u string) string {
	if u == "" {
		return ""
	}
	p, err := url.Parse(u)
	if err != nil || p.Scheme != c.api.Scheme || p.Host != c.api.Host {
		return ""
	}
	return u
}

// nextLink returns the rel="next" URL of an RFC 8288 Link header.
func nextLink(h string) string {
	for _, part := range strings.Split(h, ",") {
		segs := strings.Split(part, ";")
		if len(segs) < 2 {
			continue
		}
		target := strings.TrimSpace(segs[0])
		if !strings.HasPrefix(target, "<") || !strings.HasSuffix(target, ">") {
			continue
		}
		for _, p := range segs[1:] {
			k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
			if ok && strings.EqualFold(k, "rel") {
				for _, rel := range strings.Fields(strings.Trim(v, `"`)) {
					if rel == "next" {
						return target[1 : len(target)-1]
					}
				}
			}
		}
	}
	return ""
}

// APIError is a non-2xx answer of the GitHub API. Message is GitHub's own
// message; no credential is ever part of it.
type APIError struct {
	Status  int
	Method  string
	Path    string
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("github: %s %s: %d %s", e.Method, e.Path, e.Status, e.Message)
}

// Unwrap maps 404 to platform.ErrNotFound, 403 to platform.ErrForbidden and
// 401 to platform.ErrUnauthorized.
func (e *APIError) Unwrap() error {
	switch e.Status {
	case http.StatusUnauthorized:
		return platform.ErrUnauthorized
	case http.StatusNotFound:
		return platform.ErrNotFound
	case http.StatusForbidden:
		return platform.ErrForbidden
	}
	return nil
}

func (c *Client) do(ctx context.Context, method, rawURL, authz string, out any) (http.Header, error) {
	return c.send(ctx, method, rawURL, authz, nil, out)
}

// send makes one API call; a non-nil in is sent as its JSON body.
func (c *Client) send(ctx context.Context, method, rawURL, authz string, in, out any) (http.Header, error) {
	var reqBody io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("github: encode request: %w", err)
		}
		reqBody = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, rawURL, reqBody)
	if err != nil {
		return nil, fmt.Errorf("github: build request: %w", err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("X-GitHub-Api-Version", APIVersion)
	req.Header.Set("User-Agent", "keelson")
	req.Header.Set("Authorization", authz)
	path := req.URL.Path
	resp, err := c.c.HTTPClient.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is known; keep the cause only
		}
		return nil, fmt.Errorf("github: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return nil, fmt.Errorf("github: %s %s: read: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		var e struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(body, &e)
		msg := e.Message
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return nil, &APIError{Status: resp.StatusCode, Method: method, Path: path, Message: msg}
	}
	if out != nil {
		if err := json.Unmarshal(body, out); err != nil {
			return nil, fmt.Errorf("github: %s %s: decode: %w", method, path, err)
		}
	}
	return resp.Header, nil
}
