package main

import (
	"context"
	"fmt"
	"time"

	"github.com/keelson-dev/keelson/auth/teams"
	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/bandwidth"
	"github.com/keelson-dev/keelson/deployments/hosts"
	"github.com/keelson-dev/keelson/plans"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/events"
	"github.com/keelson-dev/keelson/projects"
	"github.com/keelson-dev/keelson/projects/slugs"
)

// buildProjects builds the projects module on the plans, teams and audit
// log modules, built before it; it follows plan changes (plans' Changed
// event) in its list cache. GET /usage's figures of the modules built after
// it come from their tables (deployments.Usage, bandwidth.Usage), and a host
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
		Plans:       planSource{a.Plans, a.Teams},
		Teams:       a.Teams,
		Audit:       a.AuditLog,
		Deployments: deployments.Usage{DB: a.DB, AccountBudget: logBudget(a.Cfg.LogBudgetMB)},
		Logs:        deployments.Usage{DB: a.DB, AccountBudget: logBudget(a.Cfg.LogBudgetMB)},
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

// planSource adapts the plans module to projects.PlanSource; an account
// is a user or a team (whose plan is its own, else its owner's).
type planSource struct {
	s     *plans.Service
	teams *teams.Service
}

func (p planSource) PlanByName(ctx context.Context, name string) (*projects.Plan, error) {
	pl, err := p.s.PlanByName(ctx, name)
	if err != nil {
		return nil, err
	}
	return toProjectsPlan(pl), nil
}

func (p planSource) AccountPlan(ctx context.Context, accountID string) (*projects.Plan, error) {
	pl, err := accountPlan(ctx, p.s, p.teams, accountID)
	if err != nil {
		return nil, err
	}
	return toProjectsPlan(pl), nil
}

func toProjectsPlan(p *plans.Plan) *projects.Plan {
	return &projects.Plan{
		Name: p.Name, Tier: string(p.Tier), TierRank: p.Tier.Rank(),
		MaxProjects: p.MaxProjects, MaxDeployments: p.MaxDeployments, MaxMemoryMi: p.MaxMemoryMi,
		MaxCpuM: p.MaxCpuM, MaxStorageGi: p.MaxStorageGi, BuildTimeoutMins: p.BuildTimeoutMins,
		PriorityBuilds: p.PriorityBuilds, Public: p.Public, MaxBandwidthGb: p.MaxBandwidthGb,
	}
}

var (
	_ projects.DeploymentCounter = deployments.Usage{}
	_ projects.LogCounter        = deployments.Usage{}
	_ projects.BandwidthCounter  = bandwidth.Usage{}
)

// projectAccess adapts the projects module's one authorisation point to
// deployments.Access.
type projectAccess struct{ s *projects.Service }

func (p projectAccess) Authorize(ctx context.Context, userID, projectID string, perm platform.Permission) error {
	_, err := p.s.Authorize(ctx, userID, projectID, perm)
	return err
}

func (p projectAccess) Accounts(ctx context.Context, userID string) ([]string, error) {
	return p.s.Accounts(ctx, userID)
}

// deploySource adapts the projects module to deployments.ProjectSource.
type deploySource struct{ s *projects.Service }

func (s deploySource) ProjectForDeploy(ctx context.Context, projectID string) (*deployments.DeploySpec, error) {
	p, err := s.s.ProjectForDeploy(ctx, projectID)
	if err != nil {
		return nil, err
	}
	env := make([]deployments.EnvVar, len(p.Env))
	for i, e := range p.Env {
		env[i] = deployments.EnvVar{Key: e.Key, Value: e.Value, Secret: e.Secret}
	}
	return &deployments.DeploySpec{
		OwnerID: p.OwnerID, Slug: p.Slug, Name: p.Name, RepoURL: p.RepoURL, Branch: p.Branch,
		Framework: p.Framework, Port: p.Port, BuildCommand: p.BuildCommand, StartCommand: p.StartCommand,
		Region: p.Region, Env: env,
		Limits: deployments.Limits{
			BuildTimeout: time.Duration(p.BuildTimeoutMins) * time.Minute,
			MemoryMi:     p.MaxMemoryMi, CPUMillis: p.MaxCpuM, StorageGi: p.MaxStorageGi, Priority: p.PriorityBuilds,
		},
		MaxDeploymentsPerMonth: p.MaxDeployments, PlanName: p.PlanName,
	}, nil
}
