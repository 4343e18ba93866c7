package assemble

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/moby/moby/client"

	"github.com/keelson-dev/keelson/deployments/container"
	"github.com/keelson-dev/keelson/deployments/ingress"
	"github.com/keelson-dev/keelson/deployments/process"
)

// Runtimes of RuntimeConfig.Kind.
const (
	RuntimeDocker  = "docker"
	RuntimeProcess = "process"
)

// RuntimeConfig chooses and sets up the runtime that runs builds and apps
// here, when Deps.Runtime is not given.
type RuntimeConfig struct {
	// Kind is RuntimeDocker (the default: containers on the Docker engine
	// at DOCKER_HOST, else the default socket) or RuntimeProcess (plain
	// child processes, not isolated: single-tenant use only).
	Kind string
	// Wait is how long start-up waits for the Docker engine to answer.
	// Default DefaultRuntimeWait.
	Wait time.Duration
	// DataDir holds the runtime's workspaces.
	DataDir string
	// AllowLocalRepos, AllowPrivateHosts and GitCAFile are the clone's
	// rules (process.Config, container.Config).
	AllowLocalRepos, AllowPrivateHosts bool
	GitCAFile                          string
	// Images, BuildPidsLimit, Egress and Registry are the Docker runtime's
	// (container.Config).
	Images         container.Images
	BuildPidsLimit int64
	Egress         container.Egress
	Registry       container.Registry
	// OnDocker is called once the Docker engine answers, before the runtime
	// is built over it (a host logs what the engine lacks). Optional.
	OnDocker func(ctx context.Context, docker *client.Client)
}

// DefaultRuntimeWait is RuntimeConfig.Wait's default: long enough for an
// engine started with the server (compose, a boot) to come up.
const DefaultRuntimeWait = 30 * time.Second

// newRuntime builds RuntimeConfig.Kind's runtime over router. Docker: once
// an engine answers within Wait; with none, New fails with an
// *EngineUnreachable, never falling back to unsandboxed processes.
func newRuntime(ctx context.Context, c RuntimeConfig, router *ingress.Router, log *slog.Logger) (Runtime, error) {
	if c.Kind == RuntimeProcess {
		rt, err := process.New(process.Config{DataDir: c.DataDir, AllowLocalRepos: c.AllowLocalRepos, AllowPrivateHosts: c.AllowPrivateHosts, GitCAFile: c.GitCAFile,
			Ingress: router, Logger: log})
		if err != nil {
			// A nil interface, not a typed nil pointer: callers close rt when it is not nil.
			return nil, err
		}
		return rt, nil
	}
	docker, err := ConnectDocker(ctx, cmp.Or(c.Wait, DefaultRuntimeWait), log)
	if err != nil {
		return nil, err
	}
	rt, err := container.New(container.Config{
		Client: docker, DataDir: c.DataDir, Ingress: router, Logger: log, Images: c.Images,
		AllowLocalRepos: c.AllowLocalRepos, AllowPrivateHosts: c.AllowPrivateHosts, GitCAFile: c.GitCAFile,
		BuildPidsLimit: c.BuildPidsLimit, Egress: c.Egress, Registry: c.Registry,
	})
	if err != nil {
		docker.Close()
		return nil, err
	}
	if c.OnDocker != nil {
		c.OnDocker(ctx, docker)
	}
	log.Info("builds and apps run in containers on the Docker engine", "engine", docker.DaemonHost(), "instance", rt.Instance(),
		"registry", cmp.Or(c.Registry.Repository, "none: images stay on this engine"))
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

// EngineUnreachable says why no Docker engine client could be had: the
// address tried, whether the socket refused the server's user, how long
// start-up waited, and the last error.
type EngineUnreachable struct {
	Host   string
	Denied bool
	Waited time.Duration
	Err    error
}

func (e *EngineUnreachable) Error() string { return e.Err.Error() }

func (e *EngineUnreachable) Unwrap() error { return e.Err }

// ConnectDocker returns a client of the engine at DOCKER_HOST (else the
// default socket) once it answers a ping, trying again until wait has
// passed; else an *EngineUnreachable. A socket the server's user may not
// open is reported at once: waiting does not change permissions.
func ConnectDocker(ctx context.Context, wait time.Duration, log *slog.Logger) (*client.Client, error) {
	c, err := client.New(client.FromEnv)
	if err != nil {
		return nil, &EngineUnreachable{Host: os.Getenv("DOCKER_HOST"), Err: err}
	}
	start := time.Now()
	deadline := start.Add(wait)
	logged := false
	for {
		try := time.Now().Add(5 * time.Second)
		if try.After(deadline) {
			try = deadline
		}
		pctx, cancel := context.WithDeadline(ctx, try)
		_, err = c.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true})
		cancel()
		if err == nil {
			return c, nil
		}
		denied := strings.Contains(err.Error(), "permission denied")
		if denied || ctx.Err() != nil || !time.Now().Add(500*time.Millisecond).Before(deadline) {
			c.Close()
			return nil, &EngineUnreachable{Host: c.DaemonHost(), Denied: denied, Waited: time.Since(start).Round(time.Second), Err: err}
		}
		if !logged {
			log.Info("waiting for the Docker engine", "engine", c.DaemonHost(), "up_to", wait.String(), "err", oneLine(err))
			logged = true
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}
