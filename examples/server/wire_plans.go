package main

import (
	"context"

	"github.com/keelson-dev/keelson/auth/teams"
	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/plans"
)

// buildPlans builds the plans module (GET public, writes ADMIN) and seeds one
// plan per tier on first start. Whether a plan is in use is answered by the
// projects module, built after this one: the edge is bound in NewApp's
// second phase; so is the edge that tells the projects module's list cache
// of plan and account plan changes (planChanges).
func (a *App) buildPlans(ctx context.Context) error {
	svc, err := plans.New(plans.Deps{
		DB:      a.DB,
		Auth:    a.Authn,
		Logger:  a.Log.With("module", "plans"),
		Usage:   planUsage{a.edges},
		Changes: planChanges{a.edges},
		Teams:   planTeams{a.edges},
		Audit:   a.AuditLog,
	})
	if err != nil {
		return err
	}
	a.add(svc)
	a.Plans = svc
	return nil
}

// planUsage answers plans.UsageChecker through the projects module.
type planUsage struct{ e *edges }

func (u planUsage) PlanInUse(ctx context.Context, name string) (bool, error) {
	return u.e.projects.PlanInUse(ctx, name)
}

// planChanges forwards plans.ChangeObserver to the projects module, whose
// cached lists show account plan names, and to the bandwidth module, which
// checks the projects it refuses again. (Other replicas hear of the same
// changes through plans.ChangeChannel: projects.Deps.PlanChannel.)
type planChanges struct{ e *edges }

func (c planChanges) AccountPlanChanged(userID string) {
	if c.e.projects != nil {
		c.e.projects.AccountPlanChanged(userID)
	}
	if c.e.bandwidth != nil {
		c.e.bandwidth.PlanChanged()
	}
}

func (c planChanges) PlansChanged() {
	if c.e.projects != nil {
		c.e.projects.PlansChanged()
	}
	if c.e.bandwidth != nil {
		c.e.bandwidth.PlanChanged()
	}
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
