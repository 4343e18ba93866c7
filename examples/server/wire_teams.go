package main

import (
	"context"
	"errors"

	"github.com/keelson-dev/keelson/auth"
	"github.com/keelson-dev/keelson/auth/apitokens"
	"github.com/keelson-dev/keelson/auth/auditlog"
	"github.com/keelson-dev/keelson/auth/teams"
	"github.com/keelson-dev/keelson/plans"
	"github.com/keelson-dev/keelson/platform"
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
		DB: a.DB, Auth: a.Authn, Users: teamUsers{a.Auth}, Plans: teamPlans{a.Plans},
		Projects: projects.Counts{DB: a.DB}, Audit: auditlog.Recorder{}, Mailer: teamMailer{a.Mailer}, Limiter: a.Auth, Dependents: a.APITokens,
		FrontendURL: a.Cfg.FrontendURL, InviteTTL: a.Cfg.InviteTTL, Log: a.Log.With("module", "teams"),
	})
	if err != nil {
		return err
	}
	a.add(svc)
	a.Teams = svc
	return nil
}

// teamUsers adapts the auth module to teams.Users.
type teamUsers struct{ s *auth.Service }

func (u teamUsers) UserByID(ctx context.Context, id string) (*teams.User, error) {
	x, err := u.s.UserByID(ctx, id)
	if err != nil {
		return nil, err
	}
	return &teams.User{ID: x.ID, Email: x.Email, EmailVerified: x.EmailVerified}, nil
}

// teamMailer adapts the server's mailer to teams.Mailer.
type teamMailer struct{ m auth.Mailer }

func (m teamMailer) Send(ctx context.Context, to, subject, text string) error {
	return m.m.Send(ctx, auth.Mail{To: to, Subject: subject, Text: text})
}

// teamPlans adapts the plans module to teams.Plans.
type teamPlans struct{ s *plans.Service }

func (p teamPlans) TeamPlan(ctx context.Context, teamID, ownerID string) (string, bool, error) {
	pl, err := p.s.TeamPlan(ctx, teamID, ownerID)
	if err != nil {
		return "", false, err
	}
	return pl.Name, pl.TeamMembers, nil
}

// accountPlan is the plan of an owner account: a user's account plan, or a
// team's plan (its own, else its first owner's account plan).
func accountPlan(ctx context.Context, p *plans.Service, t *teams.Service, accountID string) (*plans.Plan, error) {
	if t != nil {
		owner, err := t.TeamOwner(ctx, accountID)
		if err == nil {
			return p.TeamPlan(ctx, accountID, owner)
		}
		if !errors.Is(err, platform.ErrNotFound) {
			return nil, err
		}
	}
	return p.AccountPlan(ctx, accountID)
}

var (
	_ teams.Limiter      = (*auth.Service)(nil)
	_ teams.Dependents   = (*apitokens.Service)(nil)
	_ plans.Teams        = teams.Members{}
	_ teams.Projects     = projects.Counts{}
	_ plans.UsageChecker = projects.Counts{}
)
