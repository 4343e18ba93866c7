package main

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/keelson-dev/keelson/deployments/fleet"
	"github.com/keelson-dev/keelson/deployments/hosts"
	"github.com/keelson-dev/keelson/deployments/ingress"
	"github.com/keelson-dev/keelson/platform"
)

// hostHeartbeat is how often a worker tells the hosts register it is alive.
const hostHeartbeat = 10 * time.Second

// heartbeat is hostHeartbeat, or the tests' shorter one.
func (c Config) heartbeat() time.Duration { return cmp.Or(c.hostHeartbeat, hostHeartbeat) }

// moveOffHost is the hosts register's HostDown and MoveApps: each LIVE
// deployment of host h is deployed again on a host that answers
// (deployments.Service.MoveOffHost: from its image in the registry, else
// built again), and its log says why.
func (a *App) moveOffHost(ctx context.Context, h *hosts.Host, why string) error {
	return a.Deployments.MoveOffHost(ctx, h.Queue, why)
}

// buildHosts adds the hosts register (deployments/hosts): the ADMIN routes
// in every role; with the Temporal engine, a process that runs a worker
// registers its host (temporalDeps set a.localHost) and keeps it alive.
func (a *App) buildHosts(context.Context) error {
	svc, err := hosts.New(hosts.Deps{DB: a.DB, Auth: a.Authn, Log: a.Log.With("module", "hosts"),
		Local: a.localHost, HeartbeatEvery: a.Cfg.heartbeat(), DownAfter: a.Cfg.HostDownAfter, MoveApps: a.moveOffHost,
		Placed: fleet.Queries{DB: a.DB}.PlacedByHost,
		HostDown: func(ctx context.Context, h *hosts.Host) error {
			return a.moveOffHost(ctx, h, fmt.Sprintf("host %s has sent no heartbeat since %s", h.ID, h.HeartbeatAt.Format(time.RFC3339)))
		}})
	if err != nil {
		return err
	}
	a.add(svc)
	a.Hosts = svc
	return nil
}

// hostAddress is KEELSON_HOST_ADDRESS, else KEELSON_INGRESS_ADDR when it
// names one address, else this machine's name with the ingress port: where
// other hosts' ingresses reach this one.
func hostAddress(c Config) string {
	if c.HostAddress != "" {
		return c.HostAddress
	}
	host, port, _ := net.SplitHostPort(c.IngressAddr)
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return c.IngressAddr
	}
	name, _ := os.Hostname()
	return net.JoinHostPort(name, port)
}

// remoteEvery is how often an ingress reloads the routes other hosts serve.
const remoteEvery = time.Second

// routeRemote keeps router's remote routes (the apps other hosts run, each
// forwarded to its host's ingress) loaded from the database: at start, then
// every remoteEvery, so a deployment going LIVE on another host is served
// here within about a second.
func (a *App) routeRemote(router *ingress.Router, log *slog.Logger) {
	var loop *platform.Loop
	reload := func(ctx context.Context) error {
		live, err := fleet.Queries{DB: a.DB}.LiveHosts(ctx)
		if err != nil {
			return err
		}
		addrs, err := a.Hosts.Addresses(ctx)
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
	a.add(platform.Part{
		OnStart: func(ctx context.Context) error {
			if err := reload(ctx); err != nil {
				return err
			}
			loop = platform.Every(context.Background(), remoteEvery, false, nil, func(ctx context.Context) {
				if err := reload(ctx); err != nil && ctx.Err() == nil {
					log.Warn("ingress: reload the routes of other hosts", "err", err)
				}
			})
			return nil
		},
		OnClose: func(context.Context) error { loop.Stop(); return nil },
	})
}

// derivedKey is a key for one purpose, derived from the installation's JWT
// secret (the same on every process of an installation).
func (a *App) derivedKey(purpose string) []byte {
	mac := hmac.New(sha256.New, a.JWTSecret)
	mac.Write([]byte(purpose))
	return mac.Sum(nil)
}

// hostPlacer is the Temporal workers' Placer: the hosts register (built
// after the deployments module, so read when a deployment is placed).
type hostPlacer struct{ a *App }

func (p hostPlacer) Place(ctx context.Context) (queue, reason string, err error) {
	return p.a.Hosts.Place(ctx)
}
