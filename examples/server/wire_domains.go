package main

import (
	"context"

	"github.com/keelson-dev/keelson/examples/glue"
	"github.com/keelson-dev/keelson/projects"
	"github.com/keelson-dev/keelson/projects/domains"
)

// buildDomains builds the custom-domain module on the projects module
// (ownership, slug), the plans module (customDomains of the project's
// effective plan) and the auth module's mailer (notices to owners), all
// built before it. Its periodic DNS check starts with the modules and stops
// at shutdown. It follows the projects module's events: a deleted project's
// domains go (before deployments tears the rest down: deployments is built,
// and subscribes, after it), a moved project's follow it. The ingress,
// built with deployments, subscribes to its ActiveChanged.
func (a *App) buildDomains(context.Context) error {
	svc, err := domains.New(domains.Deps{
		DB: a.DB, Auth: a.Authn,
		Projects:   glue.DomainProjects{Projects: a.Projects, Plans: a.Plans},
		Access:     glue.ProjectOwner{Projects: a.Projects},
		Audit:      a.AuditLog,
		Notifier:   glue.MailNotifier{Users: a.Auth, Mailer: a.Mailer, Teams: a.Teams},
		AppsDomain: a.Cfg.AppsDomain, PublicURL: a.Cfg.PublicURL, FrontendURL: a.Cfg.FrontendURL,
		IngressIPs: a.Cfg.IngressIPs, Resolvers: a.Cfg.DNSResolvers,
		MaxPerProject: a.Cfg.MaxDomainsPerProject, CheckInterval: a.Cfg.DomainCheckInterval,
		Log: a.Log.With("module", "domains"),
	})
	if err != nil {
		return err
	}
	ev := a.Projects.Events()
	ev.Deleted.Subscribe(func(ctx context.Context, e projects.Deleted) error {
		return a.shutdownError(svc.DeleteProject(ctx, e.ProjectID))
	})
	ev.OwnerChanged.Subscribe(func(ctx context.Context, e projects.OwnerChanged) error {
		return svc.ProjectOwnerChanged(ctx, e.ProjectID, e.OwnerID)
	})
	a.add(svc)
	a.Domains = svc
	return nil
}

var (
	_ domains.Projects = glue.DomainProjects{}
	_ domains.Access   = glue.ProjectOwner{}
	_ domains.Notifier = glue.MailNotifier{}
)
