package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"net"
	"strconv"
	"time"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/ingress"
	"github.com/keelson-dev/keelson/deployments/local"
	"github.com/keelson-dev/keelson/deployments/process"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/projects"
)

// wireDeployments builds the deployments module: the ingress proxy (served on
// KEELSON_INGRESS_ADDR by Serve), the process runtime, the embedded engine and
// the routes. It hands projects the real teardown and monthly counts, and
// codehost its push deployer. The engine starts after migrations (settling
// deployments a previous run left mid-way and starting LIVE apps again) and
// stops at shutdown before the runtime stops the apps.
func (a *App) wireDeployments(ctx context.Context) error {
	c := a.Cfg
	log := a.Log.With("module", "deployments")
	if c.Engine != "" && c.Engine != "local" {
		return &ConfigError{"KEELSON_ENGINE", "this server runs the local engine only (temporal is wired by deployments/temporal)"}
	}
	publicPort := 0
	if _, p, err := net.SplitHostPort(c.IngressAddr); err == nil {
		publicPort, _ = strconv.Atoi(p)
	}
	router, err := ingress.New(ingress.Config{AppsDomain: c.AppsDomain, PublicPort: publicPort, Logger: log})
	if err != nil {
		return &ConfigError{"KEELSON_APPS_DOMAIN", err.Error()}
	}
	rt, err := process.New(process.Config{DataDir: c.DataDir, AllowLocalRepos: c.AllowLocalRepos, GitCAFile: c.GitCAFile,
		Ingress: router, Logger: log})
	if err != nil {
		return err
	}
	store := deployments.NewStore(a.DB)
	logs := deployments.NewLogs(store, deployments.LogsConfig{Logger: log})
	src := deploySource{a}
	acts, err := deployments.NewActivities(deployments.ActivitiesConfig{
		Store: store, Logs: logs, Runtime: rt, Projects: src, Git: codehostGit{a}, Logger: log,
	})
	if err != nil {
		return err
	}
	eng, err := local.New(local.Config{Store: store, Activities: acts, Logger: log})
	if err != nil {
		return err
	}
	svc, err := deployments.NewService(deployments.Config{
		Store: store, Logs: logs, Activities: acts, Engine: eng, Projects: src, Logger: log,
	})
	if err != nil {
		return err
	}
	mac := hmac.New(sha256.New, a.JWTSecret)
	mac.Write([]byte("keelson deployment log tokens v1"))
	if err := deployments.Register(a.API, deployments.Deps{
		Service: svc, Auth: a.Authn, LogTokenKey: mac.Sum(nil), Streams: a.LogStreams,
	}); err != nil {
		return err
	}
	a.migrate(deployments.Migrations())
	a.Deployments = svc
	a.Ingress = router
	a.ProjectTeardown = svc
	a.DeploymentCounter = svc
	a.PushDeployer = deploymentsTrigger{svc}
	a.onStart(eng.Start)
	a.onClose(func(ctx context.Context) error {
		// Engine first (running steps end; the next start settles them),
		// then the apps, then the log writer (the apps' last lines are stored).
		err := errors.Join(eng.Close(), rt.Close(ctx))
		logs.Close()
		router.Close()
		return err
	})
	return nil
}

var (
	_ projects.Teardown          = (*deployments.Service)(nil)
	_ projects.DeploymentCounter = (*deployments.Service)(nil)
)

// deploySource adapts the projects module to deployments.ProjectSource.
type deploySource struct{ a *App }

func (s deploySource) ProjectForDeploy(ctx context.Context, projectID string) (*deployments.DeploySpec, error) {
	if s.a.Projects == nil {
		return nil, platform.Unavailable("the projects module is not wired")
	}
	p, err := s.a.Projects.ProjectForDeploy(ctx, projectID)
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
