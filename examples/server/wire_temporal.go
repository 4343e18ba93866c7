package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/temporal"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
)

// temporalDialTimeout bounds reaching the Temporal frontend at start-up.
const temporalDialTimeout = 15 * time.Second

// wireTemporal runs deployments on Temporal (KEELSON_ENGINE=temporal).
//
// Every role gets the engine the deployments service uses: it starts, syncs
// and cancels workflows on KEELSON_TEMPORAL_TASK_QUEUE, and stops apps by
// asking their workflows (temporal.ControlRuntime), wherever they run.
// Roles all and worker also run a Temporal worker over rt, the process
// runtime whose apps this process's ingress serves. A process of role api
// has no runtime: it runs no step and no app.
func (a *App) wireTemporal(ctx context.Context, store *deployments.Store, logs *deployments.Logs, src deploySource,
	rt appRuntime, log *slog.Logger) (deployments.Engine, *deployments.Activities, error) {
	c := a.Cfg
	tc, err := dialTemporal(ctx, c, log)
	if err != nil {
		return nil, nil, err
	}
	a.onClose(func(context.Context) error { tc.Close(); return nil })

	// The API side's steps: stopping an app is a signal to its workflow.
	apiActs, err := deployments.NewActivities(deployments.ActivitiesConfig{
		Store: store, Logs: logs, Runtime: temporal.ControlRuntime{Client: tc}, Projects: src, Git: codehostGit{a.edges}, Logger: log,
	})
	if err != nil {
		return nil, nil, err
	}
	eng, err := temporal.NewEngine(temporal.EngineConfig{
		Client: tc, TaskQueue: c.TemporalTaskQueue, Store: store, Projects: src, Logs: logs,
		Activities: apiActs, Logger: log,
	})
	if err != nil {
		return nil, nil, err
	}
	if rt == nil { // role api
		return eng, apiActs, nil
	}

	workerActs, err := deployments.NewActivities(deployments.ActivitiesConfig{
		Store: store, Logs: logs, Runtime: rt, Projects: src, Git: codehostGit{a.edges}, Logger: log,
	})
	if err != nil {
		return nil, nil, err
	}
	w, err := temporal.NewWorker(tc, c.TemporalTaskQueue, rt, temporal.WorkerConfig{
		Activities: workerActs, Store: store, Logger: log,
		// A stopping worker lets running steps end a little; Temporal
		// retries what it could not finish on another worker.
		Options: worker.Options{WorkerStopTimeout: 10 * time.Second},
	})
	if err != nil {
		return nil, nil, err
	}
	started := false
	a.onStart(func(context.Context) error {
		if err := w.Start(); err != nil {
			return &ConfigError{"KEELSON_TEMPORAL_TASK_QUEUE", oneLine(err)}
		}
		started = true
		log.Info("temporal worker polling", "task_queue", c.TemporalTaskQueue, "host_queue", w.HostQueue())
		return nil
	})
	// Registered after the client's closer, so it runs before it.
	a.onClose(func(context.Context) error {
		if started {
			w.Stop()
		}
		return nil
	})
	return eng, apiActs, nil
}

// dialTemporal connects to KEELSON_TEMPORAL_ADDRESS and checks that the
// namespace exists, so a wrong setting stops start-up with one line naming it.
func dialTemporal(ctx context.Context, c Config, log *slog.Logger) (client.Client, error) {
	dctx, cancel := context.WithTimeout(ctx, temporalDialTimeout)
	defer cancel()
	tc, err := client.DialContext(dctx, client.Options{
		HostPort:  c.TemporalAddress,
		Namespace: c.TemporalNamespace,
		Logger:    sdklog.NewStructuredLogger(log.With("component", "temporal")),
	})
	if err != nil {
		return nil, &ConfigError{"KEELSON_TEMPORAL_ADDRESS",
			fmt.Sprintf("cannot reach Temporal at %s: %s", c.TemporalAddress, oneLine(err))}
	}
	_, err = tc.WorkflowService().DescribeNamespace(dctx, &workflowservice.DescribeNamespaceRequest{Namespace: c.TemporalNamespace})
	var nf *serviceerror.NamespaceNotFound
	switch {
	case errors.As(err, &nf):
		tc.Close()
		return nil, &ConfigError{"KEELSON_TEMPORAL_NAMESPACE",
			fmt.Sprintf("namespace %q does not exist on %s", c.TemporalNamespace, c.TemporalAddress)}
	case err != nil:
		tc.Close()
		return nil, &ConfigError{"KEELSON_TEMPORAL_NAMESPACE",
			fmt.Sprintf("cannot read namespace %q on %s: %s", c.TemporalNamespace, c.TemporalAddress, oneLine(err))}
	}
	return tc, nil
}

// oneLine keeps an error on the one line start-up failures print.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
