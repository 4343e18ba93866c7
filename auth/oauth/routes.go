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
	Location       string `header:"Location" doc:"Where the browser goes next: the provider's authorization page (start routes) or the frontend (callbacks)"`
	SetCookie      string `header:"Set-Cookie" doc:"The short-lived HttpOnly, SameSite=Lax cookie that binds the OAuth state to this browser (set by start routes, cleared by callbacks)"`
	CacheControl   string `header:"Cache-Control" doc:"no-store: the redirect may carry tokens"`
	ReferrerPolicy string `header:"Referrer-Policy" doc:"no-referrer: tokens in the URL must not leak to other sites"`
}

func toOutput(r *redirect) *redirectOutput {
	out := &redirectOutput{
		Status: http.StatusFound, Location: r.location,
		CacheControl: "no-store", ReferrerPolicy: "no-referrer",
	}
	if r.cookie != nil {
		out.SetCookie = r.cookie.String()
	}
	return out
}

type connectInput struct {
	Authorization string `header:"Authorization" hidden:"true"`
	Token         string `query:"token" maxLength:"4096" doc:"The access token itself, for browsers: a redirect or link cannot carry an Authorization header. Use a fresh (short-lived) access token; it is checked like the Bearer header and never logged. Send either this or Authorization: Bearer."`
}

// The two callback inputs differ only in their cookie's name. (Huma reads no
// parameters from unexported embedded structs, hence the repetition.)
type codehostCallbackInput struct {
	Code             string `query:"code" maxLength:"2048" doc:"Authorization code from the provider (absent when the user declined)"`
	State            string `query:"state" required:"true" maxLength:"256" doc:"The state the start route sent; must match this browser's state cookie and is accepted once"`
	Error            string `query:"error" maxLength:"256" doc:"OAuth error from the provider, e.g. access_denied"`
	ErrorDescription string `query:"error_description" maxLength:"2048" doc:"Provider's description of error (ignored)"`
	Cookie           string `cookie:"keelson_oauth_codehost" doc:"State cookie set by GET /auth/codehost or /auth/codehost/connect"`
}

type idpCallbackInput struct {
	Code             string `query:"code" maxLength:"2048" doc:"Authorization code from the provider (absent when the user declined)"`
	State            string `query:"state" required:"true" maxLength:"256" doc:"The state the start route sent; must match this browser's state cookie and is accepted once"`
	Error            string `query:"error" maxLength:"256" doc:"OAuth error from the provider, e.g. access_denied"`
	ErrorDescription string `query:"error_description" maxLength:"2048" doc:"Provider's description of error (ignored)"`
	Cookie           string `cookie:"keelson_oauth_idp" doc:"State cookie set by GET /auth/idp"`
}

type exchangeInput struct {
	Body struct {
		Code string `json:"code" minLength:"1" maxLength:"256" doc:"The one-time code from the frontend callback's ?code= (RedirectMode code)"`
	}
}

type exchangeOutput struct {
	CacheControl string `header:"Cache-Control"`
	Body         auth.TokenPair
}

const (
	loginDoc = "On success the browser lands on <FrontendURL>/auth/callback?accessToken=...&refreshToken=... " +
		"(redirect mode \"tokens\", the default) or <FrontendURL>/auth/callback?code=... (mode \"code\": trade the " +
		"one-time code, valid 30 s, at POST /auth/oauth/exchange). On a refusal it lands on " +
		"<FrontendURL>/auth/callback?error=<status>&provider=<provider>, status one of email_not_verified, " +
		"email_missing, email_invalid, already_linked, account_already_linked, link_requires_login, access_denied, " +
		"provider_error, exchange_failed, invalid_id_token; nothing is created or linked then. An account is linked " +
		"or created by email only when the provider says the email is verified."
	connectDoc = "Connect mode ends on <FrontendURL>/settings/connected-accounts?codehost=connected, or " +
		"?codehost=error&reason=<status> (already_linked when the code-host account belongs to another user)."
)

// Register adds the OAuth routes to api.
func (s *Service) Register(api huma.API) error {
	tags := []string{"OAuth"}
	redirectErrs := []int{http.StatusBadRequest, http.StatusServiceUnavailable}

	huma.Register(api, huma.Operation{
		OperationID: "oauth-codehost-start", Method: http.MethodGet, Path: "/auth/codehost",
		Summary: "Log in through the code host (browser redirect)", Tags: tags, DefaultStatus: http.StatusFound,
		Description: "Redirects to the code host's authorization page with state and PKCE (S256), bound to this " +
			"browser by a short-lived cookie. 503 names the missing settings when the code host is not configured. " + loginDoc,
		Errors: redirectErrs,
	}, func(ctx context.Context, _ *struct{}) (*redirectOutput, error) {
		r, err := s.start(ctx, s.codehost, modeLogin, "")
		if err != nil {
			return nil, platform.HTTPError(ctx, err)
		}
		return toOutput(r), nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "oauth-codehost-connect", Method: http.MethodGet, Path: "/auth/codehost/connect",
		Summary: "Link a code-host account to the current user (browser redirect)", Tags: tags,
		DefaultStatus: http.StatusFound, Security: platform.Bearer(),
		Description: "Needs the caller's access token: as Authorization: Bearer, or, because a browser cannot send " +
			"a header when it follows a link or redirect, as the token query parameter. Redirects to the code host's " +
			"authorization page; the connect metadata (who is connecting) is kept server-side with the state. " + connectDoc,
		Errors: []int{http.StatusBadRequest, http.StatusUnauthorized, http.StatusServiceUnavailable},
	}, func(ctx context.Context, in *connectInput) (*redirectOutput, error) {
		if err := unavailable(s.codehost); err != nil {
			return nil, platform.HTTPError(ctx, err)
		}
		tok, ok := platform.BearerToken(in.Authorization)
		if !ok {
			tok = in.Token
		}
		if tok == "" {
			return nil, platform.HTTPError(ctx, platform.Unauthorized(
				"missing access token: send Authorization: Bearer <accessToken> or ?token=<accessToken>"))
		}
		p, err := s.d.Authn.Authenticate(ctx, tok)
		if err != nil {
			var pe *platform.Error
			if !errors.As(err, &pe) && errors.Is(err, platform.ErrUnauthorized) {
				err = platform.Unauthorized("invalid or expired access token")
			}
			return nil, platform.HTTPError(ctx, err)
		}
		r, err := s.start(ctx, s.codehost, modeConnect, p.UserID)
		if err != nil {
			return nil, platform.HTTPError(ctx, err)
		}
		return toOutput(r), nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "oauth-codehost-callback", Method: http.MethodGet, Path: "/auth/codehost/callback",
		Summary: "Code host's OAuth callback (browser redirect)", Tags: tags, DefaultStatus: http.StatusFound,
		Description: "Where the code host sends the browser back. A missing, mismatched, expired or replayed state " +
			"answers 400 and changes nothing. Login mode: " + loginDoc + " " + connectDoc +
			" The code host's user token is stored sealed and its login becomes the profile's codehostUsername.",
		Errors: redirectErrs,
	}, func(ctx context.Context, in *codehostCallbackInput) (*redirectOutput, error) {
		r, err := s.callback(ctx, s.codehost, callbackParams{Code: in.Code, State: in.State, Error: in.Error, Cookie: in.Cookie})
		if err != nil {
			return nil, platform.HTTPError(ctx, err)
		}
		return toOutput(r), nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "oauth-idp-start", Method: http.MethodGet, Path: "/auth/idp",
		Summary: "Log in through the OpenID Connect provider (browser redirect)", Tags: tags, DefaultStatus: http.StatusFound,
		Description: "Redirects to the identity provider (found by discovery from its issuer at first use) with " +
			"state, PKCE (S256) and nonce, bound to this browser by a short-lived cookie. 503 names the missing " +
			"settings, or says the provider cannot be reached. " + loginDoc,
		Errors: redirectErrs,
	}, func(ctx context.Context, _ *struct{}) (*redirectOutput, error) {
		r, err := s.start(ctx, s.idp, modeLogin, "")
		if err != nil {
			return nil, platform.HTTPError(ctx, err)
		}
		return toOutput(r), nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "oauth-idp-callback", Method: http.MethodGet, Path: "/auth/idp/callback",
		Summary: "Identity provider's OAuth callback (browser redirect)", Tags: tags, DefaultStatus: http.StatusFound,
		Description: "Where the identity provider sends the browser back. A missing, mismatched, expired or replayed " +
			"state answers 400 and changes nothing. The ID token is verified (JWKS signature, iss, aud, exp, nonce). " + loginDoc,
		Errors: redirectErrs,
	}, func(ctx context.Context, in *idpCallbackInput) (*redirectOutput, error) {
		r, err := s.callback(ctx, s.idp, callbackParams{Code: in.Code, State: in.State, Error: in.Error, Cookie: in.Cookie})
		if err != nil {
			return nil, platform.HTTPError(ctx, err)
		}
		return toOutput(r), nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "oauth-exchange", Method: http.MethodPost, Path: "/auth/oauth/exchange",
		Summary: "Trade a one-time OAuth code for the token pair", Tags: tags, MaxBodyBytes: 4096,
		Description: "In redirect mode \"code\" the OAuth callbacks put ?code= in the frontend URL instead of " +
			"the tokens. The code is single-use and valid for 30 seconds; it answers the same token pair as " +
			"POST /auth/login. An unknown, used or expired code answers 400.",
		Errors: []int{http.StatusBadRequest},
	}, func(ctx context.Context, in *exchangeInput) (*exchangeOutput, error) {
		tp, err := s.exchange(ctx, in.Body.Code)
		if err != nil {
			return nil, platform.HTTPError(ctx, err)
		}
		return &exchangeOutput{CacheControl: "no-store", Body: tp}, nil
	})
	return nil
}
