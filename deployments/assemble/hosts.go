package assemble

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/fleet"
	"github.com/keelson-dev/keelson/deployments/hosts"
	"github.com/keelson-dev/keelson/deployments/ingress"
	"github.com/keelson-dev/keelson/deployments/temporal"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// Host are this machine's settings in the hosts register.
type Host struct {
	// Address is where other hosts' ingresses reach this one.
	Address string
	// MaxApps caps the LIVE apps placed here (0: no cap).
	MaxApps int
	// HeartbeatEvery and DownAfter are the register's (hosts.Deps).
	HeartbeatEvery, DownAfter time.Duration
}

// RemoteEvery is how often an ingress reloads the routes other hosts serve
// when nothing tells it of a change (SQLite); RemoteSafetyEvery when
// Postgres announces each change (fleet.RouteChannel) and the reload runs
// on it at once.
const (
	RemoteEvery       = time.Second
	RemoteSafetyEvery = 10 * time.Second
)

// buildHosts adds the hosts register (deployments/hosts): the ADMIN routes
// in every role; with the Temporal engine, a process that runs a worker
// registers its host (m.local) and keeps it alive. A host that stops
// sending heartbeats, or is drained, has each LIVE deployment deployed
// again on a host that answers (fleet.Mover: from its image in the
// registry, else built again; not an app pinned to it), its log saying
// why; a failed move off a down host is tried again (fleet MoveDue: up to
// 5 times per app and outage, 5 s after the first failure, doubling).
func (m *Module) buildHosts(cfg Config, d Deps, store deployments.EngineStore) error {
	q := fleet.Queries{DB: d.Service.DB}
	moveOff := func(ctx context.Context, h *hosts.Host, why string) error {
		return fleet.Mover{Deployments: m.Service, Store: store, PinnedHost: d.PinnedHost}.MoveOffHost(ctx, h, why)
	}
	svc, err := hosts.New(hosts.Deps{DB: d.Service.DB, Auth: d.Service.Auth, Log: d.Logger.With("module", "hosts"),
		Local: m.local, HeartbeatEvery: cfg.Host.HeartbeatEvery, DownAfter: cfg.Host.DownAfter, MoveApps: moveOff,
		Load: q.LoadByHost,
		MoveDue: func(ctx context.Context, h *hosts.Host, now time.Time) (bool, string, error) {
			return q.MoveDue(ctx, h.Queue, h.HeartbeatAt, now, fleet.MoveRetry{})
		},
		HostDown: func(ctx context.Context, h *hosts.Host) error {
			return moveOff(ctx, h, fmt.Sprintf("host %s has sent no heartbeat since %s", h.ID, h.HeartbeatAt.Format(time.RFC3339)))
		}})
	if err != nil {
		return err
	}
	m.Hosts = svc
	m.add(svc)
	return nil
}

// hostPlacer is the Temporal workers' Placer: the hosts register (built
// after the worker, so read when a deployment is placed), asked for the
// deployment's needs (its plan's memory and CPU, recorded on it) on its
// project's pinned host if any. No host with room fails it.
type hostPlacer struct {
	m      *Module
	store  deployments.EngineStore
	pinned func(ctx context.Context, projectID string) (string, error)
}

func (p hostPlacer) Place(ctx context.Context, id string) (temporal.Placement, error) {
	d, err := p.store.DeploymentGet(ctx, id)
	if err != nil {
		return temporal.Placement{}, err
	}
	need := hosts.Need{MemoryMi: d.MemoryMi, CPUm: d.CPUm}
	if p.pinned != nil {
		if need.Pin, err = p.pinned(ctx, d.ProjectID); err != nil {
			return temporal.Placement{}, err
		}
	}
	queue, reason, err := p.m.Hosts.Place(ctx, need)
	if errors.Is(err, hosts.ErrNoRoom) {
		return temporal.Placement{Reason: err.Error(), Refused: true}, nil
	}
	return temporal.Placement{Queue: queue, Reason: reason, Pinned: need.Pin != ""}, err
}

// routeRemote keeps router's remote routes (the apps other hosts run, each
// forwarded to its host's ingress) loaded from the database: at start, then
// on every change Postgres announces (fleet.RouteChannel), so a deployment
// going LIVE on another host is served here within a reload's time, and
// every RemoteSafetyEvery (RemoteEvery without Postgres).
func (m *Module) routeRemote(idb *bun.DB, router *ingress.Router, log *slog.Logger) {
	var loop *platform.Loop
	stopListen := func() {}
	reload := func(ctx context.Context) error {
		live, err := fleet.Queries{DB: idb}.LiveHosts(ctx)
		if err != nil {
			return err
		}
		addrs, err := m.Hosts.Addresses(ctx)
		if err != nil {
			return err
		}
		routes := make(map[string]string, len(live))
		for slug, queue := range live {
			if addr, ok := addrs[queue]; ok {
				routes[slug] = addr
			}
		}
		return router.SetRemote(routes)
	}
	m.add(platform.Part{
		OnStart: func(ctx context.Context) error {
			if err := reload(ctx); err != nil {
				return err
			}
			every, wake := RemoteEvery, fleet.NewRouteWake()
			if db.IsPostgres(idb) {
				every = RemoteSafetyEvery
				stopListen = db.StartListen(idb, wake, db.ListenConfig{Channels: []string{fleet.RouteChannel}, Logger: log})
			}
			loop = platform.Every(context.Background(), every, false, wake, func(ctx context.Context) {
				if err := reload(ctx); err != nil && ctx.Err() == nil {
					log.Warn("ingress: reload the routes of other hosts", "err", err)
				}
			})
			return nil
		},
		OnClose: func(context.Context) error { stopListen(); loop.Stop(); return nil },
	})
}
