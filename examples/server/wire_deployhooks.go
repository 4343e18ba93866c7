package main

import (
	"context"

	"github.com/keelson-dev/keelson/codehost/deployhooks"
	"github.com/keelson-dev/keelson/examples/glue"
)

// wireDeployHooks builds the deploy-hook module: secret URLs under
// KEELSON_PUBLIC_URL/deploy-hooks/ that deploy a project's branch head, on
// the projects module (ownership) and the deployments module (the same
// Trigger, and so the same quotas, as any deployment), both built before it.
func (a *App) buildDeployHooks(context.Context) error {
	svc, err := deployhooks.New(deployhooks.Deps{
		DB: a.DB, Auth: a.Authn, Projects: glue.ProjectOwner{Projects: a.Projects}, Deployer: glue.HookDeployer{Deployments: a.Deployments},
		PublicURL: a.Cfg.PublicURL, Audit: a.AuditLog, Log: a.Log.With("module", "deployhooks"),
	})
	if err != nil {
		return err
	}
	a.add(svc)
	return nil
}

var (
	_ deployhooks.Projects = glue.ProjectOwner{}
	_ deployhooks.Deployer = glue.HookDeployer{}
)
