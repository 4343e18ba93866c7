package deployments

import (
	"database/sql/driver"
	"time"

	"github.com/keelson-dev/keelson/deployments/internal/jsoncol"
	"github.com/uptrace/bun"
)

// Status is a deployment's status (SPEC 3.1).
type Status string

// Statuses of SPEC 3.1. LIVE, FAILED and CANCELLED are terminal.
const (
	StatusQueued         Status = "QUEUED"
	StatusBuilding       Status = "BUILDING"
	StatusProvisioning   Status = "PROVISIONING"
	StatusConfiguringDNS Status = "CONFIGURING_DNS"
	StatusLive           Status = "LIVE"
	StatusFailed         Status = "FAILED"
	StatusCancelled      Status = "CANCELLED"
)

// Statuses lists every status, in workflow order.
func Statuses() []Status {
	return []Status{StatusQueued, StatusBuilding, StatusProvisioning, StatusConfiguringDNS,
		StatusLive, StatusFailed, StatusCancelled}
}

// Terminal reports whether no step will run for a deployment in status s any more.
// LIVE is terminal for the workflow (its app keeps running until replaced or deleted).
func (s Status) Terminal() bool {
	return s == StatusLive || s == StatusFailed || s == StatusCancelled
}

// StepName names one step of a deployment's workflow.
type StepName string

// Steps, in the order they run.
const (
	StepBuild     StepName = "BUILD"
	StepProvision StepName = "PROVISION"
	StepDNS       StepName = "DNS"
)

// StepNames lists the steps in the order they run.
var stepNames = [...]StepName{StepBuild, StepProvision, StepDNS}

// statusOf is the deployment status while step runs.
func statusOf(step StepName) Status {
	switch step {
	case StepBuild:
		return StatusBuilding
	case StepProvision:
		return StatusProvisioning
	default:
		return StatusConfiguringDNS
	}
}

// StepStatus is the state of one step.
type StepStatus string

// Step statuses of SPEC 3.1.
const (
	StepPending   StepStatus = "PENDING"
	StepRunning   StepStatus = "RUNNING"
	StepSucceeded StepStatus = "SUCCEEDED"
	StepFailed    StepStatus = "FAILED"
	StepSkipped   StepStatus = "SKIPPED"
)

// Step is one step of a deployment with its times (zero until it starts / ends).
type Step struct {
	Name       StepName   `json:"name"`
	Status     StepStatus `json:"status"`
	StartedAt  *time.Time `json:"startedAt"`
	FinishedAt *time.Time `json:"finishedAt"`
}

// Steps are a deployment's steps, stored as JSON.
type Steps []Step

// NewSteps returns the three steps, all PENDING.
func NewSteps() Steps {
	s := make(Steps, len(stepNames))
	for i, n := range stepNames {
		s[i] = Step{Name: n, Status: StepPending}
	}
	return s
}

// Get returns a pointer to the step named n (nil if absent).
func (s Steps) Get(n StepName) *Step {
	for i := range s {
		if s[i].Name == n {
			return &s[i]
		}
	}
	return nil
}

// Running returns the step that is RUNNING, or nil.
func (s Steps) Running() *Step {
	for i := range s {
		if s[i].Status == StepRunning {
			return &s[i]
		}
	}
	return nil
}

// clone copies s so a caller can change it without touching a shared value.
func (s Steps) clone() Steps { return append(Steps(nil), s...) }

// Deployment is one deployment of a project: its record in the deployments table.
//
// A deployment replaced by a newer LIVE deployment of the same project ends
// CANCELLED with SupersededBy set to the newer one's ID (see the package doc).
type Deployment struct {
	bun.BaseModel `bun:"table:deployments"`

	ID          string `bun:"id,pk,type:varchar(36)"`
	ProjectID   string `bun:"project_id,notnull,type:varchar(36)"`
	OwnerID     string `bun:"owner_id,notnull,type:varchar(36)"`
	ProjectSlug string `bun:"project_slug,notnull"` // kept so teardown can unroute after the project is gone
	Status      Status `bun:"status,notnull"`
	Steps       Steps  `bun:"steps,type:text,notnull"`
	// CommitSHA is the commit asked for (push-triggered) or, once BUILD succeeded, the one built.
	CommitSHA    string `bun:"commit_sha,notnull"`
	Reason       string `bun:"reason,notnull"`
	DeployedURL  string `bun:"deployed_url,notnull"`
	ErrorMessage string `bun:"error_message,type:text,notnull"`
	// BuildDurationMs is how long the BUILD step ran, in milliseconds.
	BuildDurationMs int64  `bun:"build_duration_ms,notnull"`
	Region          string `bun:"region,notnull"`
	WorkflowName    string `bun:"workflow_name,notnull"`
	// Upstream is the host:port the running app answers on (set by PROVISION).
	Upstream string `bun:"upstream,notnull"`
	// Host is where the app runs when a host of several runs it (the
	// Temporal worker's own task queue, set by PROVISION); "" on the embedded engine.
	Host         string `bun:"host,notnull,default:''"`
	SupersededBy string `bun:"superseded_by,notnull"`
	// RollbackOf is the deployment whose build this one runs again (a
	// rollback: no clone, no build); "" for a deployment that builds.
	RollbackOf string `bun:"rollback_of,notnull,default:''"`
	// Image is the deployment's image in the registry by digest
	// (repository@sha256:...), when its build was pushed: any host runs it.
	Image string `bun:"image,notnull,default:''"`
	// MemoryMi and CPUm are what its app may use (the plan's limits when it
	// was triggered; 0 unlimited): what placement counts on its host.
	MemoryMi int `bun:"memory_mi,notnull,default:0"`
	CPUm     int `bun:"cpu_m,notnull,default:0"`
	// audit is the audit action of a new deployment (TriggerParams.Action); not stored.
	audit string `bun:"-"`
	// BuildKept is set on a replaced deployment whose build (image or
	// workspace) is kept for a rollback (the project's last
	// ActivitiesConfig.KeepBuilds replaced deployments).
	BuildKept       bool      `bun:"build_kept,notnull,default:false"`
	ReplacedAt      time.Time `bun:"replaced_at,nullzero"`
	CancelRequested bool      `bun:"cancel_requested,notnull"`
	// Attempt counts the runs of the workflow: 1, or 2 once resumed after a restart.
	Attempt int `bun:"attempt,notnull"`
	// LogBytes is the size of the deployment's stored log messages, kept by
	// the store as lines are stored and deleted (the account log budget
	// counts it; see logs_budget.go). Never written from this struct.
	LogBytes   int64     `bun:"log_bytes,notnull,default:0"`
	CreatedAt  time.Time `bun:"created_at,notnull"`
	UpdatedAt  time.Time `bun:"updated_at,notnull"`
	FinishedAt time.Time `bun:"finished_at,nullzero"`
}

// BuildDuration is how long the BUILD step ran.
func (d *Deployment) BuildDuration() time.Duration {
	return time.Duration(d.BuildDurationMs) * time.Millisecond
}

// Value stores steps as JSON text (the same on both dialects).
func (s Steps) Value() (driver.Value, error) { return jsoncol.Value(s) }

// Scan reads steps stored by Value.
func (s *Steps) Scan(src any) error { return jsoncol.Scan(src, s, "Steps") }

// SchemaName methods name these types in the OpenAPI document (platform.SchemaNamer).
func (Step) SchemaName() string { return "DeploymentStep" }
