package deployments

import (
	"context"
	"time"
)

// Engine orchestrates deployments' workflows: BUILD, PROVISION, DNS, run by
// Activities (which call the Runtime and record state in the database). The
// embedded engine is deployments/local; a Temporal engine implements the same
// interface with workflow id = workflowName and the steps as activities.
//
// An engine owns orchestration only. The state the status route reads is in
// the deployments table: written by the activities as they run, and by the
// service from Sync when the engine knows better (e.g. a workflow that was
// terminated outside Keelson).
type Engine interface {
	// StartWorkflow begins the workflow of d, a stored QUEUED deployment, and
	// returns its workflow name (d.WorkflowName unless the engine renames it).
	// It does not wait for the workflow to run. Starting the same deployment
	// twice is not an error and starts one workflow.
	StartWorkflow(ctx context.Context, d *Deployment) (workflowName string, err error)
	// Sync returns the workflow's current view of d.
	Sync(ctx context.Context, d *Deployment) (*State, error)
	// Cancel stops d's workflow: a queued one never runs, a running one has its
	// step's context cancelled (the runtime kills its processes). It returns
	// once the deployment is terminal, or when ctx ends. Cancelling a terminal
	// deployment does nothing.
	Cancel(ctx context.Context, d *Deployment) error
}

// State is a deployment's state as an engine reports it.
type State struct {
	Status        Status
	Steps         Steps
	CommitSHA     string
	DeployedURL   string
	ErrorMessage  string
	BuildDuration time.Duration
	FinishedAt    time.Time
}

// StateOf returns d's stored state (what an engine that keeps its state in the
// database answers from Sync).
func StateOf(d *Deployment) *State {
	return &State{
		Status: d.Status, Steps: d.Steps.clone(), CommitSHA: d.CommitSHA, DeployedURL: d.DeployedURL,
		ErrorMessage: d.ErrorMessage, BuildDuration: d.BuildDuration(), FinishedAt: d.FinishedAt,
	}
}
