package main

import (
	"context"

	"github.com/keelson-dev/keelson/auth"
	"github.com/keelson-dev/keelson/auth/apitokens"
	"github.com/keelson-dev/keelson/auth/auditlog"
	"github.com/keelson-dev/keelson/auth/teams"
	"github.com/keelson-dev/keelson/examples/glue"
	"github.com/keelson-dev/keelson/plans"
	"github.com/keelson-dev/keelson/projects"
)

// buildTeams builds the teams module on the auth module (accounts, mail and
// its mail rate limits), the plans module (teamMembers of the team's
// plan) and the API tokens module (told of deleted teams), built before it.
// Whether a team still owns projects it reads from the projects table
// (projects.Counts): projects is built after it. Projects asks it for
// members' roles: the one authorisation point (projects.Authorize) that
// deployments, domains, deploy hooks and codehost reach through adapters.
func (a *App) buildTeams(context.Context) error {
	svc, err := teams.New(teams.Deps{
		DB: a.DB, Auth: a.Authn, Users: glue.TeamUsers{Auth: a.Auth}, Plans: glue.TeamPlans{Plans: a.Plans},
		Projects: projects.Counts{DB: a.DB}, Audit: auditlog.Recorder{}, Mailer: glue.TeamMailer{Mailer: a.Mailer}, Limiter: a.Auth, Dependents: a.APITokens,
		FrontendURL: a.Cfg.FrontendURL, InviteTTL: a.Cfg.InviteTTL, Log: a.Log.With("module", "teams"),
	})
	if err != nil {
		return err
	}
	a.add(svc)
	a.Teams = svc
	return nil
}

var (
	_ teams.Limiter      = (*auth.Service)(nil)
	_ teams.Dependents   = (*apitokens.Service)(nil)
	_ plans.Teams        = teams.Members{}
	_ teams.Projects     = projects.Counts{}
	_ plans.UsageChecker = projects.Counts{}
)
