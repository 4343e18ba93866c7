package main

import (
	"context"
	"fmt"

	"github.com/keelson-dev/keelson/deployments/bandwidth"
	"github.com/keelson-dev/keelson/deployments/fleet"
	"github.com/keelson-dev/keelson/deployments/hosts"
	"github.com/keelson-dev/keelson/examples/glue"
	"github.com/keelson-dev/keelson/plans"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/events"
	"github.com/keelson-dev/keelson/projects"
	"github.com/keelson-dev/keelson/projects/slugs"
)

// buildProjects builds the projects module on the plans, teams and audit
// log modules, built before it; it follows plan changes (plans' Changed
// event) in its list cache. GET /usage's figures of the modules built after
// it come from their tables (fleet.Usage, bandwidth.Usage), and a host
// pin is checked in the hosts register's (hosts.Registered). What it
// publishes (a project deleted, moved, its plan or httpsRedirect changed)
// the later modules subscribe to. At start, teardowns interrupted by a
// restart resume; at shutdown the ones in flight get the shutdown grace
// period, then resume at next start.
func (a *App) buildProjects(ctx context.Context) error {
	svc, err := projects.New(projects.Deps{
		DB:          a.DB,
		Auth:        a.Authn,
		Sealer:      a.Sealer,
		Plans:       glue.PlanSource{Plans: a.Plans, Teams: a.Teams},
		Teams:       a.Teams,
		Audit:       a.AuditLog,
		Deployments: fleet.Usage{DB: a.DB, AccountBudget: logBudget(a.Cfg.LogBudgetMB)},
		Logs:        fleet.Usage{DB: a.DB, AccountBudget: logBudget(a.Cfg.LogBudgetMB)},
		Bandwidth:   bandwidth.Usage{DB: a.DB, BytesPerGB: a.Cfg.bandwidthBytesPerGB},
		CheckHost: func(ctx context.Context, id string) error {
			if ok, err := hosts.Registered(ctx, a.DB, id); err != nil {
				return err
			} else if !ok {
				return platform.Invalidf("host %q is not registered (GET /hosts lists the hosts)", id)
			}
			return nil
		},
		Regions:         a.Cfg.Regions,
		AllowLocalRepos: a.Cfg.AllowLocalRepos,
		ReservedSlugs:   slugs.OfHosts(a.Cfg.AppsDomain, a.Cfg.PublicURL, a.Cfg.FrontendURL),
		PlanChannel:     plans.ChangeChannel,
		Logger:          a.Log.With("module", "projects"),
	})
	if err != nil {
		return err
	}
	a.Plans.Changed().Subscribe(events.Notify(func(e plans.PlanChanged) {
		if e.UserID == "" {
			svc.PlansChanged()
		} else {
			svc.AccountPlanChanged(e.UserID)
		}
	}))
	a.add(svc)
	a.Projects = svc
	return nil
}

// shutdownError marks err as an interruption when the server is shutting
// down (ShutdownCtx is done): a module may have shut down first, and the
// project's teardown then stays DELETING and resumes at the next start.
func (a *App) shutdownError(err error) error {
	if err != nil && a.ShutdownCtx.Err() != nil {
		return fmt.Errorf("%w: server shutting down: %w", context.Canceled, err)
	}
	return err
}

var (
	_ projects.DeploymentCounter = fleet.Usage{}
	_ projects.LogCounter        = fleet.Usage{}
	_ projects.BandwidthCounter  = bandwidth.Usage{}
)
