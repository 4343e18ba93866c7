package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
	"github.com/keelson-dev/keelson/auth"
	"github.com/keelson-dev/keelson/auth/apitokens"
	"github.com/keelson-dev/keelson/auth/auditlog"
	"github.com/keelson-dev/keelson/auth/oauth"
	"github.com/keelson-dev/keelson/auth/teams"
	"github.com/keelson-dev/keelson/codehost"
	"github.com/keelson-dev/keelson/codehost/deployhooks"
	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/assemble"
	"github.com/keelson-dev/keelson/deployments/bandwidth"
	"github.com/keelson-dev/keelson/deployments/fleet"
	"github.com/keelson-dev/keelson/deployments/ingress"
	"github.com/keelson-dev/keelson/examples/glue"
	"github.com/keelson-dev/keelson/plans"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/apidocs"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/platform/events"
	"github.com/keelson-dev/keelson/platform/httpx"
	"github.com/keelson-dev/keelson/platform/secret"
	"github.com/keelson-dev/keelson/projects"
	"github.com/keelson-dev/keelson/projects/domains"
	"github.com/keelson-dev/keelson/scaffold"
	"github.com/uptrace/bun"
)

// FullOptions are the full service's options: Options, and where the apps
// run. The service uses the plain-process runtime and the embedded engine.
type FullOptions struct {
	Options
	AppsDomain      string // apps answer at <slug>.<AppsDomain> on the ingress
	PublicURL       string // the API's own URL: deploy hooks' URLs
	FrontendURL     string // where mails' links point
	AllowLocalRepos bool   // file:// repositories (development and tests)
}

// Full is the full service: the API, the apps' ingress, and Close.
type Full struct {
	API, Ingress http.Handler
	Close        func()
}

// newFullService builds every module the reference server has, in
// dependency order, and runs them as one list (platform.Assemble). Each
// module gets the services built before it; glue adapts one module's
// service to another's interface; what a module asks of one built later it
// reads from that one's tables (teams.Members, projects.Counts, ...); what
// it tells one built later is an event the later one subscribes to.
func newFullService(ctx context.Context, o FullOptions) (*Full, error) {
	sealer, err := secret.New(o.SealKey)
	if err != nil {
		return nil, err
	}
	bdb, err := db.Open(ctx, db.Options{URL: o.DatabaseURL, DataDir: o.DataDir})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	api := humago.New(mux, platform.APIConfig("My platform", "1.0.0"))
	meter := ingress.NewMeter() // the apps' bytes, for the bandwidth module
	router, err := ingress.New(ingress.Config{AppsDomain: o.AppsDomain, Meter: meter, Logger: o.Log})
	if err != nil {
		bdb.Close()
		return nil, err
	}
	// First in the list, so closed last: the database, then the ingress.
	mods := []platform.Module{platform.Part{
		Routes:  func(api huma.API) error { return apidocs.Register(api, apidocs.Options{}) },
		OnClose: func(context.Context) error { router.Close(); return bdb.Close() },
	}}
	core, err := buildCore(bdb, sealer, o)
	if err == nil {
		mods = append(mods, core.mods...)
		var apps []platform.Module
		if apps, err = buildApps(ctx, bdb, router, meter, core, o); err == nil {
			mods = append(mods, apps...)
		}
	}
	if err != nil {
		router.Close()
		bdb.Close()
		return nil, err
	}
	asm, err := platform.Assemble(ctx, api, db.Migrator(bdb), mods...)
	if err != nil {
		return nil, err
	}
	return &Full{API: httpx.Middleware(o.Log, mux), Ingress: router, Close: func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = asm.Close(cctx)
	}}, nil
}

// core are the account, plan, team and project modules.
type core struct {
	mods     []platform.Module
	authn    platform.Authenticator // sessions and API tokens
	auth     *auth.Service
	mailer   auth.Mailer
	plans    *plans.Service
	teams    *teams.Service
	audit    *auditlog.Service
	projects *projects.Service
}

func buildCore(bdb *bun.DB, sealer *secret.Sealer, o FullOptions) (c core, err error) {
	c.mailer = auth.LogMailer{Log: o.Log}
	rec := auditlog.Recorder{} // the audit log's rows, for the modules built before it
	if c.auth, err = auth.New(auth.Deps{DB: bdb, Sealer: sealer, Mailer: c.mailer, Audit: rec, JWTSecret: []byte(o.JWTSecret), Logger: o.Log}); err != nil {
		return c, err
	}
	oauthSvc, err := oauth.New(oauth.Deps{DB: bdb, Accounts: c.auth, Authn: c.auth, Sealer: sealer, Logger: o.Log})
	if err != nil {
		return c, err
	}
	tokens, err := apitokens.New(apitokens.Deps{DB: bdb, Auth: c.auth, Users: glue.TokenUsers{Auth: c.auth}, Teams: teams.Members{DB: bdb}, Audit: rec})
	if err != nil {
		return c, err
	}
	c.authn = glue.Bearer{Sessions: c.auth, Tokens: tokens}
	if c.plans, err = plans.New(plans.Deps{DB: bdb, Auth: c.authn, Usage: projects.Counts{DB: bdb}, Teams: teams.Members{DB: bdb}, Audit: rec}); err != nil {
		return c, err
	}
	if c.teams, err = teams.New(teams.Deps{DB: bdb, Auth: c.authn, Users: glue.TeamUsers{Auth: c.auth}, Plans: glue.TeamPlans{Plans: c.plans},
		Projects: projects.Counts{DB: bdb}, Mailer: glue.TeamMailer{Mailer: c.mailer}, Dependents: tokens, Audit: rec, FrontendURL: o.FrontendURL}); err != nil {
		return c, err
	}
	if c.audit, err = auditlog.New(auditlog.Deps{DB: bdb, Auth: c.auth, Teams: c.teams}); err != nil {
		return c, err
	}
	if c.projects, err = projects.New(projects.Deps{DB: bdb, Auth: c.authn, Sealer: sealer, Plans: glue.PlanSource{Plans: c.plans, Teams: c.teams},
		Teams: c.teams, Audit: c.audit, AllowLocalRepos: o.AllowLocalRepos,
		Deployments: fleet.Usage{DB: bdb}, Logs: fleet.Usage{DB: bdb}, Bandwidth: bandwidth.Usage{DB: bdb}}); err != nil {
		return c, err
	}
	c.plans.Changed().Subscribe(events.Notify(func(e plans.PlanChanged) {
		if e.UserID == "" {
			c.projects.PlansChanged()
		} else {
			c.projects.AccountPlanChanged(e.UserID)
		}
	}))
	c.mods = []platform.Module{c.auth, oauthSvc, tokens, c.plans, c.teams, c.audit, c.projects}
	return c, nil
}

// buildApps builds the modules that run and serve apps, on core.
func buildApps(ctx context.Context, bdb *bun.DB, router *ingress.Router, meter *ingress.Meter, c core, o FullOptions) ([]platform.Module, error) {
	notify := glue.MailNotifier{Users: c.auth, Mailer: c.mailer, Teams: c.teams}
	doms, err := domains.New(domains.Deps{DB: bdb, Auth: c.authn, Projects: glue.DomainProjects{Projects: c.projects, Plans: c.plans},
		Access: glue.ProjectOwner{Projects: c.projects}, Audit: c.audit, Notifier: notify, AppsDomain: o.AppsDomain,
		PublicURL: o.PublicURL, FrontendURL: o.FrontendURL, Log: o.Log})
	if err != nil {
		return nil, err
	}
	var hub *codehost.Service // built after deployments, which asks it for clone credentials
	dep, err := assemble.New(ctx, assemble.Config{Runtime: assemble.RuntimeConfig{Kind: assemble.RuntimeProcess,
		DataDir: o.DataDir, AllowLocalRepos: o.AllowLocalRepos}}, assemble.Deps{Ingress: router, Logger: o.Log,
		Shares: glue.BuildShares{Plans: c.plans, Teams: c.teams, PerUser: 2}, PinnedHost: c.projects.PinnedHost,
		Service: deployments.Deps{DB: bdb, Auth: c.authn, Projects: glue.DeploySource{Projects: c.projects, DB: bdb}, LogTokenKey: derive(o.JWTSecret, "log tokens"),
			Access: glue.ProjectAccess{Projects: c.projects}, Git: glue.CodehostGit{Codehost: &hub}, Audit: c.audit}})
	if err != nil {
		return nil, err
	}
	// A deleted project loses its domains, then its deployments; a moved
	// one takes them along (subscribed in build order).
	for _, follow := range []struct {
		del   func(context.Context, string) error
		owner func(context.Context, string, string) error
	}{{doms.DeleteProject, doms.ProjectOwnerChanged}, {dep.Service.TeardownProject, dep.Service.ProjectOwnerChanged}} {
		c.projects.Events().Deleted.Subscribe(func(ctx context.Context, e projects.Deleted) error { return follow.del(ctx, e.ProjectID) })
		c.projects.Events().OwnerChanged.Subscribe(func(ctx context.Context, e projects.OwnerChanged) error {
			return follow.owner(ctx, e.ProjectID, e.OwnerID)
		})
	}
	if hub, err = codehost.New(codehost.Deps{DB: bdb, Auth: c.authn, Projects: glue.ProjectRepos{Projects: c.projects}, Secrets: c.projects,
		Deployer: glue.PushDeployer{Deployments: dep.Service}, Missing: []string{"the code-host app's settings"},
		StateKey: derive(o.JWTSecret, "codehost state"), FrontendURL: o.FrontendURL, Log: o.Log}); err != nil {
		return nil, err
	}
	hooks, err := deployhooks.New(deployhooks.Deps{DB: bdb, Auth: c.authn, Projects: glue.ProjectOwner{Projects: c.projects},
		Deployer: glue.HookDeployer{Deployments: dep.Service}, PublicURL: o.PublicURL, Audit: c.audit, Log: o.Log})
	if err != nil {
		return nil, err
	}
	bw, err := bandwidth.New(bandwidth.Deps{DB: bdb, Meter: meter, Projects: glue.BandwidthProjects{Projects: c.projects}, Notifier: notify, Log: o.Log})
	if err != nil {
		return nil, err
	}
	c.plans.Changed().Subscribe(events.Notify(func(plans.PlanChanged) { bw.PlanChanged() }))
	c.projects.Events().PlanChanged.Subscribe(events.Notify(func(projects.PlanChanged) { bw.PlanChanged() }))
	placeholders, err := scaffold.New(scaffold.Deps{Auth: c.authn})
	if err != nil {
		return nil, err
	}
	return append(append([]platform.Module{doms}, dep.Modules()...), hub, hooks, bw, placeholders), nil
}

// derive is a key for one purpose, from the installation's secret.
func derive(secret, purpose string) []byte {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(purpose))
	return mac.Sum(nil)
}
