package main

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/keelson-dev/keelson/auth/teams"
	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/container"
	"github.com/keelson-dev/keelson/deployments/fleet"
	"github.com/keelson-dev/keelson/deployments/ingress"
	"github.com/keelson-dev/keelson/deployments/local"
	"github.com/keelson-dev/keelson/deployments/pgnotify"
	"github.com/keelson-dev/keelson/deployments/process"
	"github.com/keelson-dev/keelson/plans"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/projects"
	"github.com/moby/moby/client"
)

// buildDeployments builds the deployments module: the ingress proxy (served on
// KEELSON_INGRESS_ADDR by Serve), the runtime (KEELSON_RUNTIME), the engine
// and the service (deployments.New). Projects reaches it through the edges
// bound in NewApp's second phase; codehost, built after it, gets it directly.
//
// With KEELSON_ENGINE=local (the default) the embedded engine runs here: it
// starts after migrations (settling deployments a previous run left mid-way
// and starting LIVE apps again) and stops at shutdown before the runtime
// stops the apps. With KEELSON_ENGINE=temporal see temporalDeps: KEELSON_ROLE
// decides whether this process starts workflows (api), runs them (worker) or
// both (all).
//
// On Postgres the log hub also listens for lines other processes store
// (deployments/pgnotify), so a log stream on this replica sees a build that
// runs on a worker elsewhere.
func (a *App) buildDeployments(ctx context.Context) error {
	c := a.Cfg
	log := a.Log.With("module", "deployments")
	mac := hmac.New(sha256.New, a.JWTSecret)
	mac.Write([]byte("keelson deployment log tokens v1"))
	d := deployments.Deps{
		DB: a.DB, Auth: a.Authn, Projects: deploySource{a.Projects}, Access: projectAccess{a.Projects}, Git: codehostGit{a.edges},
		LogTokenKey: mac.Sum(nil), Streams: a.LogStreams, Logger: log, LogRetention: a.Cfg.LogRetention, Audit: a.AuditLog,
		KeepBuilds: cmp.Or(a.Cfg.KeepBuilds, -1), // 0 keeps none
		Logs: deployments.LogsConfig{MaxBuildLines: a.Cfg.BuildLogMaxLines, MaxBuildBytes: int64(a.Cfg.BuildLogMaxMB) << 20,
			MaxAppLines: a.Cfg.AppLogMaxLines, AccountBudget: logBudget(a.Cfg.LogBudgetMB)},
	}
	if a.metrics != nil { // not a typed nil in the interface
		d.Metrics = a.metrics
	}
	rt, err := a.workerRuntime(ctx, &d, log)
	if err != nil {
		return err
	}
	var worker func(*deployments.Service) error
	var engine *local.Engine // the local engine, for its queue depth
	if c.Engine == "temporal" {
		var err error
		if worker, err = a.temporalDeps(ctx, &d, rt, log); err != nil {
			if rt != nil {
				_ = rt.Close(ctx)
			}
			return err
		}
	} else {
		// The embedded engine (KEELSON_ROLE=all only; the config refuses
		// other roles with it). The service owns rt: its Close stops the
		// engine, then the apps, then the log writer.
		if rt == nil {
			return &ConfigError{"KEELSON_ROLE", "the local engine needs KEELSON_ROLE=all"}
		}
		d.Runtime = rt
		d.NewEngine = func(ed deployments.EngineDeps) (deployments.Engine, error) {
			e, err := local.New(local.Config{Store: ed.Store, Activities: ed.Activities, Logger: ed.Logger,
				MaxConcurrent: a.Cfg.BuildSlots, FreeSlots: a.Cfg.FreeBuildSlots, PerUser: a.Cfg.BuildsPerUser, Shares: buildShares{plans: a.Plans, teams: a.Teams, per: cmp.Or(a.Cfg.BuildsPerUser, DefaultBuildsPerUser)}})
			engine = e
			return e, err
		}
	}
	svc, err := deployments.New(d)
	if err != nil {
		if rt != nil {
			_ = rt.Close(ctx)
		}
		return err
	}
	// The engine starts after migrations (settling deployments a previous
	// run left mid-way and starting LIVE apps again).
	a.add(svc)
	if a.metrics != nil {
		var queue interface{ QueueDepth() int }
		if engine != nil {
			queue = engine
		}
		if err := a.metrics.countDeployments(fleet.Queries{DB: a.DB}, queue); err != nil {
			return err
		}
	}
	if worker != nil {
		if err := worker(svc); err != nil {
			return err
		}
	}
	if db.IsPostgres(a.DB) {
		// Every role installs the triggers (workers' lines must notify);
		// only processes with log streams listen.
		a.migrate(pgnotify.Migrations())
		if c.ServesAPI() {
			a.listenLogs(svc.Logs(), log)
		}
	}
	a.Deployments = svc
	return nil
}

// workerRuntime builds what runs the steps here, for every role but api
// (nil for api): the ingress serving the apps (KEELSON_INGRESS_ADDR,
// KEELSON_APPS_DOMAIN; closed last, after the apps behind it stopped), the
// runtime (KEELSON_RUNTIME), the custom domains' routes and HTTPS.
func (a *App) workerRuntime(ctx context.Context, d *deployments.Deps, log *slog.Logger) (appRuntime, error) {
	c := a.Cfg
	if !c.RunsWorker() {
		return nil, nil
	}
	publicPort := 0
	if _, p, err := net.SplitHostPort(c.IngressAddr); err == nil {
		publicPort, _ = strconv.Atoi(p)
	}
	a.meter = ingress.NewMeter() // stored by the bandwidth module (wire_bandwidth.go)
	icfg := ingress.Config{AppsDomain: c.AppsDomain, PublicPort: publicPort, Logger: log, Meter: a.meter}
	if c.Engine == "temporal" {
		// Every ingress forwards the apps other hosts run (wire_hostsreg.go).
		icfg.ForwardKey, icfg.Self = a.derivedKey("keelson ingress forward v1"), hostAddress(c)
	}
	router, err := ingress.New(icfg)
	if err != nil {
		return nil, &ConfigError{"KEELSON_APPS_DOMAIN", err.Error()}
	}
	// Closed last: after the apps behind it stopped.
	a.onClose(func(context.Context) error { router.Close(); return nil })
	rt, err := a.newRuntime(ctx, router, log)
	if err != nil {
		return nil, err
	}
	a.Ingress = router
	if c.Engine == "temporal" {
		a.routeRemote(router, log)
	}
	hosts := a.routeHosts(router)
	d.Hosts = hosts
	if err := a.ingressHTTPS(ctx, router, hosts, log); err != nil {
		_ = rt.Close(ctx)
		return nil, err
	}
	return rt, nil
}

// logBudget is KEELSON_LOG_BUDGET_MB in bytes, or -1 (none) for 0.
func logBudget(mb int) int64 {
	if mb == 0 {
		return -1
	}
	return int64(mb) << 20
}

// listenLogs feeds the log hub what other processes store (Postgres
// LISTEN/NOTIFY) from start-up until shutdown.
func (a *App) listenLogs(logs *deployments.Logs, log *slog.Logger) {
	var loop *platform.Loop
	a.onStart(func(context.Context) error {
		// Listen returns only when the first LISTEN fails (the database is
		// away): streams still end from the database; try again shortly.
		loop = platform.Every(context.Background(), 5*time.Second, true, nil, func(ctx context.Context) {
			if err := pgnotify.Listen(ctx, a.DB, logs, pgnotify.Config{Logger: log}); ctx.Err() == nil {
				log.Warn("listen for deployment logs of other processes", "err", err)
			}
		})
		return nil
	})
	a.onClose(func(context.Context) error {
		loop.Stop()
		return nil
	})
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

// appRuntime is what runs builds and apps here: the docker runtime
// (deployments/container) or the process runtime (deployments/process).
type appRuntime interface {
	deployments.Runtime
	Close(ctx context.Context) error
}

// newRuntime picks KEELSON_RUNTIME's runtime. Unset or docker: the docker
// runtime, once an engine answers (DOCKER_HOST or the default socket) within
// KEELSON_RUNTIME_WAIT; with none, start-up stops naming the variable, never
// falling back to unsandboxed processes. process: plain child processes, with
// one WARN line at every start.
func (a *App) newRuntime(ctx context.Context, router *ingress.Router, log *slog.Logger) (appRuntime, error) {
	c := a.Cfg
	kind := c.Runtime
	var docker *client.Client
	if kind != "process" {
		var err error
		docker, err = connectEngine(ctx, cmp.Or(c.RuntimeWait, DefaultRuntimeWait), log)
		if u, ok := err.(*engineUnreachable); ok {
			return nil, runtimeError(c.Runtime, u)
		}
		if err != nil {
			return nil, err
		}
		kind = "docker"
	} else {
		log.Warn("KEELSON_RUNTIME=process: builds and apps run as plain processes of the server, NOT isolated from the server or from each other (single-tenant use only; unset KEELSON_RUNTIME to use the Docker runtime)")
	}
	if kind == "process" {
		rt, err := process.New(process.Config{DataDir: c.DataDir, AllowLocalRepos: c.AllowLocalRepos, AllowPrivateHosts: c.AllowPrivateRepoHosts, GitCAFile: c.GitCAFile,
			Ingress: router, Logger: log})
		if err != nil {
			// A nil interface, not a typed nil pointer: callers close rt when it is not nil.
			return nil, err
		}
		return rt, nil
	}
	rt, err := container.New(container.Config{
		Client: docker, DataDir: c.DataDir, Ingress: router, Logger: log,
		Images:          container.Images{Go: c.ImageGo, GoRun: c.ImageGoRun, Node: c.ImageNode, Static: c.ImageStatic},
		AllowLocalRepos: c.AllowLocalRepos, AllowPrivateHosts: c.AllowPrivateRepoHosts, GitCAFile: c.GitCAFile,
		BuildPidsLimit: int64(c.BuildPidsLimit),
		Egress:         container.Egress{Open: c.Egress == "open", AllowCIDRs: c.EgressAllowCIDRs},
		Registry:       container.Registry{Repository: c.Registry, Username: c.RegistryUsername, Password: c.RegistryPassword},
	})
	if err != nil {
		docker.Close()
		return nil, err
	}
	logMissingImages(ctx, docker, container.Images{Go: c.ImageGo, GoRun: c.ImageGoRun, Node: c.ImageNode, Static: c.ImageStatic}, log)
	log.Info("builds and apps run in containers on the Docker engine", "engine", docker.DaemonHost(), "instance", rt.Instance(),
		"registry", cmp.Or(c.Registry, "none: images stay on this engine"))
	return dockerRuntime{rt, docker}, nil
}

// dockerRuntime closes the engine client after the runtime.
type dockerRuntime struct {
	*container.Runtime
	docker *client.Client
}

func (d dockerRuntime) Close(ctx context.Context) error {
	return errors.Join(d.Runtime.Close(ctx), d.docker.Close())
}

// buildShares gives the engines each owner's share of the build slots from
// their account plan: KEELSON_BUILDS_PER_USER at once, twice that on a plan
// with priorityBuilds (whose builds are also taken first); an account on a
// FREE-tier plan counts against KEELSON_FREE_BUILD_SLOTS. An engine that
// cannot read the plan uses the default share, counted as FREE.
type buildShares struct {
	plans *plans.Service
	teams *teams.Service
	per   int // KEELSON_BUILDS_PER_USER or its default
}

func (b buildShares) BuildShare(ctx context.Context, ownerID string) (deployments.Share, error) {
	p, err := accountPlan(ctx, b.plans, b.teams, ownerID)
	if err != nil {
		return deployments.Share{}, err
	}
	sh := deployments.Share{Max: b.per, Priority: p.PriorityBuilds, Free: p.Tier == plans.TierFree}
	if p.PriorityBuilds {
		sh.Max = 2 * b.per
	}
	return sh, nil
}
