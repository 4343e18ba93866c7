package deployments

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/keelson-dev/keelson/deployments/internal/pagecache"
	"github.com/keelson-dev/keelson/deployments/logstream"
	"github.com/keelson-dev/keelson/deployments/metric"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/audit"
	"github.com/uptrace/bun"
)

// Deps are what the deployments module needs. New validates them and applies
// the defaults.
type Deps struct {
	// DB holds the deployments tables (Migrations). Required.
	DB *bun.DB
	// Auth authenticates the routes' bearer tokens. Required.
	Auth platform.Authenticator
	// Projects reads the project a deployment builds. Required.
	Projects ProjectSource
	// Access authorises callers by their role on a project. Optional:
	// without it only the project's owner account may act.
	Access Access
	// Runtime does the steps' work for this service's Activities (a process
	// or container runtime; temporal.ControlRuntime in an API-only process,
	// where stopping an app is a signal to its workflow). Required. If it
	// has a Close(context.Context) error method, Close calls it after the
	// engine stopped and before the log writer stops.
	Runtime Runtime
	// NewEngine builds the engine that orchestrates the workflows, over this
	// service's store, logs and activities. Required.
	NewEngine func(EngineDeps) (Engine, error)
	// Git gives clone credentials for private repositories. Optional: nil
	// clones without credentials.
	Git GitCredentials
	// LogTokenKey signs the short-lived log-stream tokens (at least 32 bytes;
	// derive it from the server's secret key). Required.
	LogTokenKey []byte
	// LogTokenTTL is a log token's lifetime. Default 5 minutes.
	LogTokenTTL time.Duration
	// Heartbeat is the interval of SSE comment heartbeats. Default 15 seconds.
	Heartbeat time.Duration
	// Streams, when set, is asked before a log stream opens (a per-user cap on
	// concurrent streams goes here).
	Streams StreamGate
	// Logs tunes the log writer and fan-out (Logger and Clock are taken from
	// Deps when unset there).
	Logs LogsConfig
	// CancelTimeout bounds waiting for a running deployment to stop (cancel,
	// delete, project teardown). Default 2 minutes.
	CancelTimeout time.Duration
	// KeepBuilds is how many replaced deployments of a project keep their
	// build for a rollback (ActivitiesConfig.KeepBuilds). Default 3; -1 none.
	KeepBuilds int
	// ReleaseTimeout bounds stopping, unrouting and cleaning up after a
	// deployment ends. Default 30 seconds.
	ReleaseTimeout time.Duration
	// LogRetention is how long the logs of deployments that ended FAILED or
	// CANCELLED are kept: Start deletes older ones at once and then hourly
	// (LIVE deployments keep theirs). Default 30 days; negative keeps them
	// forever.
	LogRetention time.Duration
	// Clock stamps every stored time. Default platform.SystemClock.
	Clock platform.Clock
	// Logger gets the module's own log records. Default: discarded.
	Logger *slog.Logger
	// Metrics is told about builds, stored log lines and open log streams.
	// Optional: nil records nothing.
	Metrics Metrics
	// Hosts routes a project's custom domains with its apps-domain host in
	// the DNS step. Optional: nil serves the apps-domain host only.
	Hosts HostRouter
	// Audit records deployments asked for, cancelled and deleted by a
	// person, in their transaction. Optional.
	Audit audit.Recorder
	// ListCacheBytes bounds the encoded pages of a project's deployments kept
	// (internal/pagecache). Default 16 MiB; negative turns it off (and Rows).
	ListCacheBytes int64
}

// EngineDeps are what Deps.NewEngine gets: the parts New built, behind the
// small interfaces engines use.
type EngineDeps struct {
	Store      EngineStore
	Logs       LogFlusher
	Activities *Activities
	// ActivitiesFor returns activities like Activities but over rt: a
	// Temporal worker runs its steps with the runtime whose apps this
	// process serves, while the service's Runtime only signals workflows.
	ActivitiesFor func(rt Runtime) (*Activities, error)
	Projects      ProjectSource
	Clock         platform.Clock
	Logger        *slog.Logger
}

// EngineStore is what engines and workers read and write of the deployments
// directly (a *Store); every step goes through Activities.
type EngineStore interface {
	DeploymentGet(ctx context.Context, id string) (*Deployment, error)
	DeploymentsWhere(ctx context.Context, f Filter) ([]*Deployment, error)
	DeploymentRequestCancel(ctx context.Context, id string) error
	DeploymentSetHost(ctx context.Context, id, host string) error // where the app runs (Deployment.Host)
	// The build slots of engines that run in several processes.
	BuildSlotAcquire(ctx context.Context, req SlotRequest, policy SlotPolicy) (SlotAnswer, error)
	BuildSlotRenew(ctx context.Context, id string, until time.Time) error
	BuildSlotRelease(ctx context.Context, id string, policy SlotPolicy, lease time.Duration) error
}

// LogFlusher stores the log lines written so far (a *Logs): an engine that
// hands a deployment to another process flushes first, so the lines the API
// wrote come before the worker's.
type LogFlusher interface {
	Flush(ctx context.Context) error
}

func (d Deps) validate() error {
	var errs platform.Problems
	errs.Require("Deps.DB", d.DB != nil)
	errs.Require("Deps.Auth", d.Auth != nil)
	errs.Require("Deps.Projects", d.Projects != nil)
	errs.Require("Deps.Runtime", d.Runtime != nil)
	errs.Require("Deps.NewEngine", d.NewEngine != nil)
	if len(d.LogTokenKey) < 32 {
		errs = append(errs, errors.New("Deps.LogTokenKey must be at least 32 bytes"))
	}
	return errors.Join(errs...)
}

func (d Deps) withDefaults() Deps {
	d.Clock = cmp.Or[platform.Clock](d.Clock, platform.SystemClock{})
	d.Logger = cmp.Or(d.Logger, slog.New(slog.DiscardHandler))
	if d.LogTokenTTL <= 0 {
		d.LogTokenTTL = 5 * time.Minute
	}
	if d.Heartbeat <= 0 {
		d.Heartbeat = 15 * time.Second
	}
	if d.CancelTimeout <= 0 {
		d.CancelTimeout = 2 * time.Minute
	}
	d.ReleaseTimeout = cmp.Or(d.ReleaseTimeout, 30*time.Second)
	d.ListCacheBytes = cmp.Or(d.ListCacheBytes, 16<<20)
	d.LogRetention = cmp.Or(d.LogRetention, DefaultLogRetention)
	d.Logs.Logger = cmp.Or(d.Logs.Logger, d.Logger)
	d.Metrics = cmp.Or[Metrics](d.Metrics, metric.None{})
	d.Logs.Metrics = cmp.Or[logstream.Metrics](d.Logs.Metrics, d.Metrics)
	d.Logs.Clock = cmp.Or(d.Logs.Clock, d.Clock)
	return d
}

// New validates d, builds the store, the log writer, the activities and (via
// d.NewEngine) the engine, and returns the service. It returns an error for a
// bad Deps; it never panics. Close releases what it started (the log writer)
// even if Start was never called.
func New(d Deps) (*Service, error) {
	if err := d.validate(); err != nil {
		return nil, fmt.Errorf("deployments: %w", err)
	}
	d = d.withDefaults()
	store := newStore(d.DB, d.Clock)
	store.audit = d.Audit
	lists := pagecache.New(d.DB, d.ListCacheBytes, d.Logger)
	store.changed = lists.Changed
	logs := NewLogs(store, d.Logs)
	acts, err := NewActivities(d.activitiesConfig(store, logs, d.Runtime))
	if err != nil {
		logs.Close()
		return nil, err
	}
	actsFor := func(rt Runtime) (*Activities, error) { return NewActivities(d.activitiesConfig(store, logs, rt)) }
	eng, err := d.NewEngine(EngineDeps{Store: store, Logs: logs, Activities: acts, ActivitiesFor: actsFor, Projects: d.Projects, Clock: d.Clock, Logger: d.Logger})
	if err == nil && eng == nil {
		err = errors.New("deployments: Deps.NewEngine returned no engine")
	}
	if err != nil {
		logs.Close()
		return nil, err
	}
	finished := pagecache.NewRows(lists, 10_000, store.DeploymentGet, func(d *Deployment) (string, bool) { return d.ProjectID, d.Status.Terminal() })
	return &Service{d: d, store: store, lists: lists, finished: finished, logs: logs, acts: acts, engine: eng, projects: d.Projects,
		clock: d.Clock, log: d.Logger, cancelTO: d.CancelTimeout, streams: logstream.NewStreams(logs, d.Heartbeat),
		retention: &logstream.Retention{SQL: store.SQL, Hub: logs, Keep: d.LogRetention, Clock: d.Clock, Log: d.Logger}}, nil
}

// DefaultLogRetention is Deps.LogRetention's default.
const DefaultLogRetention = 30 * 24 * time.Hour

// Start starts the list cache's listener (Postgres), the engine when it runs
// work in this process (the embedded engine settles what a previous run left
// and starts its worker loop), then the hourly log retention (see PurgeLogs).
func (s *Service) Start(ctx context.Context) error {
	s.lists.Start()
	if st, ok := s.engine.(interface{ Start(context.Context) error }); ok {
		if err := st.Start(ctx); err != nil {
			return err
		}
	}
	s.retention.Start()
	return nil
}

// Close stops the log retention, then the engine (running steps end; the next start settles them),
// then the runtime's apps (when Deps.Runtime has Close), then the log writer
// (the apps' last lines are stored first), then the log streams.
func (s *Service) Close(ctx context.Context) error {
	s.retention.Stop()
	s.lists.Close()
	var errs []error
	if c, ok := s.engine.(interface{ Close() error }); ok {
		errs = append(errs, c.Close())
	}
	if c, ok := s.d.Runtime.(interface{ Close(context.Context) error }); ok {
		errs = append(errs, c.Close(ctx))
	}
	s.logs.Close()
	// The log streams ended with their subscriptions; close what is left of
	// their connections (a stream blocked writing to a client that does not
	// read) and wait for their goroutines.
	errs = append(errs, s.streams.Close(ctx), s.store.byID.Close())
	return errors.Join(errs...)
}

func (d Deps) activitiesConfig(store *Store, logs *Logs, rt Runtime) ActivitiesConfig {
	return ActivitiesConfig{Store: store, Logs: logs, Runtime: rt, Projects: d.Projects, Git: d.Git, Logger: d.Logger,
		ReleaseTimeout: d.ReleaseTimeout, Clock: d.Clock, Metrics: d.Metrics, Hosts: d.Hosts, KeepBuilds: d.KeepBuilds}
}

var _ platform.Module = (*Service)(nil)

// Migrations returns the module's tables (the package's Migrations), for platform.Module.
func (s *Service) Migrations() platform.MigrationSet { return Migrations() }
