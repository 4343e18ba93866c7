// Package githubfake is a local stand-in for the GitHub REST API of a GitHub
// App, for tests: a real HTTP server speaking GitHub's JSON (as documented at
// docs.github.com/rest) that verifies the app's RS256 JWT with the app's public
// key and accepts only the installation tokens it minted. It also builds
// webhook payloads and delivers them signed, the way GitHub does.
//
// It serves only what Keelson calls: GET /app/installations/{id},
// POST /app/installations/{id}/access_tokens, GET /installation/repositories,
// GET /user/installations and GET /user/installations/{id}/repositories (all
// three with Link pagination), and POST /repos/{owner}/{repo}/statuses/{sha}
// (recorded, see Statuses). Who may see what follows GitHub's rules for user
// access tokens: an installation's own personal account and the members of
// its organisation (Installation.Members) reach every repository it can
// access, an outside collaborator (Repository.Collaborators) only the
// repositories they were added to. It is test code's dependency, never
// production's.
package githubfake

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Options configure a fake.
type Options struct {
	// AppID is the app's id (iss of its JWTs). Default 1001.
	AppID int64
	// AppSlug is the app's URL name. Default "keelson-test".
	AppSlug string
	// Key is the app's private key. Default: a fresh 2048-bit key.
	Key *rsa.PrivateKey
	// Now tells the fake's time (JWT checks, token expiry). Default time.Now.
	Now func() time.Time
	// TokenTTL is the lifetime of minted tokens. Default 1 hour, as GitHub's.
	TokenTTL time.Duration
	// PageSize caps per_page, to exercise pagination. Default 100 (GitHub's max).
	PageSize int
	// UserLogin, when set, also accepts user access tokens issued elsewhere
	// (the OAuth fake of auth/oauth/oauthtest) for GET /user/installations:
	// it answers the login a token belongs to.
	UserLogin func(token string) (login string, ok bool)
}

// Server is a running fake.
type Server struct {
	URL     string // API origin, e.g. http://127.0.0.1:PORT
	AppID   int64
	AppSlug string
	Key     *rsa.PrivateKey
	// WebURL is the base of repositories' html_url and clone_url. Default URL;
	// point it at a local git server to make clone URLs cloneable.
	WebURL string

	srv  *httptest.Server
	mux  *http.ServeMux
	opts Options

	mu            sync.Mutex
	installations map[int64]*Installation
	repos         map[int64][]*Repository // by installation
	tokens        map[string]minted
	userTokens    map[string]string // user access token -> login
	mints         map[int64]int
	calls         map[string]int
	statuses      statusBook
}

// Installation is a fake installation.
type Installation struct {
	ID          int64
	Account     string
	AccountID   int64
	AccountType string // "User" (default) or "Organization"
	Suspended   bool
	AllRepos    bool // repository_selection "all" (default "selected")
	// Members are the other logins with access to every repository of the
	// installation: an organisation's members with its base read permission
	// (a personal account's installation is accessible to its own login).
	Members      []string
	CreatedAt    time.Time
	Repositories []*Repository
}

// Repository is a fake repository.
type Repository struct {
	ID            int64
	Owner         string
	Name          string
	Private       bool
	DefaultBranch string // default "main"
	// HTMLURL and CloneURL default to <WebURL>/<owner>/<name>(.git).
	HTMLURL  string
	CloneURL string
	// Collaborators are logins with explicit access to this repository
	// alone (outside collaborators, or a team's members): GitHub lists the
	// installation to them and, among its repositories, this one.
	Collaborators []string
}

// FullName is owner/name.
func (r *Repository) FullName() string { return r.Owner + "/" + r.Name }

type minted struct {
	installation int64
	expiresAt    time.Time
}

// New starts a fake; Close stops it.
func New(o Options) *Server {
	if o.AppID == 0 {
		o.AppID = 1001
	}
	if o.AppSlug == "" {
		o.AppSlug = "keelson-test"
	}
	if o.Key == nil {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic("githubfake: generate key: " + err.Error())
		}
		o.Key = k
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.TokenTTL == 0 {
		o.TokenTTL = time.Hour
	}
	if o.PageSize <= 0 || o.PageSize > 100 {
		o.PageSize = 100
	}
	s := &Server{
		AppID: o.AppID, AppSlug: o.AppSlug, Key: o.Key, opts: o,
		installations: map[int64]*Installation{}, repos: map[int64][]*Repository{},
		tokens: map[string]minted{}, userTokens: map[string]string{}, mints: map[int64]int{}, calls: map[string]int{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /app/installations/{id}", s.getInstallation)
	mux.HandleFunc("POST /app/installations/{id}/access_tokens", s.createToken)
	mux.HandleFunc("GET /installation/repositories", s.listRepos)
	mux.HandleFunc("POST /repos/{owner}/{repo}/statuses/{sha}", s.createStatus)
	mux.HandleFunc("GET /user/installations", s.userInstallations)
	mux.HandleFunc("GET /user/installations/{id}/repositories", s.userInstallationRepos)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { notFound(w) })
	s.mux = mux
	s.srv = httptest.NewServer(mux)
	s.URL = s.srv.URL
	s.WebURL = s.srv.URL
	return s
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// Handler serves the fake's API, for a test that puts it behind another
// origin (one fake answering both the OAuth and the App endpoints, as
// api.github.com does).
func (s *Server) Handler() http.Handler { return s.mux }

// UserToken mints a user access token for login, as GitHub issues a GitHub
// App's user-to-server token (ghu_...) when the user authorizes the app.
func (s *Server) UserToken(login string) string {
	b := make([]byte, 18)
	_, _ = rand.Read(b)
	tok := "ghu_" + hex.EncodeToString(b)
	s.mu.Lock()
	s.userTokens[tok] = login
	s.mu.Unlock()
	return tok
}

// RevokeUserToken makes a user token fail with 401 (expired or revoked).
func (s *Server) RevokeUserToken(tok string) {
	s.mu.Lock()
	delete(s.userTokens, tok)
	s.mu.Unlock()
}

// SetMembers replaces the logins (besides its own account) with access to
// installation id.
func (s *Server) SetMembers(id int64, logins ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if in := s.installations[id]; in != nil {
		in.Members = append([]string(nil), logins...)
	}
}

// SetCollaborators replaces the logins with explicit access to repository
// repoID of installation id alone (outside collaborators).
func (s *Server) SetCollaborators(id, repoID int64, logins ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.repos[id] {
		if r.ID == repoID {
			r.Collaborators = append([]string(nil), logins...)
		}
	}
}

// PrivateKeyPEM is the app's private key as GitHub hands it out (PKCS#1 PEM).
func (s *Server) PrivateKeyPEM() string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(s.Key)}))
}

// AddInstallation registers in (and its repositories) and returns it.
func (s *Server) AddInstallation(in Installation) *Installation {
	s.mu.Lock()
	defer s.mu.Unlock()
	if in.AccountType == "" {
		in.AccountType = "User"
	}
	if in.AccountID == 0 {
		in.AccountID = in.ID * 10
	}
	if in.CreatedAt.IsZero() {
		in.CreatedAt = s.opts.Now().UTC()
	}
	for _, r := range in.Repositories {
		s.fillRepo(r, in.Account)
	}
	p := &in
	s.installations[in.ID] = p
	s.repos[in.ID] = in.Repositories
	return p
}

// AddRepository gives installation id access to r.
func (s *Server) AddRepository(id int64, r *Repository) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.installations[id]
	owner := ""
	if in != nil {
		owner = in.Account
	}
	s.fillRepo(r, owner)
	s.repos[id] = append(s.repos[id], r)
	if in != nil {
		in.Repositories = s.repos[id]
	}
}

func (s *Server) fillRepo(r *Repository, owner string) {
	if r.Owner == "" {
		r.Owner = owner
	}
	if r.DefaultBranch == "" {
		r.DefaultBranch = "main"
	}
	if r.HTMLURL == "" {
		r.HTMLURL = s.WebURL + "/" + r.FullName()
	}
	if r.CloneURL == "" {
		r.CloneURL = r.HTMLURL + ".git"
	}
}

// Account is the login installation id is on ("" when unknown).
func (s *Server) Account(id int64) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if in := s.installations[id]; in != nil {
		return in.Account
	}
	return ""
}

// SetSuspended suspends or unsuspends installation id.
func (s *Server) SetSuspended(id int64, suspended bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if in := s.installations[id]; in != nil {
		in.Suspended = suspended
	}
}

// RemoveInstallation forgets installation id (as if uninstalled).
func (s *Server) RemoveInstallation(id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.installations, id)
	delete(s.repos, id)
	for tok, m := range s.tokens {
		if m.installation == id {
			delete(s.tokens, tok)
		}
	}
}

// TokenMints is how many access tokens were minted for installation id.
func (s *Server) TokenMints(id int64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mints[id]
}

// Calls is how many requests hit a route ("GET /installation/repositories", ...),
// counting only those that passed authentication.
func (s *Server) Calls(route string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[route]
}

// CheckToken reports which installation a token belongs to, if the fake minted
// it and it has not expired. A local git server uses it to check clones.
func (s *Server) CheckToken(token string) (installationID int64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.tokens[token]
	if !ok || !s.opts.Now().Before(m.expiresAt) {
		return 0, false
	}
	return m.installation, true
}

// CanAccess reports whether token may read the repository at path "owner/name".
func (s *Server) CanAccess(token, fullName string) bool {
	id, ok := s.CheckToken(token)
	if !ok {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.repos[id] {
		if strings.EqualFold(r.FullName(), fullName) {
			return true
		}
	}
	return false
}

// --- HTTP handlers ---

func (s *Server) count(route string) {
	s.mu.Lock()
	s.calls[route]++
	s.mu.Unlock()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("X-GitHub-Media-Type", "github.v3; format=json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func notFound(w http.ResponseWriter) {
	writeJSON(w, http.StatusNotFound, map[string]string{
		"message": "Not Found", "documentation_url": "https://docs.github.com/rest", "status": "404",
	})
}

func unauthorized(w http.ResponseWriter, msg string) {
	writeJSON(w, http.StatusUnauthorized, map[string]string{
		"message": msg, "documentation_url": "https://docs.github.com/rest", "status": "401",
	})
}

// checkAppJWT verifies the request is authenticated as the app: an RS256 JWT
// signed by the app's key, iss the app id, iat not in the future (60 s skew)
// and exp at most 10 minutes after iat, not passed.
func (s *Server) checkAppJWT(w http.ResponseWriter, r *http.Request) bool {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		unauthorized(w, "A JSON web token could not be decoded")
		return false
	}
	now := s.opts.Now()
	var c jwt.RegisteredClaims
	_, err := jwt.ParseWithClaims(tok, &c, func(*jwt.Token) (any, error) { return &s.Key.PublicKey, nil },
		jwt.WithValidMethods([]string{"RS256"}), jwt.WithIssuedAt(), jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(func() time.Time { return now }), jwt.WithLeeway(60*time.Second))
	switch {
	case err != nil:
		unauthorized(w, "A JSON web token could not be decoded")
		return false
	case c.Issuer != strconv.FormatInt(s.AppID, 10):
		unauthorized(w, "'Issuer' claim ('iss') must be an Integer")
		return false
	case c.IssuedAt == nil || c.ExpiresAt.Sub(c.IssuedAt.Time) > 10*time.Minute+time.Second:
		unauthorized(w, "'Expiration time' claim ('exp') is too far in the future")
		return false
	}
	return true
}

func (s *Server) installationJSON(in *Installation) map[string]any {
	sel := "selected"
	if in.AllRepos {
		sel = "all"
	}
	var suspendedAt any
	if in.Suspended {
		suspendedAt = in.CreatedAt.Format(time.RFC3339)
	}
	return map[string]any{
		"id":                   in.ID,
		"account":              accountJSON(in.Account, in.AccountID, in.AccountType, s.WebURL),
		"access_tokens_url":    fmt.Sprintf("%s/app/installations/%d/access_tokens", s.URL, in.ID),
		"repositories_url":     s.URL + "/installation/repositories",
		"html_url":             fmt.Sprintf("%s/settings/installations/%d", s.WebURL, in.ID),
		"app_id":               s.AppID,
		"app_slug":             s.AppSlug,
		"target_id":            in.AccountID,
		"target_type":          in.AccountType,
		"permissions":          map[string]string{"contents": "read", "metadata": "read", "statuses": "write"},
		"events":               []string{"push"},
		"created_at":           in.CreatedAt.Format(time.RFC3339),
		"updated_at":           in.CreatedAt.Format(time.RFC3339),
		"single_file_name":     nil,
		"repository_selection": sel,
		"suspended_at":         suspendedAt,
		"suspended_by":         nil,
	}
}

func accountJSON(login string, id int64, typ, web string) map[string]any {
	return map[string]any{
		"login": login, "id": id, "node_id": "MDQ6VXNlcj" + strconv.FormatInt(id, 10),
		"avatar_url": "https://avatars.githubusercontent.com/u/" + strconv.FormatInt(id, 10) + "?v=4",
		"url":        "https://api.github.com/users/" + login, "html_url": web + "/" + login,
		"type": typ, "site_admin": false,
	}
}

func (s *Server) repoJSON(r *Repository) map[string]any {
	return map[string]any{
		"id": r.ID, "node_id": "R_kgDO" + strconv.FormatInt(r.ID, 10), "name": r.Name, "full_name": r.FullName(),
		"private": r.Private, "owner": accountJSON(r.Owner, 0, "User", s.WebURL),
		"html_url": r.HTMLURL, "description": nil, "fork": false, "url": s.URL + "/repos/" + r.FullName(),
		"clone_url": r.CloneURL, "git_url": strings.Replace(r.CloneURL, "http", "git", 1),
		"ssh_url": "git@github.com:" + r.FullName() + ".git", "default_branch": r.DefaultBranch,
		"visibility": map[bool]string{true: "private", false: "public"}[r.Private],
		"archived":   false, "disabled": false,
	}
}

// appInstallationRoute checks the app JWT of a request to route, an
// /app/installations/{id} route, counts it and returns its id.
func (s *Server) appInstallationRoute(w http.ResponseWriter, r *http.Request, route string) (int64, bool) {
	if !s.checkAppJWT(w, r) {
		return 0, false
	}
	s.count(route)
	id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
	return id, true
}

func (s *Server) getInstallation(w http.ResponseWriter, r *http.Request) {
	id, ok := s.appInstallationRoute(w, r, "GET /app/installations/{id}")
	if !ok {
		return
	}
	s.mu.Lock()
	in := s.installations[id]
	var body map[string]any
	if in != nil {
		body = s.installationJSON(in)
	}
	s.mu.Unlock()
	if in == nil {
		notFound(w)
		return
	}
	writeJSON(w, http.StatusOK, body)
}

func (s *Server) createToken(w http.ResponseWriter, r *http.Request) {
	id, ok := s.appInstallationRoute(w, r, "POST /app/installations/{id}/access_tokens")
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.installations[id]
	if in == nil {
		notFound(w)
		return
	}
	if in.Suspended {
		writeJSON(w, http.StatusForbidden, map[string]string{
			"message": "This installation has been suspended", "documentation_url": "https://docs.github.com/rest", "status": "403",
		})
		return
	}
	b := make([]byte, 18)
	_, _ = rand.Read(b)
	tok := "ghs_" + hex.EncodeToString(b)
	exp := s.opts.Now().Add(s.opts.TokenTTL).UTC().Truncate(time.Second)
	s.tokens[tok] = minted{installation: id, expiresAt: exp}
	s.mints[id]++
	sel := "selected"
	if in.AllRepos {
		sel = "all"
	}
	writeJSON(w, http.StatusCreated, map[string]any{
		"token": tok, "expires_at": exp.Format(time.RFC3339),
		"permissions":          map[string]string{"contents": "read", "metadata": "read"},
		"repository_selection": sel,
	})
}

func (s *Server) listRepos(w http.ResponseWriter, r *http.Request) {
	authz := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(authz, "Bearer ")
	if !ok {
		tok, ok = strings.CutPrefix(authz, "token ")
	}
	id, valid := s.CheckToken(tok)
	if !ok || !valid {
		unauthorized(w, "Bad credentials")
		return
	}
	s.count("GET /installation/repositories")
	s.mu.Lock()
	all := append([]*Repository(nil), s.repos[id]...)
	in := s.installations[id]
	s.mu.Unlock()
	s.writeRepos(w, r, "/installation/repositories", in, all, nil)
}

// writeRepos answers a page of repos as GitHub's repository listings do:
// {"total_count", "repository_selection", "repositories"} sorted by id, with
// the Link header; perms, when set, is each repository's "permissions" key
// (the user listing's).
func (s *Server) writeRepos(w http.ResponseWriter, r *http.Request, path string, in *Installation, repos []*Repository, perms map[string]bool) {
	sort.Slice(repos, func(i, j int) bool { return repos[i].ID < repos[j].ID })
	start, end := s.page(w, r, path, len(repos))
	items := make([]map[string]any, 0, end-start)
	for _, repo := range repos[start:end] {
		j := s.repoJSON(repo)
		if perms != nil {
			j["permissions"] = perms
		}
		items = append(items, j)
	}
	sel := "selected"
	if in != nil && in.AllRepos {
		sel = "all"
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"total_count": len(repos), "repositories": items, "repository_selection": sel,
	})
}

// page cuts a listing of n items into the page r asks for (per_page 30 by
// default, at most Options.PageSize; page from 1), sets the Link header
// GitHub sends (prev, first, next, last) on path, and answers the range.
func (s *Server) page(w http.ResponseWriter, r *http.Request, path string, n int) (start, end int) {
	perPage, _ := strconv.Atoi(r.URL.Query().Get("per_page"))
	if perPage <= 0 {
		perPage = 30
	}
	perPage = min(perPage, s.opts.PageSize)
	page, _ := strconv.Atoi(r.URL.Query().Get("page"))
	if page <= 0 {
		page = 1
	}
	lastPage := max(1, (n+perPage-1)/perPage)
	start = min((page-1)*perPage, n)
	end = min(start+perPage, n)
	link := func(p int) string {
		return fmt.Sprintf("<%s%s?per_page=%d&page=%d>", s.URL, path, perPage, p)
	}
	var links []string
	if page > 1 {
		links = append(links, link(page-1)+`; rel="prev"`, link(1)+`; rel="first"`)
	}
	if page < lastPage {
		links = append(links, link(page+1)+`; rel="next"`, link(lastPage)+`; rel="last"`)
	}
	if len(links) > 0 {
		w.Header().Set("Link", strings.Join(links, ", "))
	}
	return start, end
}

// userLogin authenticates a GitHub App user access token as GitHub's
// /user/installations routes do (doc is the route's documentation URL, what
// names the route in a 403) and answers its login; otherwise it writes
// GitHub's error: 401 "Requires authentication" without a token, 401 "Bad
// credentials" for an unknown (expired, revoked) one, and 403 for a token
// that is not a GitHub App's user token.
func (s *Server) userLogin(w http.ResponseWriter, r *http.Request, doc, what string) (string, bool) {
	authz := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(authz, "Bearer ")
	if !ok {
		tok, ok = strings.CutPrefix(authz, "token ")
	}
	s.mu.Lock()
	login, known := s.userTokens[tok]
	s.mu.Unlock()
	if !known && ok && s.opts.UserLogin != nil {
		login, known = s.opts.UserLogin(tok)
	}
	switch {
	case !ok || tok == "":
		writeJSON(w, http.StatusUnauthorized, map[string]string{
			"message": "Requires authentication", "documentation_url": doc, "status": "401",
		})
		return "", false
	case !known:
		unauthorized(w, "Bad credentials")
		return "", false
	case !strings.HasPrefix(tok, "ghu_"):
		writeJSON(w, http.StatusForbidden, map[string]string{
			"message":           "You must authenticate with an access token authorized to a GitHub App in order to " + what,
			"documentation_url": doc, "status": "403",
		})
		return "", false
	}
	return login, true
}

// reach answers the repositories of in that login may access, and whether
// it may access in at all (s.mu held): every repository for the personal
// account's own login and for the organisation's members, only those it
// collaborates on otherwise (an outside collaborator).
func (s *Server) reach(in *Installation, login string) ([]*Repository, bool) {
	is := func(l string) bool { return strings.EqualFold(l, login) }
	if is(in.Account) && in.AccountType != "Organization" || slices.ContainsFunc(in.Members, is) {
		return append([]*Repository(nil), s.repos[in.ID]...), true
	}
	var out []*Repository
	for _, r := range s.repos[in.ID] {
		if slices.ContainsFunc(r.Collaborators, is) {
			out = append(out, r)
		}
	}
	return out, len(out) > 0
}

const (
	docUserInstallations = "https://docs.github.com/rest/apps/installations#list-app-installations-accessible-to-the-user-access-token"
	docUserInstRepos     = "https://docs.github.com/rest/apps/installations#list-repositories-accessible-to-the-user-access-token"
)

// userInstallations is GET /user/installations, "List app installations
// accessible to the user access token" (docs.github.com/en/rest/apps/installations
// #list-app-installations-accessible-to-the-user-access-token): with a
// user-to-server token of the app, the installations of this app the user can
// access (their own account's, their organisations', and those holding a
// repository they collaborate on), as
// {"total_count": N, "installations": [installation, ...]}, per_page 30 by
// default (at most 100), page from 1, and a Link header. A token that is not a
// GitHub App user token answers 403; an unknown one 401 "Bad credentials".
func (s *Server) userInstallations(w http.ResponseWriter, r *http.Request) {
	login, ok := s.userLogin(w, r, docUserInstallations, "list installations")
	if !ok {
		return
	}
	s.count("GET /user/installations")
	s.mu.Lock()
	var mine []*Installation
	for _, in := range s.installations {
		if _, ok := s.reach(in, login); ok {
			mine = append(mine, in)
		}
	}
	sort.Slice(mine, func(i, j int) bool { return mine[i].ID < mine[j].ID })
	start, end := s.page(w, r, "/user/installations", len(mine))
	items := make([]map[string]any, 0, end-start)
	for _, in := range mine[start:end] {
		items = append(items, s.installationJSON(in))
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"total_count": len(mine), "installations": items})
}

// userInstallationRepos is GET /user/installations/{installation_id}/repositories,
// "List repositories accessible to the user access token"
// (docs.github.com/en/rest/apps/installations#list-repositories-accessible-to-the-user-access-token;
// operation apps/list-installation-repos-for-authenticated-user of
// github/rest-api-description): the repositories of the installation that
// the user has explicit permission to access (owned, collaborator, or
// through an organisation membership), as {"total_count": N,
// "repository_selection": ..., "repositories": [repository with its
// "permissions" key, ...]}, Link-paginated like the others. An installation
// the user cannot access (or none) answers 404; tokens are checked as for
// GET /user/installations.
func (s *Server) userInstallationRepos(w http.ResponseWriter, r *http.Request) {
	login, ok := s.userLogin(w, r, docUserInstRepos, "list repositories")
	if !ok {
		return
	}
	s.count("GET /user/installations/{id}/repositories")
	id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
	s.mu.Lock()
	in := s.installations[id]
	var mine []*Repository
	if in != nil {
		mine, ok = s.reach(in, login)
	}
	s.mu.Unlock()
	if in == nil || !ok {
		notFound(w)
		return
	}
	s.writeRepos(w, r, r.URL.Path, in, mine,
		map[string]bool{"admin": false, "maintain": false, "push": false, "triage": false, "pull": true})
}
