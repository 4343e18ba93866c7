package deployments

import "github.com/keelson-dev/keelson/deployments/rt"

// The runtime-facing types live in deployments/run, which the runtimes import
// instead of this module; these names keep the module's API.
type (
	// Job is everything a Runtime needs to build and run one deployment.
	Job = rt.Job
	// EnvVar is one environment variable of the app and its build.
	EnvVar = rt.EnvVar
	// GitAuth is an HTTP basic credential for git.
	GitAuth = rt.GitAuth
	// Limits come from the project's plan.
	Limits = rt.Limits
	// LogSink receives a deployment's log lines.
	LogSink = rt.LogSink
	// Runtime does the work of the BUILD, PROVISION and DNS steps.
	Runtime = rt.Runtime
	// ProjectCleaner is implemented by runtimes that keep something per project.
	ProjectCleaner = rt.ProjectCleaner
	// Masker replaces secret values by *** in log text.
	Masker = rt.Masker
	// LineSplitter turns a child's output into masked log lines.
	LineSplitter = rt.LineSplitter
)

// Log streams of a LogSink line.
const (
	StreamSystem = rt.StreamSystem
	StreamBuild  = rt.StreamBuild
	StreamApp    = rt.StreamApp
)

// MinSecretLen is the shortest secret value that is masked in logs.
const MinSecretLen = rt.MinSecretLen

// NewMasker returns a Masker of values.
func NewMasker(values ...string) *Masker { return rt.NewMasker(values...) }

// ErrNewerRouted is returned by Runtime.Route when the project's host already
// routes a newer deployment.
var ErrNewerRouted = rt.ErrNewerRouted

// Reuser is a Runtime that can run an earlier deployment's build again (rollbacks).
type Reuser = rt.Reuser

// ErrBuildGone is returned by Reuser.Reuse when the build is no longer kept.
var ErrBuildGone = rt.ErrBuildGone
