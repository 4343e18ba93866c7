package main

import (
	"context"
	"fmt"

	"github.com/keelson-dev/keelson/plans"
	"github.com/keelson-dev/keelson/projects"
)

// wireProjects builds the projects module on the plans module (account plans
// and plan limits) and the deployments module (teardown of deleted projects,
// monthly deployment counts). Deployments is wired after projects, so it
// plugs in through a.ProjectTeardown and a.DeploymentCounter, looked up when
// used. At start, teardowns interrupted by a restart resume; at shutdown the
// ones in flight get the shutdown grace period, then resume at next start.
func (a *App) wireProjects(ctx context.Context) error {
	log := a.Log.With("module", "projects")
	svc, err := projects.Register(a.API, projects.Deps{
		DB:              a.DB,
		Auth:            a.Authn,
		Sealer:          a.Sealer,
		Plans:           planSource{a.Plans},
		Teardown:        projects.TeardownFunc(a.teardownProject),
		Deployments:     deploymentCounter{a},
		Regions:         a.Cfg.Regions,
		AllowLocalRepos: a.Cfg.AllowLocalRepos,
		Logger:          log,
	})
	if err != nil {
		return err
	}
	a.migrate(projects.Migrations())
	a.Projects = svc
	a.onStart(svc.Start)
	a.onClose(svc.Close)
	return nil
}

// teardownProject removes a deleted project's deployments (apps, routes,
// workspaces, logs) through the deployments module.
func (a *App) teardownProject(ctx context.Context, projectID string) error {
	if a.ProjectTeardown == nil {
		// TODO(deployments wiring): set a.ProjectTeardown in wire_deployments.go.
		// Until then there is nothing deployed to tear down.
		a.Log.WarnContext(ctx, "no deployments module wired: project teardown only marks the project deleted",
			"module", "projects", "project_id", projectID)
		return nil
	}
	err := a.ProjectTeardown.TeardownProject(ctx, projectID)
	if err != nil && a.ShutdownCtx.Err() != nil {
		// Deployments may have shut down first: this is an interruption, not a
		// failure; the project stays DELETING and resumes at the next start.
		return fmt.Errorf("%w: server shutting down: %w", context.Canceled, err)
	}
	return err
}

// planSource adapts the plans module to projects.PlanSource.
type planSource struct{ s *plans.Service }

func (p planSource) PlanByName(ctx context.Context, name string) (*projects.Plan, error) {
	pl, err := p.s.PlanByName(ctx, name)
	if err != nil {
		return nil, err
	}
	return toProjectsPlan(pl), nil
}

func (p planSource) AccountPlan(ctx context.Context, userID string) (*projects.Plan, error) {
	pl, err := p.s.AccountPlan(ctx, userID)
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
		PriorityBuilds: p.PriorityBuilds,
	}
}

// deploymentCounter reads a.DeploymentCounter when GET /usage asks.
type deploymentCounter struct{ a *App }

func (c deploymentCounter) DeploymentsThisMonth(ctx context.Context, ownerID string) (map[string]int, error) {
	if c.a.DeploymentCounter == nil {
		return nil, projects.ErrNotCounted
	}
	return c.a.DeploymentCounter.DeploymentsThisMonth(ctx, ownerID)
}
