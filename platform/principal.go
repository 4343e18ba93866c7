package platform

import (
	"context"
	"errors"
	"strings"

	"github.com/danielgtaylor/huma/v2"
)

// Role is what a principal may do beyond its own resources.
type Role string

// Roles of DESIGN.md section 4.
const (
	RoleUser  Role = "USER"
	RoleAdmin Role = "ADMIN"
)

// Principal is who is calling: the authenticated user and their role.
type Principal struct {
	UserID ID
	Email  string
	Role   Role
	// TokenID is the API token the call came with (auth/tokens), empty for
	// a person's session. Audit rows record it next to UserID, the token's
	// creator.
	TokenID ID
	// Scopes narrow what a token may do: a project-scoped route asking for
	// a permission not listed is refused even where the creator's role
	// allows it. Nil for a session (no narrowing); a token always has at
	// least one.
	Scopes []Permission
	// TeamID, when set, limits a token to that team's projects.
	TeamID ID
}

// IsToken reports whether the call came with an API token, not a session.
func (p Principal) IsToken() bool { return p.TokenID != "" }

// Allows reports whether p's scopes (if any) include perm, or imply it
// (Permission.Implies). A session allows every permission; its role decides.
func (p Principal) Allows(perm Permission) bool {
	if !p.IsToken() {
		return true
	}
	for _, s := range p.Scopes {
		if s.Implies(perm) {
			return true
		}
	}
	return false
}

// IsAdmin reports whether p has the ADMIN role.
func (p Principal) IsAdmin() bool { return p.Role == RoleAdmin }

type principalKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the principal RequireAuth put in ctx.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok && p.UserID != ""
}

// Authenticator turns a bearer access token into a principal. The auth module
// implements it; every protected route of every module uses it through
// RequireAuth. It returns an error wrapping ErrUnauthorized for a bad token.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (Principal, error)
}

// SecurityScheme is the OpenAPI name of the bearer scheme APIConfig declares.
const SecurityScheme = "bearer"

// Bearer is the Security requirement for operations protected by RequireAuth.
func Bearer() []map[string][]string { return []map[string][]string{{SecurityScheme: {}}} }

// BearerToken extracts the token of an "Authorization: Bearer <token>" header.
func BearerToken(header string) (string, bool) {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// RequireAuth is Huma middleware that admits only callers with a valid bearer
// token and puts their Principal in the request context. Failures answer 401.
// An API token is admitted only where TokenRules allows it (403 otherwise).
func RequireAuth(api huma.API, a Authenticator) func(huma.Context, func(huma.Context)) {
	return func(ctx huma.Context, next func(huma.Context)) {
		tok, ok := BearerToken(ctx.Header("Authorization"))
		if !ok {
			writeErr(api, ctx, Unauthorized("missing bearer token: send Authorization: Bearer <accessToken>"))
			return
		}
		p, err := a.Authenticate(ctx.Context(), tok)
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) {
				pe = Unauthorized("invalid or expired access token")
				if !errors.Is(err, ErrUnauthorized) {
					Logger(ctx.Context()).ErrorContext(ctx.Context(), "authenticate", "err", err)
					pe = &Error{Status: 500, Message: "internal server error"}
				}
			}
			writeErr(api, ctx, pe)
			return
		}
		if p.IsToken() {
			if e := tokenRefusal(ctx.Context(), p); e != nil {
				writeErr(api, ctx, e)
				return
			}
		}
		next(huma.WithValue(ctx, principalKey{}, p))
	}
}

// RequireRole is like RequireAuth and also demands role (403 otherwise).
func RequireRole(api huma.API, a Authenticator, role Role) func(huma.Context, func(huma.Context)) {
	authn := RequireAuth(api, a)
	return func(ctx huma.Context, next func(huma.Context)) {
		authn(ctx, func(ctx huma.Context) {
			p, _ := PrincipalFrom(ctx.Context())
			if p.Role != role {
				writeErr(api, ctx, Forbidden("this action needs the "+string(role)+" role"))
				return
			}
			next(ctx)
		})
	}
}

func writeErr(_ huma.API, ctx huma.Context, e *Error) {
	ae := toAPIError(e)
	for k, v := range ae.headers {
		for _, s := range v {
			ctx.AppendHeader(k, s)
		}
	}
	ctx.SetHeader("Content-Type", "application/json")
	ctx.SetStatus(ae.StatusCode)
	if err := writeJSON(ctx.BodyWriter(), ae); err != nil {
		Logger(ctx.Context()).Debug("write error body", "err", err)
	}
}
