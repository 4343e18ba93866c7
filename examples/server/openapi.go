package main

import (
	"github.com/danielgtaylor/huma/v2"
	"github.com/keelson-dev/keelson/platform/apidocs"
)

// tagDescriptions describes every tag the modules' operations use. A module
// adding a tag adds its line here (TestOpenAPIDocumentsValidate fails on a
// tag without a description).
var tagDescriptions = map[string]string{
	"Health":       "Liveness and readiness probes.",
	"Auth":         "Accounts: registration, login, tokens, password reset, two-factor authentication, profile.",
	"OAuth":        "Browser redirect routes: login and account linking through the code host and an OpenID Connect provider.",
	"Plans":        "Plans and their quotas (provisional). Reads are public; writes need ADMIN.",
	"Hosts":        "The machines that run apps (Temporal workers): their capacity and heartbeat; cordon one so it takes no new deployment. ADMIN only.",
	"Projects":     "Projects of the authenticated user: settings, env vars, deletion.",
	"Deployments":  "Deployments of a project: trigger, status and steps, live logs (Server-Sent Events).",
	"Code host":    "The code-hosting app: installation, repositories, signed webhooks, deliveries.",
	"Deploy hooks": "Secret per-project URLs that deploy the project's branch head when POSTed to.",
	"Domains":      "A project's custom domains: the DNS records to create, ownership and routing checks.",
	"Teams":        "Teams that share projects: members and their roles, invitations by mail.",
	"API tokens":   "Scoped tokens for automation (kls_...), made and revoked by a signed-in account; see docs/API_TOKENS.md.",

	"Env vars (placeholder)":        "Placeholder CRUD routes (SPEC 4.7); no behaviour, unstable.",
	"Logstore (placeholder)":        "Placeholder CRUD routes (SPEC 4.7); no behaviour, unstable.",
	"Workflow engine (placeholder)": "Placeholder CRUD routes (SPEC 4.7); no behaviour, unstable.",
	"Admin (placeholder)":           "Placeholder CRUD routes (SPEC 4.7); no behaviour, unstable.",
	"Users (placeholder)":           "Placeholder CRUD routes (SPEC 4.7); no behaviour, unstable.",
	"Logs (placeholder)":            "Placeholder CRUD routes (SPEC 4.7); no behaviour, unstable.",
	"Cluster (placeholder)":         "Placeholder CRUD routes (SPEC 4.7); no behaviour, unstable.",
	"Notification (placeholder)":    "Placeholder CRUD routes (SPEC 4.7); no behaviour, unstable.",
}

// describeAPI fills the document's description, servers and tags.
func describeAPI(oa *huma.OpenAPI, publicURL string) {
	oa.Info.Description = "Keelson is a self-hostable deployment-platform backend: accounts with 2FA and OAuth, " +
		"projects, deployments that clone, build, run and route a repository with live log streams, a code-hosting " +
		"app integration with signed webhooks, and plans with quotas.\n\n" +
		"Errors answer `{\"statusCode\", \"message\", \"error\"}` (NestJS-compatible); `message` is an array of " +
		"strings for validation failures, with `errors` listing each by location. Protected routes take " +
		"`Authorization: Bearer <accessToken>` from POST /auth/login."
	oa.Servers = []*huma.Server{{URL: publicURL, Description: "This server (KEELSON_PUBLIC_URL)"}}
	apidocs.TagDescriptions(oa, tagDescriptions)
}
