package main

import (
	"cmp"
	"context"
	"errors"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/assemble"
	"github.com/keelson-dev/keelson/deployments/container"
	"github.com/keelson-dev/keelson/deployments/fleet"
	"github.com/keelson-dev/keelson/examples/glue"
	"github.com/keelson-dev/keelson/projects"
	"github.com/moby/moby/client"
)

// buildDeployments builds the deployments module (deployments/assemble):
// the ingress proxy (served on KEELSON_INGRESS_ADDR by Serve), the runtime
// (KEELSON_RUNTIME), the engine (KEELSON_ENGINE; with temporal, KEELSON_ROLE
// decides whether this process starts workflows, runs them or both) and the
// service, on projects and domains, built before it: it tears a deleted
// project down (after its domains) and moves a moved one's deployments (the
// projects module's events). Codehost, built after it, gets it directly.
func (a *App) buildDeployments(ctx context.Context) error {
	c := a.Cfg
	log := a.Log.With("module", "deployments")
	d := assemble.Deps{Logger: a.Log, Shares: glue.BuildShares{Plans: a.Plans, Teams: a.Teams, PerUser: cmp.Or(c.BuildsPerUser, DefaultBuildsPerUser)},
		PinnedHost: a.Projects.PinnedHost, // placed there only, never moved off it
		Service: deployments.Deps{
			DB: a.DB, Auth: a.Authn, Projects: glue.DeploySource{Projects: a.Projects, DB: a.DB}, Access: glue.ProjectAccess{Projects: a.Projects}, Git: glue.CodehostGit{Codehost: &a.Codehost},
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
	ev := a.Projects.Events()
	ev.Deleted.Subscribe(func(ctx context.Context, e projects.Deleted) error {
		return a.shutdownError(m.Service.TeardownProject(ctx, e.ProjectID))
	})
	ev.OwnerChanged.Subscribe(func(ctx context.Context, e projects.OwnerChanged) error {
		return m.Service.ProjectOwnerChanged(ctx, e.ProjectID, e.OwnerID)
	})
	if a.metrics != nil {
		return a.metrics.countDeployments(fleet.Queries{DB: a.DB}, m.QueueDepth())
	}
	return nil
}
