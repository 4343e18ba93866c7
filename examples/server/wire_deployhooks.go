package main

import (
	"context"

	"github.com/keelson-dev/keelson/deployhooks"
	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/platform"
)

// wireDeployHooks builds the deploy-hook module: secret URLs under
// KEELSON_PUBLIC_URL/deploy-hooks/ that deploy a project's branch head, on
// the projects module (ownership) and the deployments module (the same
// Trigger, and so the same quotas, as any deployment).
func (a *App) wireDeployHooks(context.Context) error {
	svc, err := deployhooks.New(deployhooks.Deps{
		DB: a.DB, Auth: a.Authn, Projects: hookProjects{a}, Deployer: hookDeployer{a},
		PublicURL: a.Cfg.PublicURL, Log: a.Log.With("module", "deployhooks"),
	})
	if err != nil {
		return err
	}
	if err := svc.Register(a.API); err != nil {
		return err
	}
	a.migrate(deployhooks.Migrations())
	return nil
}

// hookProjects adapts the projects module to deployhooks.Projects.
type hookProjects struct{ a *App }

func (p hookProjects) CheckOwner(ctx context.Context, ownerID, projectID string) error {
	if p.a.Projects == nil {
		return platform.Unavailable("the projects module is not wired")
	}
	_, err := p.a.Projects.Get(ctx, ownerID, projectID)
	return err
}

// hookDeployer adapts the deployments module to deployhooks.Deployer.
type hookDeployer struct{ a *App }

func (d hookDeployer) Trigger(ctx context.Context, projectID, ownerID, reason string) (string, error) {
	if d.a.Deployments == nil {
		return "", platform.Unavailable("the deployments module is not wired")
	}
	dep, err := d.a.Deployments.Trigger(ctx, deployments.TriggerParams{ProjectID: projectID, OwnerID: ownerID, Reason: reason})
	if err != nil {
		return "", err
	}
	return dep.ID, nil
}

var (
	_ deployhooks.Projects = hookProjects{}
	_ deployhooks.Deployer = hookDeployer{}
)
