package main

import (
	"context"
	"strings"

	"github.com/danielgtaylor/huma/v2"
	"github.com/keelson-dev/keelson/auth/apitokens"
	"github.com/keelson-dev/keelson/auth/auditlog"
	"github.com/keelson-dev/keelson/auth/teams"
	"github.com/keelson-dev/keelson/examples/glue"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/httpx"
)

// buildAPITokens builds the API tokens module on the auth module (its
// routes take sessions only; creators are auth's accounts) and makes
// a.Authn accept both: every module built after it (plans, teams,
// projects, deployments, ...) authenticates API tokens too, and
// tokenRule, on the whole API, says where they may go. The creator's role
// for a team-bound token is read from the teams tables (teams.Members): the
// teams module is built after this one, which it tells of deleted teams.
func (a *App) buildAPITokens(context.Context) error {
	svc, err := apitokens.New(apitokens.Deps{
		DB: a.DB, Auth: a.Auth, Users: glue.TokenUsers{Auth: a.Auth}, Teams: teams.Members{DB: a.DB}, Audit: auditlog.Recorder{},
		MaxPerUser: a.Cfg.MaxAPITokens, Log: a.Log.With("module", "apitokens"),
	})
	if err != nil {
		return err
	}
	a.add(svc)
	a.APITokens = svc
	a.Authn = glue.Bearer{Sessions: a.Auth, Tokens: svc}
	return nil
}

// tokenRoutes are the operations API tokens may use, with the scope a
// token needs for the route as a whole; "" marks a project- or team-scoped
// route, whose permission the module asks for through platform.Grant
// (projects.Authorize). Every other operation refuses tokens (tokenRule):
// a new route is closed to tokens until it is listed here.
var tokenRoutes = map[string]platform.Permission{
	"create-project": platform.ProjectsCreate, "list-projects": platform.ProjectsRead,
	"get-project": "", "update-project-settings": "", "transfer-project": "", "get-project-delete-status": "", "delete-project": "",
	"create-deployment": "", "list-deployments": platform.DeploymentsRead, "get-deployment": "", "get-deployment-status": "",
	"delete-deployment": "", "cancel-deployment": "", "redeploy-deployment": "", "rollback-deployment": "",
	"stream-deployment-logs": "", "create-deployment-log-token": "",
	"create-domain": "", "list-domains": "", "get-domain": "", "verify-domain": "", "update-domain": "", "delete-domain": "",
	"create-deploy-hook": "", "list-deploy-hooks": "", "delete-deploy-hook": "",
	"list-teams": platform.MembersRead, "get-team": "", "update-team": "", "delete-team": "", "list-team-members": "",
	"update-team-member": "", "remove-team-member": "", "create-team-invitation": "", "list-team-invitations": "",
	"revoke-team-invitation": "", "list-team-audit-log": "",
}

// tokenRule is the server's platform.TokenRules: account routes (every
// /auth/ route: password, email, 2FA, sessions, OAuth, the tokens
// themselves) and every other bearer route not in tokenRoutes refuse API
// tokens.
func tokenRule(op *huma.Operation) platform.TokenRule {
	if strings.HasPrefix(op.Path, "/auth/") {
		return platform.TokenRule{Refuse: "API tokens cannot use account routes (password, email, 2FA, sessions, code-host login, API tokens): sign in"}
	}
	if scope, ok := tokenRoutes[op.OperationID]; ok {
		return platform.TokenRule{Scope: scope}
	}
	if len(op.Security) == 0 {
		return platform.TokenRule{} // no bearer authentication here (health, deploy-hook URLs, webhooks)
	}
	return platform.TokenRule{Refuse: "API tokens cannot use " + op.Method + " " + op.Path + ": it needs a signed-in session"}
}

// clientAddr puts the client's address in the context (platform.ClientAddr):
// the TCP peer, or past trusted proxies the rightmost X-Forwarded-For
// address that is not one. API tokens record it as their last use.
func (a *App) clientAddr(ctx huma.Context, next func(huma.Context)) {
	client := httpx.ClientAddr(ctx.RemoteAddr(), httpx.ForwardedFor(ctx.EachHeader), a.Cfg.TrustedProxies)
	next(huma.WithContext(ctx, platform.WithClientAddr(ctx.Context(), client)))
}
