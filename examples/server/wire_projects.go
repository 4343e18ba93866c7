package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/keelson-dev/keelson/auth/teams"
	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/plans"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/projects"
	"github.com/keelson-dev/keelson/projects/slugs"
)

// buildProjects builds the projects module on the plans module (account
// plans and plan limits) and the deployments module (teardown of deleted
// projects, monthly deployment counts), which is built after it: that edge is
// bound in NewApp's second phase. At start, teardowns interrupted by a
// restart resume; at shutdown the ones in flight get the shutdown grace
// period, then resume at next start.
func (a *App) buildProjects(ctx context.Context) error {
	svc, err := projects.New(projects.Deps{
		DB:           a.DB,
		Auth:         a.Authn,
		Sealer:       a.Sealer,
		Plans:        planSource{a.Plans, a.Teams},
		Teams:        a.Teams,
		Audit:        a.AuditLog,
		OwnerChanges: ownerChanges{a.edges},
		Teardown:     projectTeardown{e: a.edges, shutdown: a.ShutdownCtx},
		Deployments:  deploymentCounter{a.edges},
		Logs:         deploymentCounter{a.edges},
		Bandwidth:    bandwidthCounter{a.edges},
		ProjectPlanChanged: func(string) {
			if a.edges.bandwidth != nil {
				a.edges.bandwidth.PlanChanged()
			}
		},
		HTTPSRedirectChanged: func(id string) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			a.activeChanged(ctx, id)
		},
		CheckHost: func(ctx context.Context, id string) error {
			if _, err := a.Hosts.Get(ctx, id); errors.Is(err, platform.ErrNotFound) {
				return platform.Invalidf("host %q is not registered (GET /hosts lists the hosts)", id)
			} else if err != nil {
				return err
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
	a.add(svc)
	a.Projects = svc
	return nil
}

// projectTeardown removes a deleted project's custom domains (first, so
// none of its hostnames is an active domain any more) and its deployments
// (apps, routes, workspaces, logs) through their modules.
type projectTeardown struct {
	e        *edges
	shutdown context.Context // App.ShutdownCtx
}

func (t projectTeardown) TeardownProject(ctx context.Context, projectID string) error {
	err := t.e.domains.DeleteProject(ctx, projectID)
	if err == nil {
		err = t.e.deployments.TeardownProject(ctx, projectID)
	}
	if err != nil && t.shutdown.Err() != nil {
		// Deployments may have shut down first: this is an interruption, not a
		// failure; the project stays DELETING and resumes at the next start.
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

// ownerChanges moves a project's deployments and domains with it to its
// new owner account (projects.OwnerChanges).
type ownerChanges struct{ e *edges }

func (o ownerChanges) ProjectOwnerChanged(ctx context.Context, projectID, ownerID string) error {
	if err := o.e.deployments.ProjectOwnerChanged(ctx, projectID, ownerID); err != nil {
		return err
	}
	return o.e.domains.ProjectOwnerChanged(ctx, projectID, ownerID)
}

// deploymentCounter answers GET /usage's monthly counts through the
// deployments module.
type deploymentCounter struct{ e *edges }

// LogUsage answers GET /usage's log figures through the deployments module.
func (c deploymentCounter) LogUsage(ctx context.Context, ownerID string) (int64, int64, error) {
	return c.e.deployments.LogUsage(ctx, ownerID)
}

func (c deploymentCounter) DeploymentsThisMonth(ctx context.Context, ownerID string) (map[string]int, error) {
	return c.e.deployments.DeploymentsThisMonth(ctx, ownerID)
}

var (
	_ projects.Teardown          = (*deployments.Service)(nil)
	_ projects.DeploymentCounter = (*deployments.Service)(nil)
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
