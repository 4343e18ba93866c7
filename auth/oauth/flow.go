package oauth

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"net/url"
	"regexp"

	"github.com/keelson-dev/keelson/auth"
	"github.com/keelson-dev/keelson/platform"
	"golang.org/x/oauth2"
)

const (
	modeLogin   = "login"
	modeConnect = "connect"
)

// Error statuses a flow can end with, sent to the frontend as ?error= (login)
// or ?codehost=error&reason= (connect). Each means nothing was created or linked.
const (
	ErrEmailNotVerified       = "email_not_verified"     // the provider does not vouch for the email
	ErrEmailMissing           = "email_missing"          // the provider reported no email at all
	ErrEmailInvalid           = "email_invalid"          // the provider's email is not a plain address
	ErrAlreadyLinked          = "already_linked"         // the identity belongs to another user
	ErrAccountLinked          = "account_already_linked" // the account is linked to another identity of this provider
	ErrLinkRequiresLogin      = "link_requires_login"    // the account has 2FA or an unverified password login: log in with it, then connect
	ErrAccessDenied           = "access_denied"          // the user declined at the provider
	ErrProviderError          = "provider_error"         // the provider answered with another error
	ErrExchangeFailed         = "exchange_failed"        // the code could not be traded (expired, replayed, provider down)
	ErrInvalidIDToken         = "invalid_id_token"       // signature, iss, aud, exp or nonce check failed
	ErrAccountNotFound        = "account_not_found"      // the connecting user no longer exists
	ErrTemporarilyUnavailable = "temporarily_unavailable"
)

// flowError ends a flow with a status for the frontend.
type flowError struct {
	code string
	err  error // for the log only
}

func (e *flowError) Error() string {
	if e.err != nil {
		return e.code + ": " + e.err.Error()
	}
	return e.code
}

func fail(code string, err error) *flowError { return &flowError{code: code, err: err} }

// redirect is where a route sends the browser, and the cookie it sets.
type redirect struct {
	location string
	cookie   *http.Cookie
	cookies  []*http.Cookie // more cookies to set (or clear)
}

// cookieName is the state cookie's name: with the __Host- prefix when the API
// is served over https, so no sibling subdomain (a deployed app, say) can
// plant a state of its choosing in a victim's browser (cookie tossing).
func (s *Service) cookieName(p provider) string {
	if s.secure() {
		return "__Host-keelson_oauth_" + p.name()
	}
	return "keelson_oauth_" + p.name()
}

func (s *Service) stateCookie(p provider, value string, maxAge int) *http.Cookie {
	c := &http.Cookie{
		Name: s.cookieName(p), Value: value, Path: "/auth/" + p.name(), MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: s.secure(),
	}
	if s.secure() {
		c.Path = "/" // required by the __Host- prefix
	}
	return c
}

// start begins a flow at provider p: it records the state (with the sealed
// PKCE verifier, the nonce, and the connecting user and where a successful
// connect ends in connect mode), binds it to the browser with a cookie, and
// redirects to the provider.
func (s *Service) start(ctx context.Context, p provider, mode, userID, next string) (*redirect, error) {
	if err := unavailable(p); err != nil {
		return nil, err
	}
	state, verifier := randomToken(), oauth2.GenerateVerifier()
	nonce := ""
	if p.name() == providerIDP {
		nonce = randomToken()
	}
	loc, err := p.authCodeURL(ctx, state, verifier, nonce)
	if err != nil {
		s.log.ErrorContext(ctx, "oauth provider unavailable", "provider", p.name(), "err", err)
		return nil, platform.Unavailable("the identity provider cannot be reached; try again later")
	}
	sealed, err := s.d.Sealer.Seal(verifier)
	if err != nil {
		return nil, err
	}
	s.purgeExpired(ctx)
	now := s.now()
	if err := s.stateInsert(ctx, &stateRow{
		ID: hashToken(state), Provider: p.name(), Mode: mode, UserID: userID, Verifier: sealed, Nonce: nonce,
		Next: next, CreatedAt: now, ExpiresAt: now.Add(s.d.StateTTL),
	}); err != nil {
		return nil, err
	}
	return &redirect{location: loc, cookie: s.stateCookie(p, state, int(s.d.StateTTL.Seconds()))}, nil
}

// callbackParams are what the provider sends back to the callback.
type callbackParams struct {
	Code, State, Error string
	Cookie             string // the browser's state cookie
}

// callback finishes a flow. A missing, mismatched, expired or replayed state
// is a 400 and changes nothing; after that every outcome is a redirect to the
// frontend, and the state cookie is cleared.
func (s *Service) callback(ctx context.Context, p provider, in callbackParams) (*redirect, error) {
	if err := unavailable(p); err != nil {
		return nil, err
	}
	switch {
	case in.State == "":
		return nil, platform.Invalid("state: missing")
	case in.Cookie == "":
		return nil, platform.Invalid("state: this browser has no login in progress (the state cookie is missing or expired); start again")
	case subtle.ConstantTimeCompare([]byte(in.State), []byte(in.Cookie)) != 1:
		return nil, platform.Invalid("state: does not match the login this browser started")
	}
	st, err := s.stateConsume(ctx, p.name(), in.State)
	if errors.Is(err, platform.ErrNotFound) {
		return nil, platform.Invalid("state: expired or already used; start again")
	}
	if err != nil {
		return nil, err
	}
	out := &redirect{cookie: s.stateCookie(p, "", -1)}
	out.location, err = s.finish(ctx, p, st, in)
	if err != nil {
		var fe *flowError
		if !errors.As(err, &fe) {
			return nil, err
		}
		s.log.WarnContext(ctx, "oauth flow refused", "provider", p.name(), "mode", st.Mode, "status", fe.code, "err", fe.err)
		out.location = s.failureURL(p, st.Mode, fe.code)
	}
	return out, nil
}

var providerErrorCode = regexp.MustCompile(`^[a-z_]{1,40}$`)

// finish runs the flow after the state checked out and answers the frontend
// URL of its success.
func (s *Service) finish(ctx context.Context, p provider, st *stateRow, in callbackParams) (string, error) {
	if in.Error != "" {
		if in.Error == ErrAccessDenied {
			return "", fail(ErrAccessDenied, nil)
		}
		if !providerErrorCode.MatchString(in.Error) {
			in.Error = "malformed"
		}
		return "", fail(ErrProviderError, errors.New("provider error "+in.Error))
	}
	if in.Code == "" {
		return "", fail(ErrProviderError, errors.New("callback without code"))
	}
	verifier, err := s.d.Sealer.Open(st.Verifier)
	if err != nil {
		return "", err
	}
	pr, err := p.exchange(ctx, in.Code, verifier, st.Nonce)
	if errors.Is(err, errIDToken) {
		return "", fail(ErrInvalidIDToken, err)
	}
	if err != nil {
		return "", fail(ErrExchangeFailed, err)
	}
	tk, err := s.sealTokens(pr)
	if err != nil {
		return "", err
	}
	if st.Mode == modeConnect {
		if err := s.connect(ctx, p, st.UserID, pr, tk); err != nil {
			return "", err
		}
		if st.Next != "" {
			return st.Next, nil // set by another module when it issued the ticket (IssueConnectTicket)
		}
		return s.d.FrontendURL + "/settings/connected-accounts?" + url.Values{p.name(): {"connected"}}.Encode(), nil
	}
	userID, err := s.login(ctx, p, pr, tk)
	if err != nil {
		return "", err
	}
	q := url.Values{}
	// The provider's login does not stand in for the account's second factor:
	// a 2FA account gets a challenge, not tokens (or an exchange code), and
	// trades it with a code at POST /auth/2fa/login.
	challenge, err := s.d.Accounts.TwoFactorChallenge(ctx, userID)
	if err != nil {
		return "", err
	}
	if challenge != "" {
		q.Set("twoFactorChallenge", challenge)
		q.Set("provider", p.name())
		return s.d.FrontendURL + "/auth/callback?" + q.Encode(), nil
	}
	if s.d.RedirectMode == RedirectCode {
		code, err := s.exchangeInsert(ctx, userID)
		if err != nil {
			return "", err
		}
		q.Set("code", code)
	} else {
		tp, err := s.d.Accounts.IssueTokens(ctx, userID)
		if err != nil {
			return "", err
		}
		q.Set("accessToken", tp.AccessToken)
		q.Set("refreshToken", tp.RefreshToken)
	}
	return s.d.FrontendURL + "/auth/callback?" + q.Encode(), nil
}

func (s *Service) failureURL(p provider, mode, code string) string {
	if mode == modeConnect {
		return s.d.FrontendURL + "/settings/connected-accounts?" + url.Values{p.name(): {"error"}, "reason": {code}}.Encode()
	}
	return s.d.FrontendURL + "/auth/callback?" + url.Values{"error": {code}, "provider": {p.name()}}.Encode()
}

// login finds or creates the user the provider vouched for and answers its id.
//
//  1. An identity already linked to (provider, subject) logs its user in.
//  2. Otherwise an account whose email the provider reports as verified is
//     linked and logged in (unless it has 2FA on, or another identity of this
//     provider: then the user must log in and connect from settings).
//  3. Otherwise a new account is created, but only for a verified email.
//
// An unverified email never links, logs in or creates anything: it is refused
// with email_not_verified, whether or not an account has that address,
// because an account made from it would let whoever controls the provider
// account squat (and later take over) the address's Keelson account.
func (s *Service) login(ctx context.Context, p provider, pr *profile, tk sealedTokens) (string, error) {
	id, err := s.identityBySubject(ctx, p.name(), pr.Issuer, pr.Subject)
	switch {
	case err == nil:
		if _, err := s.d.Accounts.UserByID(ctx, id.UserID); errors.Is(err, platform.ErrNotFound) {
			// The account was deleted; the stale link goes and the login starts afresh.
			if err := s.identityDelete(ctx, id.ID); err != nil {
				return "", err
			}
			return s.login(ctx, p, pr, tk)
		} else if err != nil {
			return "", err
		}
		if err := s.identityTouch(ctx, id.ID, pr.Login, primaryAddress(pr), tk); err != nil {
			return "", err
		}
		return id.UserID, s.setCodehostUsername(ctx, p, id.UserID, pr)
	case !errors.Is(err, platform.ErrNotFound):
		return "", err
	}

	var verified []string
	for _, e := range pr.Emails {
		if e.Verified {
			verified = append(verified, e.Address)
		}
	}
	if userID, err := s.linkByEmail(ctx, p, pr, tk, verified); err != nil || userID != "" {
		return userID, err
	}
	if len(verified) == 0 {
		if len(pr.Emails) == 0 {
			return "", fail(ErrEmailMissing, nil)
		}
		return "", fail(ErrEmailNotVerified, nil)
	}

	u, err := s.d.Accounts.CreateUser(ctx, auth.CreateUserParams{
		Email: verified[0], EmailVerified: true, Name: pr.Name, Username: pr.Login, Image: pr.Image,
		CodehostUsername: map[bool]string{true: pr.Login}[p.name() == providerCodehost],
	})
	switch {
	case errors.Is(err, platform.ErrConflict):
		// Someone registered the address a moment ago; retrying would link to it.
		return "", fail(ErrTemporarilyUnavailable, err)
	case errors.Is(err, platform.ErrInvalid):
		return "", fail(ErrEmailInvalid, err)
	case err != nil:
		return "", err
	}
	if err := s.link(ctx, p, u.ID, pr, verified[0], tk); err != nil {
		return "", err
	}
	s.log.InfoContext(ctx, "account created by oauth login", "provider", p.name(), "user_id", u.ID)
	return u.ID, nil
}

// linkByEmail links the identity to the account of the first of its
// verified addresses that has one, and returns that account ("" when none
// has). An account with 2FA on, one whose own email is unverified, or one
// linked to another identity of the provider is refused.
func (s *Service) linkByEmail(ctx context.Context, p provider, pr *profile, tk sealedTokens, verified []string) (string, error) {
	for _, addr := range verified {
		u, err := s.d.Accounts.UserByEmail(ctx, addr)
		if errors.Is(err, platform.ErrNotFound) {
			continue
		}
		if err != nil {
			return "", err
		}
		if u.TwoFactorEnabled {
			return "", fail(ErrLinkRequiresLogin, errors.New("the matching account has 2FA on"))
		}
		// An account whose email was never verified (by its mailed link) may
		// belong to whoever registered the address first, not its owner.
		// Linking would let that squatter share the real owner's account, so
		// unverified accounts are never linked by email: the owner verifies the
		// address (or logs in) and connects instead.
		if !u.EmailVerified {
			return "", fail(ErrLinkRequiresLogin, errors.New("the matching account's email is not verified"))
		}
		if _, err := s.identityByUser(ctx, p.name(), u.ID); err == nil {
			return "", fail(ErrAccountLinked, errors.New("the matching account is linked to another identity"))
		} else if !errors.Is(err, platform.ErrNotFound) {
			return "", err
		}
		if err := s.link(ctx, p, u.ID, pr, addr, tk); err != nil {
			return "", err
		}
		s.log.InfoContext(ctx, "oauth identity linked by verified email", "provider", p.name(), "user_id", u.ID)
		return u.ID, nil
	}
	return "", nil
}

// connect links the code-host identity to the signed-in user userID.
func (s *Service) connect(ctx context.Context, p provider, userID string, pr *profile, tk sealedTokens) error {
	if _, err := s.d.Accounts.UserByID(ctx, userID); errors.Is(err, platform.ErrNotFound) {
		return fail(ErrAccountNotFound, nil)
	} else if err != nil {
		return err
	}
	if err := s.link(ctx, p, userID, pr, primaryAddress(pr), tk); err != nil {
		return err
	}
	s.log.InfoContext(ctx, "oauth identity connected", "provider", p.name(), "user_id", userID)
	return nil
}

// link stores the identity for userID and records the code-host username.
func (s *Service) link(ctx context.Context, p provider, userID string, pr *profile, addr string, tk sealedTokens) error {
	now := s.now()
	err := s.identityLink(ctx, &identityRow{
		ID: platform.NewID(), Provider: p.name(), Issuer: pr.Issuer, ProviderUserID: pr.Subject, UserID: userID,
		Login: pr.Login, Email: addr, AccessToken: tk.Access, RefreshToken: tk.Refresh, TokenExpiresAt: tk.ExpiresAt,
		CreatedAt: now, UpdatedAt: now,
	})
	if errors.Is(err, platform.ErrConflict) {
		return fail(ErrAlreadyLinked, err)
	}
	if err != nil {
		return err
	}
	return s.setCodehostUsername(ctx, p, userID, pr)
}

func (s *Service) setCodehostUsername(ctx context.Context, p provider, userID string, pr *profile) error {
	if p.name() != providerCodehost || pr.Login == "" {
		return nil
	}
	return s.d.Accounts.SetCodehostUsername(ctx, userID, pr.Login)
}

func primaryAddress(pr *profile) string {
	if len(pr.Emails) == 0 {
		return ""
	}
	return pr.Emails[0].Address
}

// exchange trades a one-time code of RedirectCode mode for a token pair.
func (s *Service) exchange(ctx context.Context, code string) (auth.TokenPair, error) {
	userID, err := s.exchangeConsume(ctx, code)
	if errors.Is(err, platform.ErrNotFound) {
		return auth.TokenPair{}, platform.Invalid("code: invalid, expired or already used")
	}
	if err != nil {
		return auth.TokenPair{}, err
	}
	tp, err := s.d.Accounts.IssueTokens(ctx, userID)
	if errors.Is(err, platform.ErrNotFound) {
		return auth.TokenPair{}, platform.Invalid("code: invalid, expired or already used")
	}
	return tp, err
}
