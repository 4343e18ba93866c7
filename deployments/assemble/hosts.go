package assemble

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/keelson-dev/keelson/deployments/fleet"
	"github.com/keelson-dev/keelson/deployments/hosts"
	"github.com/keelson-dev/keelson/deployments/ingress"
	"github.com/keelson-dev/keelson/platform"
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

// RemoteEvery is how often an ingress reloads the routes other hosts serve.
const RemoteEvery = time.Second

// buildHosts adds the hosts register (deployments/hosts): the ADMIN routes
// in every role; with the Temporal engine, a process that runs a worker
// registers its host (m.local) and keeps it alive. A host that stops
// sending heartbeats, or is drained, has each LIVE deployment deployed
// again on a host that answers (deployments.Service.MoveOffHost: from its
// image in the registry, else built again), its log saying why.
func (m *Module) buildHosts(cfg Config, d Deps) error {
	moveOff := func(ctx context.Context, h *hosts.Host, why string) error {
		return m.Service.MoveOffHost(ctx, h.Queue, why)
	}
	svc, err := hosts.New(hosts.Deps{DB: d.Service.DB, Auth: d.Service.Auth, Log: d.Logger.With("module", "hosts"),
		Local: m.local, HeartbeatEvery: cfg.Host.HeartbeatEvery, DownAfter: cfg.Host.DownAfter, MoveApps: moveOff,
		Placed: fleet.Queries{DB: d.Service.DB}.PlacedByHost,
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
// after the worker, so read when a deployment is placed).
type hostPlacer struct{ m *Module }

func (p hostPlacer) Place(ctx context.Context) (queue, reason string, err error) {
	return p.m.Hosts.Place(ctx)
}

// routeRemote keeps router's remote routes (the apps other hosts run, each
// forwarded to its host's ingress) loaded from the database: at start, then
// every RemoteEvery, so a deployment going LIVE on another host is served
// here within about a second.
func (m *Module) routeRemote(idb *bun.DB, router *ingress.Router, log *slog.Logger) {
	var loop *platform.Loop
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
			loop = platform.Every(context.Background(), RemoteEvery, false, nil, func(ctx context.Context) {
				if err := reload(ctx); err != nil && ctx.Err() == nil {
					log.Warn("ingress: reload the routes of other hosts", "err", err)
				}
			})
			return nil
		},
		OnClose: func(context.Context) error { loop.Stop(); return nil },
	})
}
