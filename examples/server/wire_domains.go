package main

import (
	"context"
	"fmt"

	"github.com/keelson-dev/keelson/auth"
	"github.com/keelson-dev/keelson/auth/teams"
	"github.com/keelson-dev/keelson/plans"
	"github.com/keelson-dev/keelson/platform"
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
		Projects:   domainProjects{a.Projects, a.Plans},
		Access:     domainAccess{a.Projects},
		Audit:      a.AuditLog,
		Notifier:   mailNotifier{a.Auth, a.Mailer, a.Teams},
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

// domainProjects adapts the projects and plans modules to domains.Projects.
type domainProjects struct {
	p     *projects.Service
	plans *plans.Service
}

func (d domainProjects) Project(ctx context.Context, ownerID, projectID string) (*domains.Project, error) {
	// The effective plan (a project's own plan, capped by its owner's);
	// ErrNotFound once the project is being deleted or belongs to another
	// owner account.
	info, err := d.p.ProjectForDeploy(ctx, projectID)
	if err != nil {
		return nil, err
	}
	if info.OwnerID != ownerID {
		return nil, platform.NotFound("project not found")
	}
	pl, err := d.plans.PlanByName(ctx, info.PlanName)
	if err != nil {
		// %v: a missing plan must not read as a missing project (whose
		// domains the periodic check deletes).
		return nil, fmt.Errorf("plan %q of project %s: %v", info.PlanName, projectID, err)
	}
	return &domains.Project{Slug: info.Slug, PlanName: pl.Name, CustomDomains: pl.CustomDomains}, nil
}

// domainAccess adapts the projects module's authorisation to domains.Access
// and deployhooks.Projects.
type domainAccess struct{ s *projects.Service }

func (d domainAccess) Authorize(ctx context.Context, userID, projectID string, perm platform.Permission) (string, error) {
	acc, err := d.s.Authorize(ctx, userID, projectID, perm)
	if err != nil {
		return "", err
	}
	return acc.OwnerID, nil
}

// mailNotifier mails a user through the auth module's mailer (SMTP, or the
// log without KEELSON_SMTP_URL); an owner account that is a team is told
// through its first owner.
type mailNotifier struct {
	users  *auth.Service
	mailer auth.Mailer
	teams  *teams.Service
}

func (n mailNotifier) Notify(ctx context.Context, userID, subject, text string) error {
	if owner, err := n.teams.TeamOwner(ctx, userID); err == nil {
		userID = owner
	}
	u, err := n.users.UserByID(ctx, userID)
	if err != nil {
		return fmt.Errorf("user %s: %v", userID, err)
	}
	return n.mailer.Send(ctx, auth.Mail{To: u.Email, Subject: subject, Text: text})
}

var (
	_ domains.Projects = domainProjects{}
	_ domains.Access   = domainAccess{}
	_ domains.Notifier = mailNotifier{}
)
