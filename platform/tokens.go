package platform

import (
	"context"
	"slices"
	"strings"

	"github.com/danielgtaylor/huma/v2"
)

// APITokenPrefix opens every API token (auth/apitokens), so that secret
// scanners find leaked ones and the server tells them from session tokens
// without asking the database.
const APITokenPrefix = "kls_"

// IsAPIToken reports whether a bearer token is an API token (by its prefix).
func IsAPIToken(tok string) bool { return strings.HasPrefix(tok, APITokenPrefix) }

// TokenRule is what API tokens may do on one operation (see TokenRules).
type TokenRule struct {
	// Refuse, when set, refuses every API token with this 403 message,
	// before the token is even looked up.
	Refuse string
	// Scope, when set, is the permission a token needs for the route as a
	// whole: a route that names no project (a list, a creation). A
	// project-scoped route leaves it empty; projects.Authorize asks for its
	// permission with Grant.
	Scope Permission
}

type tokenRuleKey struct{}

// TokenRules is API-wide middleware (huma.API.UseMiddleware, before any
// operation is registered) that decides with rule what API tokens may do on
// each operation. Refusals are answered here; RequireAuth checks the scope
// once the token is authenticated. Without it RequireAuth refuses every API
// token: tokens reach only the operations a host's rule lets through.
func TokenRules(api huma.API, rule func(*huma.Operation) TokenRule) func(huma.Context, func(huma.Context)) {
	return func(ctx huma.Context, next func(huma.Context)) {
		r := rule(ctx.Operation())
		if tok, ok := BearerToken(ctx.Header("Authorization")); ok && IsAPIToken(tok) && r.Refuse != "" {
			writeErr(api, ctx, Forbidden(r.Refuse).WithCode("TOKEN_REFUSED"))
			return
		}
		next(huma.WithValue(ctx, tokenRuleKey{}, r))
	}
}

// tokenRefusal is the 403 for token principal p on the operation of ctx, or
// nil when it may go on.
func tokenRefusal(ctx context.Context, p Principal) *Error {
	r, ok := ctx.Value(tokenRuleKey{}).(TokenRule)
	switch {
	case !ok:
		return Forbidden("API tokens cannot use this route: it needs a signed-in session").WithCode("TOKEN_REFUSED")
	case r.Refuse != "":
		return Forbidden(r.Refuse).WithCode("TOKEN_REFUSED")
	case r.Scope != "" && !p.Allows(r.Scope):
		return MissingScope(r.Scope)
	}
	return nil
}

// MissingScope is the 403 of an API token whose scopes lack perm.
func MissingScope(perm Permission) *Error {
	return Forbidden("this API token lacks the scope " + string(perm)).WithCode("SCOPE_MISSING")
}

// Grant decides the access of the caller in ctx to a resource of team teamID
// ("" for a personal one) on which they hold role: hidden (a 404, usually)
// when they hold no role or their API token is bound to another team (a nil
// hidden: a plain 404); Denied when role lacks perm; MissingScope when their
// token does. A call without a principal (background work) is decided by
// role alone.
func Grant(ctx context.Context, teamID string, role MemberRole, perm Permission, hidden error) error {
	p, _ := PrincipalFrom(ctx)
	if role == "" || (p.IsToken() && p.TeamID != "" && p.TeamID != teamID) {
		if hidden == nil {
			return NotFound("not found")
		}
		return hidden
	}
	if !role.Allows(perm) {
		return Denied(role, perm)
	}
	if !p.Allows(perm) {
		return MissingScope(perm)
	}
	return nil
}

// TokenAccounts narrows the accounts (a user's own and their teams') whose
// resources a list shows to what the caller's API token may see: only its
// team when it is bound to one (nothing when the user left that team).
func TokenAccounts(ctx context.Context, accounts []string) []string {
	p, _ := PrincipalFrom(ctx)
	if !p.IsToken() || p.TeamID == "" {
		return accounts
	}
	if slices.Contains(accounts, p.TeamID) {
		return []string{p.TeamID}
	}
	return []string{}
}

type clientAddrKey struct{}

// WithClientAddr returns ctx carrying the client's address (as the host
// computed it, past trusted proxies).
func WithClientAddr(ctx context.Context, addr string) context.Context {
	return context.WithValue(ctx, clientAddrKey{}, addr)
}

// ClientAddr returns the address WithClientAddr put in ctx, or "".
func ClientAddr(ctx context.Context) string {
	a, _ := ctx.Value(clientAddrKey{}).(string)
	return a
}
