package oauth

import (
	"context"
	"errors"
	"net/http"

	"github.com/danielgtaylor/huma/v2"
	"github.com/keelson-dev/keelson/auth"
	"github.com/keelson-dev/keelson/platform"
)

// redirectOutput is the 302 every browser route answers.
type redirectOutput struct {
	Status         int
	Location       string   `header:"Location" doc:"Where the browser goes next: the provider's authorization page (start routes) or the frontend (callbacks)"`
	SetCookie      []string `header:"Set-Cookie" doc:"The short-lived HttpOnly, SameSite=Lax cookie that binds the OAuth state to this browser (set by start routes, cleared by callbacks); the connect route also clears its ticket cookie"`
	CacheControl   string   `header:"Cache-Control" doc:"no-store: the redirect may carry tokens"`
	ReferrerPolicy string   `header:"Referrer-Policy" doc:"no-referrer: tokens in the URL must not leak to other sites"`
}

func toOutput(r *redirect) *redirectOutput {
	out := &redirectOutput{
		Status: http.StatusFound, Location: r.location,
		CacheControl: "no-store", ReferrerPolicy: "no-referrer",
	}
	for _, c := range append([]*http.Cookie{r.cookie}, r.cookies...) {
		if c != nil {
			out.SetCookie = append(out.SetCookie, c.String())
		}
	}
	return out
}

type connectInput struct {
	Authorization string `header:"Authorization" hidden:"true"`
	Ticket        string `query:"ticket" maxLength:"256" doc:"A one-time connect ticket from POST /auth/codehost/connect, opened in the browser that asked for it (its cookie must come along). Send either this or Authorization: Bearer."`
	Token         string `query:"token" maxLength:"4096" doc:"No longer accepted (answers 400): a link carrying an access token let any page link a visitor's code-host account to the token's owner. Use ticket."`
	Cookie        string `cookie:"keelson_connect" doc:"Binds ticket to this browser (set by POST /auth/codehost/connect; __Host-keelson_connect on https)"`
	HostCookie    string `cookie:"__Host-keelson_connect" hidden:"true"`
}

type connectTicketInput struct {
	Authorization string `header:"Authorization" hidden:"true"`
}

type connectTicketOutput struct {
	SetCookie    string `header:"Set-Cookie" doc:"HttpOnly, SameSite=Lax cookie binding the ticket to this browser"`
	CacheControl string `header:"Cache-Control"`
	Body         *ConnectTicket
}

// CallbackQuery is what the provider's redirect carries to either callback.
// Its inputs embed it and add their own state cookie; it is exported only
// because Huma reads no parameters from an unexported embedded struct.
type CallbackQuery struct {
	Code             string `query:"code" maxLength:"2048" doc:"Authorization code from the provider (absent when the user declined)"`
	State            string `query:"state" required:"true" maxLength:"256" doc:"The state the start route sent; must match this browser's state cookie and is accepted once"`
	Error            string `query:"error" maxLength:"256" doc:"OAuth error from the provider, e.g. access_denied"`
	ErrorDescription string `query:"error_description" maxLength:"2048" doc:"Provider's description of error (ignored)"`
}

type codehostCallbackInput struct {
	CallbackQuery
	Cookie     string `cookie:"keelson_oauth_codehost" doc:"State cookie set by GET /auth/codehost or /auth/codehost/connect (__Host-keelson_oauth_codehost on https)"`
	HostCookie string `cookie:"__Host-keelson_oauth_codehost" hidden:"true"`
}

type idpCallbackInput struct {
	CallbackQuery
	Cookie     string `cookie:"keelson_oauth_idp" doc:"State cookie set by GET /auth/idp (__Host-keelson_oauth_idp on https)"`
	HostCookie string `cookie:"__Host-keelson_oauth_idp" hidden:"true"`
}

type exchangeInput struct {
	Body exchangeBody
}

// exchangeBody is the body of POST /auth/oauth/exchange.
type exchangeBody struct {
	Code string `json:"code" minLength:"1" maxLength:"256" doc:"The one-time code from the frontend callback's ?code= (RedirectMode code)"`
}

func (exchangeBody) SchemaName() string { return "OAuthExchangeRequest" }

type exchangeOutput struct {
	CacheControl string `header:"Cache-Control"`
	Body         auth.TokenPair
}

const (
	loginDoc = "On success the browser lands on <FrontendURL>/auth/callback?accessToken=...&refreshToken=... " +
		"(redirect mode \"tokens\", the default) or <FrontendURL>/auth/callback?code=... (mode \"code\": trade the " +
		"one-time code, valid 30 s, at POST /auth/oauth/exchange); or, when the account has 2FA on, on " +
		"<FrontendURL>/auth/callback?twoFactorChallenge=...&provider=<provider> (no tokens: trade the challenge " +
		"with a TOTP or recovery code at POST /auth/2fa/login). On a refusal it lands on " +
		"<FrontendURL>/auth/callback?error=<status>&provider=<provider>, status one of email_not_verified, " +
		"email_missing, email_invalid, already_linked, account_already_linked, link_requires_login, access_denied, " +
		"provider_error, exchange_failed, invalid_id_token; nothing is created or linked then. An account is linked " +
		"or created by email only when the provider says the email is verified."
	connectDoc = "Connect mode ends on <FrontendURL>/settings/connected-accounts?codehost=connected, or " +
		"?codehost=error&reason=<status> (already_linked when the code-host account belongs to another user)."
)

// oauthTags and the error statuses are shared by the OAuth operations: a
// start route only fails for want of its provider, a callback also on a bad
// state.
var (
	oauthTags    = []string{"OAuth"}
	startErrs    = []int{http.StatusServiceUnavailable}
	redirectErrs = []int{http.StatusBadRequest, http.StatusServiceUnavailable}
)

// redirectOp is a browser route: a GET answered with a 302 (redirectOutput),
// whose errors are errs.
func redirectOp(id, path, summary, desc string, errs []int) huma.Operation {
	return huma.Operation{OperationID: id, Method: http.MethodGet, Path: path, Summary: summary, Description: desc,
		Tags: oauthTags, DefaultStatus: http.StatusFound, Errors: errs}
}

// redirectTo answers a flow step's redirect, or its error.
func redirectTo(r *redirect, err error) (*redirectOutput, error) {
	if err != nil {
		return nil, err
	}
	return toOutput(r), nil
}

// Register adds the OAuth routes to api: the code host's login and account
// linking, the OpenID Connect provider's login, and the code exchange.
func (s *Service) Register(api huma.API) error {
	s.registerCodehost(api)
	s.registerIDP(api)
	return nil
}

// registerCodehost adds the code host's login, connect (account linking)
// and callback routes.
func (s *Service) registerCodehost(api huma.API) {
	huma.Register(api, redirectOp("oauth-codehost-start", "/auth/codehost", "Log in through the code host (browser redirect)",
		"Redirects to the code host's authorization page with state and PKCE (S256), bound to this "+
			"browser by a short-lived cookie. 503 names the missing settings when the code host is not configured. "+loginDoc,
		startErrs), func(ctx context.Context, _ *struct{}) (*redirectOutput, error) {
		return redirectTo(s.start(ctx, s.codehost, modeLogin, "", ""))
	})

	connect := redirectOp("oauth-codehost-connect", "/auth/codehost/connect", "Link a code-host account to the current user (browser redirect)",
		"For a browser: ?ticket= from POST /auth/codehost/connect, opened in the browser that asked "+
			"for it (the ticket's cookie must come along; otherwise 400 and nothing is linked). For other clients: "+
			"Authorization: Bearer. The token query parameter is refused (400). Redirects to the code host's "+
			"authorization page; the connect metadata (who is connecting) is kept server-side with the state. "+connectDoc,
		[]int{http.StatusBadRequest, http.StatusUnauthorized, http.StatusServiceUnavailable})
	connect.Security = platform.Bearer()
	huma.Register(api, connect, s.connectRoute)

	huma.Register(api, huma.Operation{
		OperationID: "oauth-codehost-connect-ticket", Method: http.MethodPost, Path: "/auth/codehost/connect",
		Summary: "Get a one-time ticket that links a code-host account to the current user", Tags: oauthTags,
		Security: platform.Bearer(),
		Description: "Call it from the browser that will do the linking (credentials included: the answer sets an " +
			"HttpOnly cookie binding the ticket to that browser), then send that browser to connectUrl " +
			"(GET /auth/codehost/connect?ticket=...). The ticket works once, for 5 minutes, and only with its cookie: " +
			"a ticket opened in any other browser links nothing. A newer ticket replaces the cookie of an older one.",
		Errors: []int{http.StatusUnauthorized, http.StatusServiceUnavailable},
	}, func(ctx context.Context, in *connectTicketInput) (*connectTicketOutput, error) {
		if err := unavailable(s.codehost); err != nil {
			return nil, err
		}
		p, err := s.authenticate(ctx, in.Authorization)
		if err != nil {
			return nil, err
		}
		t, err := s.IssueConnectTicket(ctx, p.UserID, "")
		if err != nil {
			return nil, err
		}
		return &connectTicketOutput{SetCookie: t.Cookie.String(), CacheControl: "no-store", Body: t}, nil
	})

	huma.Register(api, redirectOp("oauth-codehost-callback", "/auth/codehost/callback", "Code host's OAuth callback (browser redirect)",
		"Where the code host sends the browser back. A missing, mismatched, expired or replayed state "+
			"answers 400 and changes nothing. Login mode: "+loginDoc+" "+connectDoc+
			" The code host's user token is stored sealed and its login becomes the profile's codehostUsername.",
		redirectErrs), func(ctx context.Context, in *codehostCallbackInput) (*redirectOutput, error) {
		return redirectTo(s.callback(ctx, s.codehost, callbackParams{Code: in.Code, State: in.State, Error: in.Error, Cookie: s.pick(in.Cookie, in.HostCookie)}))
	})

}

// registerIDP adds the OpenID Connect provider's login and callback routes,
// and the one-time code exchange both providers' callbacks use.
func (s *Service) registerIDP(api huma.API) {
	huma.Register(api, redirectOp("oauth-idp-start", "/auth/idp", "Log in through the OpenID Connect provider (browser redirect)",
		"Redirects to the identity provider (found by discovery from its issuer at first use) with "+
			"state, PKCE (S256) and nonce, bound to this browser by a short-lived cookie. 503 names the missing "+
			"settings, or says the provider cannot be reached. "+loginDoc,
		startErrs), func(ctx context.Context, _ *struct{}) (*redirectOutput, error) {
		return redirectTo(s.start(ctx, s.idp, modeLogin, "", ""))
	})

	huma.Register(api, redirectOp("oauth-idp-callback", "/auth/idp/callback", "Identity provider's OAuth callback (browser redirect)",
		"Where the identity provider sends the browser back. A missing, mismatched, expired or replayed "+
			"state answers 400 and changes nothing. The ID token is verified (JWKS signature, iss, aud, exp, nonce). "+loginDoc,
		redirectErrs), func(ctx context.Context, in *idpCallbackInput) (*redirectOutput, error) {
		return redirectTo(s.callback(ctx, s.idp, callbackParams{Code: in.Code, State: in.State, Error: in.Error, Cookie: s.pick(in.Cookie, in.HostCookie)}))
	})

	huma.Register(api, huma.Operation{
		OperationID: "oauth-exchange", Method: http.MethodPost, Path: "/auth/oauth/exchange",
		Summary: "Trade a one-time OAuth code for the token pair", Tags: oauthTags, MaxBodyBytes: 4096,
		Description: "In redirect mode \"code\" the OAuth callbacks put ?code= in the frontend URL instead of " +
			"the tokens. The code is single-use and valid for 30 seconds; it answers the same token pair as " +
			"POST /auth/login. An unknown, used or expired code answers 400.",
		Errors: []int{http.StatusBadRequest},
	}, func(ctx context.Context, in *exchangeInput) (*exchangeOutput, error) {
		tp, err := s.exchange(ctx, in.Body.Code)
		if err != nil {
			return nil, err
		}
		return &exchangeOutput{CacheControl: "no-store", Body: tp}, nil
	})
}

// connectRoute starts linking a code-host account: with a browser's one-time
// ticket (and its cookie), or with a bearer token.
func (s *Service) connectRoute(ctx context.Context, in *connectInput) (*redirectOutput, error) {
	if err := unavailable(s.codehost); err != nil {
		return nil, err
	}
	if in.Token != "" {
		return nil, platform.Invalid("query token: no longer accepted; " +
			"POST /auth/codehost/connect with Authorization: Bearer for a one-time ticket, then open its connectUrl in the same browser")
	}
	if in.Ticket != "" {
		return redirectTo(s.startConnectWithTicket(ctx, in.Ticket, s.pick(in.Cookie, in.HostCookie)))
	}
	p, err := s.authenticate(ctx, in.Authorization)
	if err != nil {
		return nil, err
	}
	return redirectTo(s.start(ctx, s.codehost, modeConnect, p.UserID, ""))
}

// authenticate checks an Authorization: Bearer header.
func (s *Service) authenticate(ctx context.Context, header string) (platform.Principal, error) {
	tok, ok := platform.BearerToken(header)
	if !ok {
		return platform.Principal{}, platform.Unauthorized(
			"missing access token: send Authorization: Bearer <accessToken> (browsers: open the connectUrl of POST /auth/codehost/connect)")
	}
	p, err := s.d.Authn.Authenticate(ctx, tok)
	if err != nil {
		var pe *platform.Error
		if !errors.As(err, &pe) && errors.Is(err, platform.ErrUnauthorized) {
			err = platform.Unauthorized("invalid or expired access token")
		}
		return platform.Principal{}, err
	}
	return p, nil
}

// pick chooses the cookie this deployment sets: on https only the __Host-
// one, which no subdomain can set; the plain name is then ignored.
func (s *Service) pick(plain, host string) string {
	if s.secure() {
		return host
	}
	return plain
}
