package main

import (
	"bufio"
	"context"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/hosts"
)

// hostHeartbeat is how often a worker tells the hosts register it is alive.
const hostHeartbeat = 10 * time.Second

// buildHosts adds the hosts register (deployments/hosts): the ADMIN routes
// in every role; with the Temporal engine, a process that runs a worker
// registers its host (temporalDeps set a.localHost) and keeps it alive.
func (a *App) buildHosts(context.Context) error {
	svc, err := hosts.New(hosts.Deps{DB: a.DB, Auth: a.Authn, Log: a.Log.With("module", "hosts"),
		Local: a.localHost, HeartbeatEvery: hostHeartbeat, DownAfter: a.Cfg.HostDownAfter})
	if err != nil {
		return err
	}
	a.add(svc)
	a.Hosts = svc
	return nil
}

// liveLister finds this host's LIVE deployments (the deployments store).
type liveLister interface {
	DeploymentsWhere(ctx context.Context, f deployments.Filter) ([]*deployments.Deployment, error)
}

// newLocalHost describes this machine for the hosts register: the worker's
// host id and queue, where other machines reach its ingress, its memory
// and CPUs, and how to count its LIVE apps.
func (a *App) newLocalHost(id, queue string, store liveLister, cordon func(bool) error) *hosts.Local {
	name, _ := os.Hostname()
	addr := a.Cfg.HostAddress
	if addr == "" {
		_, port, _ := net.SplitHostPort(a.Cfg.IngressAddr)
		addr = net.JoinHostPort(name, port)
	}
	log := a.Log.With("module", "hosts")
	return &hosts.Local{
		Host: hosts.Host{ID: id, Queue: queue, Name: name, Address: addr,
			MemoryMB: memTotalMB(), CPUs: runtime.NumCPU(), MaxApps: a.Cfg.HostMaxApps},
		CountApps: func(ctx context.Context) (int, error) {
			ds, err := store.DeploymentsWhere(ctx, deployments.Filter{Statuses: []deployments.Status{deployments.StatusLive}, Host: queue})
			return len(ds), err
		},
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
