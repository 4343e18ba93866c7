package main

import (
	"context"

	"github.com/keelson-dev/keelson/codehost/deployhooks"
	"github.com/keelson-dev/keelson/deployments"
)

// wireDeployHooks builds the deploy-hook module: secret URLs under
// KEELSON_PUBLIC_URL/deploy-hooks/ that deploy a project's branch head, on
// the projects module (ownership) and the deployments module (the same
// Trigger, and so the same quotas, as any deployment), both built before it.
func (a *App) buildDeployHooks(context.Context) error {
	svc, err := deployhooks.New(deployhooks.Deps{
		DB: a.DB, Auth: a.Authn, Projects: domainAccess{a.Projects}, Deployer: hookDeployer{a.Deployments},
		PublicURL: a.Cfg.PublicURL, Audit: a.AuditLog, Log: a.Log.With("module", "deployhooks"),
	})
	if err != nil {
		return err
	}
	a.add(svc)
	return nil
}

// hookDeployer adapts the deployments module to deployhooks.Deployer.
type hookDeployer struct{ s *deployments.Service }

func (d hookDeployer) Trigger(ctx context.Context, projectID, ownerID, reason string) (string, error) {
	dep, err := d.s.Trigger(ctx, deployments.TriggerParams{ProjectID: projectID, OwnerID: ownerID, Reason: reason})
	if err != nil {
		return "", err
	}
	return dep.ID, nil
}

var (
	_ deployhooks.Projects = domainAccess{}
	_ deployhooks.Deployer = hookDeployer{}
)
