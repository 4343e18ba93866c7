// Package assemble builds the deployments module as a host runs it, from
// plain settings (Config) and the services it reads (Deps): the engine (the
// embedded one, or Temporal's), the Temporal worker and this machine's entry
// in the hosts register, and on Postgres the log listener that feeds this
// process's log streams the lines other processes store. A host maps its own
// configuration to Config and adds Modules to its platform.Assembly.
package assemble

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/fleet"
	"github.com/keelson-dev/keelson/deployments/hosts"
	"github.com/keelson-dev/keelson/deployments/ingress"
	"github.com/keelson-dev/keelson/deployments/local"
	"github.com/keelson-dev/keelson/deployments/pgnotify"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// Engines and roles of Config.
const (
	EngineLocal    = "local"
	EngineTemporal = "temporal"
	RoleAll        = "all"
	RoleAPI        = "api"
	RoleWorker     = "worker"
)

// Config are the assembly's settings.
type Config struct {
	// Engine is EngineLocal (the default: the embedded engine, with RoleAll
	// only) or EngineTemporal.
	Engine string
	// Role is what this process does with the Temporal engine: RoleAll (the
	// default) starts workflows and runs their steps and apps, RoleAPI only
	// starts them, RoleWorker only runs them (and serves no log stream).
	Role string
	// BuildSlots is how many deployments build at once, FreeBuildSlots how
	// many of them owners on a FREE plan hold, BuildsPerUser one owner's
	// share when Deps.Shares has none (local.Config, temporal.WorkerConfig).
	BuildSlots, FreeBuildSlots, BuildsPerUser int
	// DataDir keeps the Temporal worker's host id (host-id), so a worker
	// started again is the same host.
	DataDir string
	// Runtime chooses the runtime, unless Deps.Runtime is given.
	Runtime RuntimeConfig
	// Temporal is where the Temporal engine runs its workflows.
	Temporal Temporal
	// Host describes this machine in the hosts register (Temporal workers).
	Host Host
	// Problem is the error naming a bad setting, field being its Config
	// field's path ("Temporal.Address"), so a host can name it as its users
	// set it. Default: an error "field: problem".
	Problem func(field, problem string) error
}

// Temporal are the Temporal engine's settings.
type Temporal struct {
	Address, Namespace, TaskQueue string
	// DialTimeout bounds reaching the frontend at start-up. Default 15s.
	DialTimeout time.Duration
}

// Deps are the assembly's services.
type Deps struct {
	// Service are the deployments service's Deps; New sets their Runtime
	// and NewEngine, and their Logger when unset.
	Service deployments.Deps
	// Ingress serves the apps this process runs: required unless Role is
	// RoleAPI (nil there: no step and no app runs here).
	Ingress *ingress.Router
	// Runtime runs the steps and the apps in this process. Optional: by
	// default Config.Runtime's, over Ingress. The assembly owns it: it
	// closes after the engine and the worker stopped, before the log writer.
	Runtime Runtime
	// Shares gives each owner's share of the build slots. Optional.
	Shares deployments.Shares
	// PinnedHost gives the host id a project is pinned to ("" for none):
	// its deployments are placed there only, and its app is not moved off
	// it. Optional: no project is pinned.
	PinnedHost func(ctx context.Context, projectID string) (string, error)
	// Logger is the host's; the assembly's records carry module=deployments
	// (module=hosts for the hosts register). Default: discarded.
	Logger *slog.Logger
}

// Runtime runs builds and apps here, and stops them all on Close.
type Runtime interface {
	deployments.Runtime
	Close(ctx context.Context) error
}

// Module is the assembled deployments module: the service and the parts
// around it, in the order a host starts them (Modules).
type Module struct {
	// Service is the deployments service.
	Service *deployments.Service
	// Hosts is the register of the machines that run apps.
	Hosts  *hosts.Service
	mods   []platform.Module
	engine *local.Engine // the embedded engine, for its queue depth
	local  *hosts.Local  // this machine in the hosts register, when it runs a Temporal worker
}

func (c Config) withDefaults() Config {
	if c.Problem == nil {
		c.Problem = func(field, problem string) error { return fmt.Errorf("%s: %s", field, problem) }
	}
	return c
}

func (d Deps) withDefaults() Deps {
	d.Logger = cmp.Or(d.Logger, slog.New(slog.DiscardHandler))
	d.Service.Logger = cmp.Or(d.Service.Logger, d.Logger.With("module", "deployments"))
	return d
}

// New builds the module. On error it closes what it built (the runtime too).
func New(ctx context.Context, cfg Config, d Deps) (_ *Module, err error) {
	cfg, d = cfg.withDefaults(), d.withDefaults()
	log := d.Service.Logger
	m := &Module{}
	owned := false // whether d.Runtime is closed by a part of m
	defer func() {
		if err != nil {
			err = errors.Join(err, m.close(ctx))
			if d.Runtime != nil && !owned {
				_ = d.Runtime.Close(ctx)
			}
		}
	}()
	if d.Runtime == nil && d.Ingress != nil && cfg.Role != RoleAPI {
		if d.Runtime, err = newRuntime(ctx, cfg.Runtime, d.Ingress, log); err != nil {
			return nil, err
		}
	}
	var worker func(ed deployments.EngineDeps) error
	if cfg.Engine == EngineTemporal {
		if d.Ingress != nil {
			// Every ingress forwards the apps other hosts run.
			m.routeRemote(d.Service.DB, d.Ingress, log)
		}
		if worker, err = m.temporal(ctx, cfg, &d, log); err != nil {
			return nil, err
		}
	} else {
		// The embedded engine (RoleAll only). The service owns the runtime:
		// its Close stops the engine, then the apps, then the log writer.
		if d.Runtime == nil {
			return nil, cfg.Problem("Role", "the local engine needs role all")
		}
		d.Service.Runtime = d.Runtime
		d.Service.NewEngine = func(ed deployments.EngineDeps) (deployments.Engine, error) {
			e, err := local.New(local.Config{Store: ed.Store, Activities: ed.Activities, Logger: ed.Logger,
				MaxConcurrent: cfg.BuildSlots, FreeSlots: cfg.FreeBuildSlots, PerUser: cfg.BuildsPerUser, Shares: d.Shares})
			m.engine = e
			return e, err
		}
	}
	var ed deployments.EngineDeps // what the engine got, for the worker
	newEngine := d.Service.NewEngine
	d.Service.NewEngine = func(e deployments.EngineDeps) (deployments.Engine, error) { ed = e; return newEngine(e) }
	svc, err := deployments.New(d.Service)
	if err != nil {
		return nil, err
	}
	// The engine starts after migrations (settling deployments a previous
	// run left mid-way and starting LIVE apps again).
	m.Service = svc
	m.add(svc)
	owned = cfg.Engine != EngineTemporal // the service closes it
	if worker != nil {
		// Added after the service: the apps stop before the log writer,
		// after the worker stopped.
		m.add(platform.Part{OnClose: d.Runtime.Close})
		owned = true
		if err := worker(ed); err != nil {
			return nil, err
		}
	}
	if db.IsPostgres(d.Service.DB) {
		// Every role installs the triggers (workers' lines must notify);
		// only processes with log streams listen.
		m.add(platform.Part{Schema: pgnotify.Migrations()})
		if cfg.Role != RoleWorker {
			m.listenLogs(d.Service.DB, svc.Logs(), log)
		}
	}
	if err := m.buildHosts(cfg, d, ed.Store); err != nil {
		return nil, err
	}
	if cfg.Engine == EngineTemporal {
		// After the deployments and hosts tables: the triggers announcing
		// route changes to every ingress (Postgres only).
		m.add(platform.Part{Schema: fleet.Migrations()})
	}
	return m, nil
}

// Modules are the module's parts in start order: the remote routes and the
// Temporal client, the service, the worker, the log listener, the hosts
// register. A host adds them to its platform.Assembly, which closes them in
// reverse.
func (m *Module) Modules() []platform.Module { return m.mods }

// QueueDepth is the embedded engine's QUEUED deployments waiting for their
// turn; nil with the Temporal engine.
func (m *Module) QueueDepth() interface{ QueueDepth() int } {
	if m.engine == nil {
		return nil
	}
	return m.engine
}

func (m *Module) add(mod platform.Module) { m.mods = append(m.mods, mod) }

// close closes the parts built so far, in reverse (New's error path).
func (m *Module) close(ctx context.Context) error {
	var errs []error
	for i := len(m.mods) - 1; i >= 0; i-- {
		errs = append(errs, m.mods[i].Close(ctx))
	}
	return errors.Join(errs...)
}

// listenLogs feeds the log hub what other processes store (Postgres
// LISTEN/NOTIFY) from start-up until shutdown.
func (m *Module) listenLogs(idb *bun.DB, logs *deployments.Logs, log *slog.Logger) {
	var loop *platform.Loop
	m.add(platform.Part{
		OnStart: func(context.Context) error {
			// Listen returns only when the first LISTEN fails (the database is
			// away): streams still end from the database; try again shortly.
			loop = platform.Every(context.Background(), 5*time.Second, true, nil, func(ctx context.Context) {
				if err := pgnotify.Listen(ctx, idb, logs, pgnotify.Config{Logger: log}); ctx.Err() == nil {
					log.Warn("listen for deployment logs of other processes", "err", err)
				}
			})
			return nil
		},
		OnClose: func(context.Context) error {
			loop.Stop()
			return nil
		},
	})
}
