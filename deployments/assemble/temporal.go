package assemble

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/fleet"
	"github.com/keelson-dev/keelson/deployments/hosts"
	"github.com/keelson-dev/keelson/deployments/temporal"
	"github.com/keelson-dev/keelson/platform"
)

// temporal runs deployments on Temporal (EngineTemporal).
//
// Every role gets the engine the deployments service uses: it starts, syncs
// and cancels workflows on Temporal.TaskQueue, and stops apps by asking
// their workflows (temporal.ControlRuntime, the service's Runtime), wherever
// they run. Roles all and worker also run a Temporal worker over d.Runtime,
// the runtime whose apps this process's ingress serves: the returned
// function builds it once the service exists (nil for role api, which has no
// runtime and runs no step and no app).
func (m *Module) temporal(ctx context.Context, cfg Config, d *Deps, log *slog.Logger) (func(deployments.EngineDeps) error, error) {
	tc, err := dialTemporal(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	// Added before the service: the client closes after it.
	m.add(platform.Part{OnClose: func(context.Context) error { tc.Close(); return nil }})
	queue := cfg.Temporal.TaskQueue
	d.Service.Runtime = temporal.ControlRuntime{Client: tc}
	d.Service.NewEngine = func(ed deployments.EngineDeps) (deployments.Engine, error) {
		return temporal.NewEngine(temporal.EngineConfig{
			Client: tc, TaskQueue: queue, Store: ed.Store, Projects: ed.Projects, Logs: ed.Logs,
			Activities: ed.Activities, Logger: ed.Logger,
		})
	}
	if d.Runtime == nil { // role api
		return nil, nil
	}
	rt := d.Runtime
	return func(ed deployments.EngineDeps) error {
		workerActs, err := ed.ActivitiesFor(rt)
		if err != nil {
			return err
		}
		// Kept in the data dir: started again, the worker is the same host.
		hostID, err := platform.StoredID(filepath.Join(cfg.DataDir, "host-id"))
		if err != nil {
			return cfg.Problem("DataDir", oneLine(err))
		}
		w, err := temporal.NewWorker(tc, queue, rt, temporal.WorkerConfig{
			Activities: workerActs, Store: ed.Store, Logger: log, HostID: hostID,
			Placer: hostPlacer{m: m, store: ed.Store, pinned: d.PinnedHost},
			// The build slots across every worker, shared by the embedded
			// engine's rules (plan shares, the FREE pool, fair order).
			PerUser: cfg.BuildsPerUser, Shares: d.Shares, BuildSlots: cfg.BuildSlots, FreeSlots: cfg.FreeBuildSlots,
			// A stopping worker lets running steps end a little; Temporal
			// retries what it could not finish on another worker.
			Options: worker.Options{WorkerStopTimeout: 10 * time.Second},
		})
		if err != nil {
			return err
		}
		m.local = newLocalHost(cfg.Host, hostID, w.HostQueue(), fleet.Queries{DB: d.Service.DB}, w.Cordon, d.Logger.With("module", "hosts"))
		started := false
		m.add(platform.Part{
			OnStart: func(context.Context) error {
				if err := w.Start(); err != nil {
					return cfg.Problem("Temporal.TaskQueue", oneLine(err))
				}
				started = true
				log.Info("temporal worker polling", "task_queue", queue, "host_queue", w.HostQueue())
				return nil
			},
			OnClose: func(context.Context) error {
				if started {
					w.Stop()
				}
				return nil
			},
		})
		return nil
	}, nil
}

// dialTemporal connects to Temporal.Address and checks that the namespace
// exists, so a wrong setting stops start-up with one line naming it.
func dialTemporal(ctx context.Context, cfg Config, log *slog.Logger) (client.Client, error) {
	t := cfg.Temporal
	dctx, cancel := context.WithTimeout(ctx, cmp.Or(t.DialTimeout, 15*time.Second))
	defer cancel()
	tc, err := client.DialContext(dctx, client.Options{
		HostPort:  t.Address,
		Namespace: t.Namespace,
		Logger:    sdklog.NewStructuredLogger(log.With("component", "temporal")),
	})
	if err != nil {
		return nil, cfg.Problem("Temporal.Address", fmt.Sprintf("cannot reach Temporal at %s: %s", t.Address, oneLine(err)))
	}
	_, err = tc.WorkflowService().DescribeNamespace(dctx, &workflowservice.DescribeNamespaceRequest{Namespace: t.Namespace})
	var nf *serviceerror.NamespaceNotFound
	switch {
	case errors.As(err, &nf):
		tc.Close()
		return nil, cfg.Problem("Temporal.Namespace", fmt.Sprintf("namespace %q does not exist on %s", t.Namespace, t.Address))
	case err != nil:
		tc.Close()
		return nil, cfg.Problem("Temporal.Namespace", fmt.Sprintf("cannot read namespace %q on %s: %s", t.Namespace, t.Address, oneLine(err)))
	}
	return tc, nil
}

// oneLine keeps an error on the one line start-up failures print.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// LocalHost is this machine in the hosts register (hosts.Deps.Local): nil
// unless this process runs a Temporal worker.
func (m *Module) LocalHost() *hosts.Local { return m.local }

// newLocalHost describes this machine for the hosts register: the worker's
// host id and queue, where other machines reach its ingress, its memory
// and CPUs, and how to count its LIVE apps.
func newLocalHost(h Host, id, queue string, q fleet.Queries, cordon func(bool) error, log *slog.Logger) *hosts.Local {
	name, _ := os.Hostname()
	return &hosts.Local{
		Host: hosts.Host{ID: id, Queue: queue, Name: name, Address: h.Address,
			MemoryMB: memTotalMB(), CPUs: runtime.NumCPU(), MaxApps: h.MaxApps},
		CountApps: func(ctx context.Context) (int, error) { return q.CountLive(ctx, queue) },
		Cordoned: func(cordoned bool) {
			if err := cordon(cordoned); err != nil {
				log.Error("hosts: cordon this host's worker", "cordoned", cordoned, "err", err)
			}
		},
	}
}

// memTotalMB is the machine's memory from /proc/meminfo, 0 when unknown.
func memTotalMB() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb / 1024
		}
	}
	return 0
}
