package temporal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/keelson-dev/keelson/deployments"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
)

// EngineConfig are the dependencies of the client side of the Temporal engine
// (what API replicas run).
type EngineConfig struct {
	Client    client.Client // required
	TaskQueue string        // required: the queue the workers poll
	Store     DeploymentGetter
	// Projects gives the plan's build timeout when a workflow starts. Required.
	Projects deployments.ProjectSource
	// Logs, when set, is flushed before a workflow starts, so the lines the API
	// wrote ("deployment queued") are stored before a worker numbers its own
	// after them.
	Logs deployments.LogFlusher
	// Activities, when set, lets Cancel end a deployment that no worker has
	// picked up yet at once (deployments.Activities.CancelQueued).
	Activities *deployments.Activities
	// Timeouts of the workflow's activities (see Timeouts).
	Timeouts Timeouts
	// PollInterval is how often Cancel re-reads a deployment it waits for. Default 200ms.
	PollInterval time.Duration
	Logger       *slog.Logger
}

// DeploymentGetter reads one deployment (a *deployments.Store).
type DeploymentGetter interface {
	DeploymentGet(ctx context.Context, id string) (*deployments.Deployment, error)
}

// Engine is deployments.Engine on Temporal: each deployment is a workflow whose
// id is its workflowName, run by workers built with NewWorker.
type Engine struct {
	cfg EngineConfig
	log *slog.Logger
}

var _ deployments.Engine = (*Engine)(nil)

// NewEngine checks cfg and returns the engine.
func NewEngine(cfg EngineConfig) (*Engine, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("temporal: EngineConfig.Client is required")
	case cfg.TaskQueue == "":
		return nil, errors.New("temporal: EngineConfig.TaskQueue is required")
	case cfg.Store == nil:
		return nil, errors.New("temporal: EngineConfig.Store is required")
	case cfg.Projects == nil:
		return nil, errors.New("temporal: EngineConfig.Projects is required")
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 200 * time.Millisecond
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Engine{cfg: cfg, log: log}, nil
}

// StartWorkflow starts d's workflow (id = WorkflowID(d.ID)). Starting it again
// returns the same name and starts nothing.
func (e *Engine) StartWorkflow(ctx context.Context, d *deployments.Deployment) (string, error) {
	spec, err := e.cfg.Projects.ProjectForDeploy(ctx, d.ProjectID)
	if err != nil {
		return "", fmt.Errorf("temporal: read project for deployment %s: %w", d.ID, err)
	}
	if e.cfg.Logs != nil {
		if err := e.cfg.Logs.Flush(ctx); err != nil {
			return "", err
		}
	}
	in := Input{DeploymentID: d.ID, BuildTimeout: spec.Limits.BuildTimeout, Timeouts: e.cfg.Timeouts}
	if d.RollbackOf != "" {
		// A rollback's BUILD reuses a build kept on the host that made it,
		// unless its image is in the registry: then any host pulls it.
		from, err := e.cfg.Store.DeploymentGet(ctx, d.RollbackOf)
		if err != nil {
			return "", fmt.Errorf("temporal: read deployment %s to roll back to: %w", d.RollbackOf, err)
		}
		if from.Image == "" {
			in.BuildQueue = from.Host
		}
	}
	id := WorkflowID(d.ID)
	_, err = e.cfg.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       id,
		TaskQueue:                e.cfg.TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
	}, WorkflowType, in)
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if err != nil && !errors.As(err, &started) {
		return "", fmt.Errorf("temporal: start workflow %s: %w", id, err)
	}
	return id, nil
}

// Sync describes d's workflow. While it runs, or when it ended normally, the
// activities have recorded everything and the stored state is the answer.
// When it ended without recording (terminated, timed out, or its last
// activity could not write), the answer is FAILED or CANCELLED.
func (e *Engine) Sync(ctx context.Context, d *deployments.Deployment) (*deployments.State, error) {
	st := deployments.StateOf(d)
	if d.Status.Terminal() && d.Status != deployments.StatusLive {
		return st, nil
	}
	desc, err := e.cfg.Client.DescribeWorkflowExecution(ctx, workflowID(d), "")
	if err != nil {
		return nil, fmt.Errorf("temporal: describe workflow of deployment %s: %w", d.ID, err)
	}
	info := desc.GetWorkflowExecutionInfo()
	var msg string
	switch info.GetStatus() {
	case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED,
		enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW:
		return st, nil
	case enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED:
		if d.Status.Terminal() {
			return st, nil
		}
		return ended(st, deployments.StatusCancelled, "cancelled", closeTime(info.GetCloseTime().AsTime())), nil
	case enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED:
		msg = "the deployment workflow was terminated"
	case enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT:
		msg = "the deployment workflow timed out"
	default: // FAILED
		msg = "the deployment workflow failed"
	}
	if d.Status == deployments.StatusLive {
		return st, nil // its app was started and routed; only its release was lost
	}
	if d.ErrorMessage != "" {
		msg = d.ErrorMessage
	}
	return ended(st, deployments.StatusFailed, msg, closeTime(info.GetCloseTime().AsTime())), nil
}

// Cancel cancels d's workflow (its running step's context is cancelled
// through the activity's heartbeat and the runtime kills its processes) and
// waits until the deployment is terminal or ctx ends.
func (e *Engine) Cancel(ctx context.Context, d *deployments.Deployment) error {
	err := e.cfg.Client.CancelWorkflow(ctx, workflowID(d), "")
	var nf *serviceerror.NotFound
	noWorkflow := errors.As(err, &nf)
	if err != nil && !noWorkflow {
		return fmt.Errorf("temporal: cancel workflow of deployment %s: %w", d.ID, err)
	}
	if noWorkflow && e.cfg.Activities != nil {
		// Nothing runs it (the start was lost): record the cancellation here.
		return e.cfg.Activities.Finish(ctx, d.ID, context.Canceled)
	}
	if e.cfg.Activities != nil {
		// Not started yet (e.g. no worker is up): end it now. BUILD only
		// starts from QUEUED, so whichever of the two goes first wins cleanly.
		if _, err := e.cfg.Activities.CancelQueued(ctx, d.ID); err != nil {
			return err
		}
	}
	t := time.NewTicker(e.cfg.PollInterval)
	defer t.Stop()
	for {
		cur, err := e.cfg.Store.DeploymentGet(ctx, d.ID)
		if err != nil {
			return err
		}
		if cur.Status.Terminal() {
			return nil
		}
		// A workflow that ended without recording its end (terminated) will not record it now.
		if st, err := e.Sync(ctx, cur); err == nil && st.Status.Terminal() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// WorkflowState queries the running workflow's own view of d (QueryState).
// It needs a worker to answer.
func (e *Engine) WorkflowState(ctx context.Context, deploymentID string) (State, error) {
	var st State
	v, err := e.cfg.Client.QueryWorkflow(ctx, WorkflowID(deploymentID), "", QueryState)
	if err != nil {
		return st, err
	}
	err = v.Get(&st)
	return st, err
}

func closeTime(t time.Time) time.Time {
	if t.IsZero() || t.Unix() <= 0 {
		return time.Now().UTC().Truncate(time.Microsecond)
	}
	return t.UTC().Truncate(time.Microsecond)
}

// ended returns st ended with status and msg: the running step FAILED, the
// pending ones SKIPPED.
func ended(st *deployments.State, status deployments.Status, msg string, at time.Time) *deployments.State {
	st.Status, st.ErrorMessage, st.FinishedAt = status, msg, at
	st.Steps = append(deployments.Steps(nil), st.Steps...)
	for i := range st.Steps {
		switch st.Steps[i].Status {
		case deployments.StepRunning:
			st.Steps[i].Status, st.Steps[i].FinishedAt = deployments.StepFailed, &at
		case deployments.StepPending:
			st.Steps[i].Status = deployments.StepSkipped
		}
	}
	return st
}
