package main

import (
	"context"

	"github.com/keelson-dev/keelson/auth/auditlog"
	"github.com/keelson-dev/keelson/auth/teams"
	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/plans"
	"github.com/keelson-dev/keelson/projects"
)

// buildPlans builds the plans module (GET public, writes ADMIN) and seeds one
// plan per tier on first start. Whether a plan is in use, and who owns a
// team, it reads from the projects and teams tables (projects.Counts,
// teams.Members): both modules are built after it, on it. It publishes every
// plan change (Service.Changed); projects' list cache and the bandwidth
// limits subscribe when they are built.
func (a *App) buildPlans(ctx context.Context) error {
	svc, err := plans.New(plans.Deps{
		DB:     a.DB,
		Auth:   a.Authn,
		Logger: a.Log.With("module", "plans"),
		Usage:  projects.Counts{DB: a.DB},
		Teams:  teams.Members{DB: a.DB},
		Audit:  auditlog.Recorder{},
	})
	if err != nil {
		return err
	}
	a.add(svc)
	a.Plans = svc
	return nil
}

// buildShares gives the engines each owner's share of the build slots from
// their account plan: KEELSON_BUILDS_PER_USER at once, twice that on a plan
// with priorityBuilds (whose builds are also taken first); an account on a
// FREE-tier plan counts against KEELSON_FREE_BUILD_SLOTS. An engine that
// cannot read the plan uses the default share, counted as FREE.
type buildShares struct {
	plans *plans.Service
	teams *teams.Service
	per   int // KEELSON_BUILDS_PER_USER or its default
}

func (b buildShares) BuildShare(ctx context.Context, ownerID string) (deployments.Share, error) {
	p, err := accountPlan(ctx, b.plans, b.teams, ownerID)
	if err != nil {
		return deployments.Share{}, err
	}
	sh := deployments.Share{Max: b.per, Priority: p.PriorityBuilds, Free: p.Tier == plans.TierFree}
	if p.PriorityBuilds {
		sh.Max = 2 * b.per
	}
	return sh, nil
}
