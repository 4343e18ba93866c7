package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/temporal"
	"github.com/keelson-dev/keelson/platform"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
)

// temporalDialTimeout bounds reaching the Temporal frontend at start-up.
const temporalDialTimeout = 15 * time.Second

// temporalDeps runs deployments on Temporal (KEELSON_ENGINE=temporal).
//
// Every role gets the engine the deployments service uses: it starts, syncs
// and cancels workflows on KEELSON_TEMPORAL_TASK_QUEUE, and stops apps by
// asking their workflows (temporal.ControlRuntime, the service's Runtime),
// wherever they run. Roles all and worker also run a Temporal worker over
// rt, the runtime whose apps this process's ingress serves: the
// returned function builds it once the service exists (nil for role api,
// which has no runtime and runs no step and no app).
func (a *App) temporalDeps(ctx context.Context, d *deployments.Deps, rt appRuntime, log *slog.Logger) (func(*deployments.Service) error, error) {
	c := a.Cfg
	tc, err := dialTemporal(ctx, c, log)
	if err != nil {
		return nil, err
	}
	// Registered before the service's closer: the client closes after it.
	a.onClose(func(context.Context) error { tc.Close(); return nil })
	d.Runtime = temporal.ControlRuntime{Client: tc}
	d.NewEngine = func(ed deployments.EngineDeps) (deployments.Engine, error) {
		return temporal.NewEngine(temporal.EngineConfig{
			Client: tc, TaskQueue: c.TemporalTaskQueue, Store: ed.Store, Projects: ed.Projects, Logs: ed.Logs,
			Activities: ed.Activities, Logger: ed.Logger,
		})
	}
	if rt == nil { // role api
		return nil, nil
	}
	return func(svc *deployments.Service) error {
		// Registered after the service's closer: the apps stop before the
		// log writer, after the worker stopped (the closer below).
		a.onClose(rt.Close)
		workerActs, err := svc.Activities(rt)
		if err != nil {
			return err
		}
		// Kept in the data dir: started again, the worker is the same host.
		hostID, err := platform.StoredID(filepath.Join(c.DataDir, "host-id"))
		if err != nil {
			return &ConfigError{"KEELSON_DATA_DIR", oneLine(err)}
		}
		w, err := temporal.NewWorker(tc, c.TemporalTaskQueue, rt, temporal.WorkerConfig{
			Activities: workerActs, Store: svc.Store(), Logger: log, HostID: hostID, Placer: hostPlacer{a},
			// The build slots across every worker, shared by the embedded
			// engine's rules (plan shares, the FREE pool, fair order).
			PerUser: c.BuildsPerUser, Shares: buildShares{plans: a.Plans, per: cmp.Or(c.BuildsPerUser, DefaultBuildsPerUser)},
			BuildSlots: c.BuildSlots, FreeSlots: c.FreeBuildSlots,
			// A stopping worker lets running steps end a little; Temporal
			// retries what it could not finish on another worker.
			Options: worker.Options{WorkerStopTimeout: 10 * time.Second},
		})
		if err != nil {
			return err
		}
		a.localHost = a.newLocalHost(hostID, w.HostQueue(), w.Cordon)
		started := false
		a.onStart(func(context.Context) error {
			if err := w.Start(); err != nil {
				return &ConfigError{"KEELSON_TEMPORAL_TASK_QUEUE", oneLine(err)}
			}
			started = true
			log.Info("temporal worker polling", "task_queue", c.TemporalTaskQueue, "host_queue", w.HostQueue())
			return nil
		})
		a.onClose(func(context.Context) error {
			if started {
				w.Stop()
			}
			return nil
		})
		return nil
	}, nil
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
