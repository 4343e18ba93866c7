package main

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/keelson-dev/keelson/auth/teams"
	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/assemble"
	"github.com/keelson-dev/keelson/deployments/container"
	"github.com/keelson-dev/keelson/deployments/fleet"
	"github.com/keelson-dev/keelson/deployments/ingress"
	"github.com/keelson-dev/keelson/plans"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/projects"
	"github.com/moby/moby/client"
)

// buildDeployments builds the deployments module (deployments/assemble):
// the ingress proxy (served on KEELSON_INGRESS_ADDR by Serve), the runtime
// (KEELSON_RUNTIME), the engine (KEELSON_ENGINE; with temporal, KEELSON_ROLE
// decides whether this process starts workflows, runs them or both) and the
// service. Projects reaches it through the edges bound in NewApp's second
// phase; codehost, built after it, gets it directly.
func (a *App) buildDeployments(ctx context.Context) error {
	c := a.Cfg
	log := a.Log.With("module", "deployments")
	d := assemble.Deps{Logger: a.Log, Shares: buildShares{plans: a.Plans, teams: a.Teams, per: cmp.Or(c.BuildsPerUser, DefaultBuildsPerUser)},
		Service: deployments.Deps{
			DB: a.DB, Auth: a.Authn, Projects: deploySource{a.Projects}, Access: projectAccess{a.Projects}, Git: codehostGit{a.edges},
			LogTokenKey: a.derivedKey("keelson deployment log tokens v1"), Streams: a.LogStreams, Logger: log, LogRetention: c.LogRetention,
			Audit: a.AuditLog, KeepBuilds: cmp.Or(c.KeepBuilds, -1), // 0 keeps none
			Logs: deployments.LogsConfig{MaxBuildLines: c.BuildLogMaxLines, MaxBuildBytes: int64(c.BuildLogMaxMB) << 20,
				MaxAppLines: c.AppLogMaxLines, AccountBudget: logBudget(c.LogBudgetMB)}}}
	if a.metrics != nil { // not a typed nil in the interface
		d.Service.Metrics = a.metrics
	}
	if err := a.workerIngress(ctx, &d, log); err != nil {
		return err
	}
	imgs := container.Images{Go: c.ImageGo, GoRun: c.ImageGoRun, Node: c.ImageNode, Static: c.ImageStatic}
	m, err := assemble.New(ctx, assemble.Config{Engine: c.Engine, Role: c.Role, DataDir: c.DataDir,
		BuildSlots: c.BuildSlots, FreeBuildSlots: c.FreeBuildSlots, BuildsPerUser: c.BuildsPerUser,
		Runtime: assemble.RuntimeConfig{Kind: c.Runtime, Wait: c.RuntimeWait, DataDir: c.DataDir, AllowLocalRepos: c.AllowLocalRepos,
			AllowPrivateHosts: c.AllowPrivateRepoHosts, GitCAFile: c.GitCAFile, Images: imgs, BuildPidsLimit: int64(c.BuildPidsLimit),
			Egress:   container.Egress{Open: c.Egress == "open", AllowCIDRs: c.EgressAllowCIDRs},
			Registry: container.Registry{Repository: c.Registry, Username: c.RegistryUsername, Password: c.RegistryPassword},
			OnDocker: func(ctx context.Context, docker *client.Client) { logMissingImages(ctx, docker, imgs, log) }},
		Temporal: assemble.Temporal{Address: c.TemporalAddress, Namespace: c.TemporalNamespace, TaskQueue: c.TemporalTaskQueue},
		Host:     assemble.Host{Address: hostAddress(c), MaxApps: c.HostMaxApps, HeartbeatEvery: c.heartbeat(), DownAfter: c.HostDownAfter}, Problem: settingError}, d)
	if u := (*assemble.EngineUnreachable)(nil); errors.As(err, &u) {
		return runtimeError(c.Runtime, u)
	}
	if err != nil {
		return err
	}
	a.add(m.Modules()...)
	a.Deployments, a.Hosts, a.localHost = m.Service, m.Hosts, m.LocalHost()
	if a.metrics != nil {
		return a.metrics.countDeployments(fleet.Queries{DB: a.DB}, m.QueueDepth())
	}
	return nil
}

// settingError names the variable of a bad assemble.Config field.
func settingError(field, problem string) error {
	return &ConfigError{map[string]string{"Role": "KEELSON_ROLE", "DataDir": "KEELSON_DATA_DIR", "Temporal.Address": "KEELSON_TEMPORAL_ADDRESS",
		"Temporal.Namespace": "KEELSON_TEMPORAL_NAMESPACE", "Temporal.TaskQueue": "KEELSON_TEMPORAL_TASK_QUEUE"}[field], problem}
}

// workerIngress builds, for every role but api, the ingress serving the
// apps (KEELSON_INGRESS_ADDR, KEELSON_APPS_DOMAIN; closed last, after the
// apps behind it stopped), the custom domains' routes and HTTPS.
func (a *App) workerIngress(ctx context.Context, d *assemble.Deps, log *slog.Logger) error {
	c := a.Cfg
	if !c.RunsWorker() {
		return nil
	}
	publicPort := 0
	if _, p, err := net.SplitHostPort(c.IngressAddr); err == nil {
		publicPort, _ = strconv.Atoi(p)
	}
	a.meter = ingress.NewMeter() // stored by the bandwidth module (wire_bandwidth.go)
	icfg := ingress.Config{AppsDomain: c.AppsDomain, PublicPort: publicPort, Logger: log, Meter: a.meter}
	if c.Engine == "temporal" {
		// Every ingress forwards the apps other hosts run (assemble: remote routes).
		icfg.ForwardKey, icfg.Self = a.derivedKey("keelson ingress forward v1"), hostAddress(c)
	}
	router, err := ingress.New(icfg)
	if err != nil {
		return &ConfigError{"KEELSON_APPS_DOMAIN", err.Error()}
	}
	// Closed last: after the apps behind it stopped.
	a.onClose(func(context.Context) error { router.Close(); return nil })
	if c.Runtime == "process" {
		log.Warn("KEELSON_RUNTIME=process: builds and apps run as plain processes of the server, NOT isolated from the server or from each other (single-tenant use only; unset KEELSON_RUNTIME to use the Docker runtime)")
	}
	a.Ingress, d.Ingress = router, router
	hosts := a.routeHosts(router)
	d.Service.Hosts = hosts
	return a.ingressHTTPS(ctx, router, hosts, log)
}

// logBudget is KEELSON_LOG_BUDGET_MB in bytes, or -1 (none) for 0.
func logBudget(mb int) int64 {
	if mb == 0 {
		return -1
	}
	return int64(mb) << 20
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
