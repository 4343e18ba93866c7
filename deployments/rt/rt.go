// Package rt is what a runtime needs of the deployments module: the job it
// builds and runs (environment, git credential, plan limits), the log sink it
// writes to, the masking of secrets in that log, and the Runtime interface it
// implements. Runtimes (deployments/process, deployments/container) import
// this package, not the module; the module re-exports every name.
package rt

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ErrNewerRouted is returned by Route when the slug's host already leads to a
// deployment created after this one: a route only moves forward, so a LIVE
// deployment started again after a restart never takes its host back from the
// deployment that replaced it meanwhile.
var ErrNewerRouted = errors.New("the host already routes a newer deployment")

// ErrBuildGone is returned by Reuser.Reuse when the earlier deployment's
// build (image or workspace) is no longer kept.
var ErrBuildGone = errors.New("the deployment's build is no longer kept")

// Reuser is a Runtime that can give a new deployment the build of an earlier
// deployment of the same project, so a rollback neither clones nor builds.
// The engine keeps the builds of a project's last replaced deployments for it.
type Reuser interface {
	// Reuse makes the build of deployment from the build of job's deployment,
	// on this runtime; ErrBuildGone when from's build is not kept here.
	Reuse(ctx context.Context, from string, job Job) error
}

// Publisher is a Runtime that sends each build to an image registry, so any
// host can run it (Job.Image).
type Publisher interface {
	// Publish pushes the image Build made of job's deployment and returns
	// its reference by digest (repository@sha256:...), or "" when no
	// registry is configured (the image stays on this engine).
	Publish(ctx context.Context, job Job, logs LogSink) (image string, err error)
}

// Job is everything a Runtime needs to build and run one deployment. It is
// assembled by the engine from the project (through ProjectSource) when a step
// starts; it is never stored with its secrets.
type Job struct {
	DeploymentID string
	ProjectID    string
	ProjectSlug  string // URL-safe, unique; the ingress host is <slug>.<apps-domain>
	RepoURL      string // https URL, or file:// / local path when local repos are allowed
	Branch       string // empty: the repository's default branch
	CommitSHA    string // empty: the head of Branch; set for push-triggered deployments
	Framework    string // preset key when a command is empty: "go", "node", "static", ...
	BuildCommand string // empty: the framework preset
	StartCommand string // empty: the framework preset
	Port         int    // the project's declared port (informational; the app gets PORT)
	Env          []EnvVar
	Limits       Limits
	// Image is the deployment's image in a registry, by digest (Publisher),
	// when it was pushed: Start pulls it when the engine does not have it,
	// and Reuse needs no local build then. Empty: the local build only.
	Image string
	// GitAuth, when set, authenticates the clone (private repositories). It is
	// passed to git through the environment, never written to the workspace or logs.
	GitAuth *GitAuth
}

// EnvVar is one environment variable of the app and its build. Secret values are
// masked as *** in every stored or streamed log line.
type EnvVar struct {
	Key    string
	Value  string
	Secret bool
}

// Environ returns the job's variables as KEY=value, leaving out those whose
// key is one of omit. A name with "=" or NUL (or empty, unless omitted) or a
// value with NUL is an error, named for the user.
func (j Job) Environ(omit ...string) ([]string, error) {
	env := make([]string, 0, len(j.Env)+1) // +1: room for the PORT a runtime adds
	for _, v := range j.Env {
		if slices.Contains(omit, v.Key) {
			continue
		}
		if v.Key == "" || strings.ContainsAny(v.Key, "=\x00") {
			return nil, fmt.Errorf("environment variable name %q is not valid", v.Key)
		}
		if strings.Contains(v.Value, "\x00") {
			return nil, fmt.Errorf("environment variable %s contains a NUL byte", v.Key)
		}
		env = append(env, v.Key+"="+v.Value)
	}
	return env, nil
}

// GitAuth is an HTTP basic credential for git (e.g. x-access-token + an
// installation token).
type GitAuth struct {
	Username string
	Password string
}

// Limits come from the project's plan.
type Limits struct {
	BuildTimeout time.Duration // kill the build after this; 0 means 10 minutes
	MemoryMi     int           // 0: unlimited
	CPUMillis    int           // 0: unlimited
	StorageGi    int           // 0: unlimited
	Priority     bool          // priorityBuilds
}

// Log streams of a LogSink line.
const (
	StreamSystem = "system" // step changes and engine messages
	StreamBuild  = "build"  // clone and build output
	StreamApp    = "app"    // the running app's stdout/stderr
)

// LogSink receives a deployment's log lines. The deployments module's sink
// masks secret values, stamps a per-deployment sequence number and time,
// stores the line and fans it out to live streams. Log must be safe for
// concurrent use and must not block for long (a slow reader never stalls a build).
type LogSink interface {
	Log(stream, line string)
}

// Runtime does the work of the BUILD, PROVISION and DNS steps; an Engine
// orchestrates them. The process runtime (deployments/process) is the default;
// containers or a cluster can implement the same interface.
type Runtime interface {
	// Build clones job.RepoURL at job.Branch / job.CommitSHA into the
	// deployment's workspace and runs the build command with job.Env, killed
	// at job.Limits.BuildTimeout. It returns the commit it built.
	Build(ctx context.Context, job Job, logs LogSink) (commit string, err error)
	// Start starts the built app with PORT set to a free port and job.Env,
	// waits until it answers HTTP on that port, and returns its upstream
	// address (host:port). The app keeps running after Start returns, its
	// output still flowing to logs, restarted if it dies, until Stop.
	Start(ctx context.Context, job Job, logs LogSink) (upstream string, err error)
	// Route points <slug>.<apps-domain> at upstream in the ingress, atomically
	// replacing any previous route of that slug, and returns the public URL.
	// It fails with ErrNewerRouted when the slug routes a newer deployment.
	Route(ctx context.Context, slug, deploymentID, upstream string) (url string, err error)
	// Unroute removes the route of slug if it still points at deploymentID.
	Unroute(ctx context.Context, slug, deploymentID string) error
	// Stop stops the app of deploymentID if it runs. Idempotent.
	Stop(ctx context.Context, deploymentID string) error
	// Cleanup removes the deployment's workspace. Idempotent.
	Cleanup(ctx context.Context, deploymentID string) error
	// Running reports whether this runtime holds the app of deploymentID
	// (starting or running). A runtime started again does not hold the apps
	// an earlier run started: it stopped them. So the DNS step asks before
	// routing to the app PROVISION started.
	Running(deploymentID string) bool
}

// ProjectCleaner is implemented by runtimes that keep something per project
// beyond its deployments (the docker runtime's layer-cache image).
// Service.TeardownProject calls it once every deployment of a deleted project
// was released.
type ProjectCleaner interface {
	CleanupProject(ctx context.Context, projectID string) error
}
