package main

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/assemble"
	"github.com/keelson-dev/keelson/deployments/ingress"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/events"
	"github.com/keelson-dev/keelson/projects"
	"github.com/keelson-dev/keelson/projects/domains"
)

// hostSyncEvery is how often an ingress reloads every active custom domain
// from the database: changes made in this process route at once
// (domains.Service.ActiveChanged); this picks up those of other processes (an
// API replica's domain delete, another worker's recheck).
const hostSyncEvery = 30 * time.Second

// hostRoutes keeps the ingress's custom hostnames (ingress.Router.SetHosts)
// equal to the active custom domains: the DNS step routes a project's own
// (RouteHosts), and every change of the domains module reloads them all
// (sync), so a deleted or deactivated domain, or a deleted project's, stops
// being served at once.
type hostRoutes struct {
	domains  *domains.Service
	projects *projects.Service
	router   *ingress.Router
	// certificate says whether a hostname's certificate is ready (nil: HTTPS is off).
	certificate func(ctx context.Context, host string) string

	mu sync.Mutex // one reload or project update at a time: the later one reads the later state

	// keepHTTP holds the slugs of the projects whose httpsRedirect is false
	// (projects.KeepHTTPSlugs), reloaded with the custom domains.
	keepHTTP atomic.Pointer[map[string]bool]
	// hsts holds the active custom domains that opted in to HSTS
	// (domains.HSTSHostnames), reloaded with them.
	hsts atomic.Pointer[map[string]bool]
}

var _ deployments.HostRouter = (*hostRoutes)(nil)

// RouteHosts points projectID's active custom domains at slug.
func (h *hostRoutes) RouteHosts(ctx context.Context, projectID, slug string) ([]deployments.HostState, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	names, err := h.domains.ActiveHostnames(ctx, projectID)
	if err != nil {
		return nil, err
	}
	h.router.SetHosts(slug, names)
	out := []deployments.HostState{{Hostname: h.router.Host(slug)}}
	for _, n := range names {
		out = append(out, deployments.HostState{Hostname: n})
	}
	for i := range out {
		out[i].Certificate = "HTTPS is off"
		if h.certificate != nil {
			out[i].Certificate = h.certificate(ctx, out[i].Hostname)
		}
	}
	return out, nil
}

// sync reloads every active custom domain into the ingress, those that
// opted in to HSTS, and the projects that keep plain HTTP.
func (h *hostRoutes) sync(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	all, err := h.domains.ActiveRoutes(ctx)
	if err != nil {
		return err
	}
	hsts, err := h.domains.HSTSHostnames(ctx)
	if err != nil {
		return err
	}
	keep, err := h.projects.KeepHTTPSlugs(ctx)
	if err != nil {
		return err
	}
	h.router.ReplaceHosts(all)
	h.hsts.Store(setOf(hsts))
	h.keepHTTP.Store(setOf(keep))
	return nil
}

func setOf(names []string) *map[string]bool {
	set := make(map[string]bool, len(names))
	for _, n := range names {
		set[n] = true
	}
	return &set
}

// sendsHSTS reports whether host (lower case, no port) is an active custom
// domain that opted in to HSTS: certs.Config.HSTS.
func (h *hostRoutes) sendsHSTS(host string) bool {
	m := h.hsts.Load()
	return m != nil && (*m)[host]
}

// keepsHTTP reports whether host (as a request names it) belongs to a
// project whose httpsRedirect is false: certs.Config.KeepHTTP.
func (h *hostRoutes) keepsHTTP(host string) bool {
	m := h.keepHTTP.Load()
	return m != nil && (*m)[h.router.Slug(host)]
}

// routeHosts wires hostRoutes on router: the deployments' DNS step uses it,
// and it reloads the custom domains at start, on every change the domains
// module publishes (ActiveChanged) and every change of a project's
// httpsRedirect (the projects module's HTTPSRedirectChanged), and every
// hostSyncEvery until shutdown.
func (a *App) routeHosts(router *ingress.Router) *hostRoutes {
	h := &hostRoutes{domains: a.Domains, projects: a.Projects, router: router}
	a.hosts = h
	a.Domains.ActiveChanged().Subscribe(func(ctx context.Context, e domains.ActiveChanged) error {
		a.activeChanged(ctx, e.ProjectID)
		return nil
	})
	a.Projects.Events().HTTPSRedirectChanged.Subscribe(events.Notify(func(e projects.HTTPSRedirectChanged) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		a.activeChanged(ctx, e.ProjectID)
	}))
	var loop *platform.Loop
	a.add(platform.Part{
		OnStart: func(sctx context.Context) error {
			if err := h.sync(sctx); err != nil {
				return err
			}
			loop = platform.Every(context.Background(), hostSyncEvery, false, nil, func(ctx context.Context) {
				if err := h.sync(ctx); err != nil && ctx.Err() == nil {
					a.Log.Warn("ingress: reload custom domains", "err", err)
				}
			})
			return nil
		},
		OnClose: func(context.Context) error {
			loop.Stop()
			return nil
		},
	})
	return h
}

// activeChanged follows the domains module's ActiveChanged (and the projects
// module's HTTPSRedirectChanged): reload the custom domains and the
// projects that keep plain HTTP into this process's ingress, if it has one.
func (a *App) activeChanged(ctx context.Context, projectID string) {
	if a.hosts == nil {
		return
	}
	if err := a.hosts.sync(ctx); err != nil {
		a.Log.Warn("ingress: route custom domains", "project_id", projectID, "err", err)
	}
}

// workerIngress builds, for every role but api, the ingress serving the
// apps (KEELSON_INGRESS_ADDR, KEELSON_APPS_DOMAIN; closed last, after the
// apps behind it stopped), the custom domains' routes and HTTPS.
func (a *App) workerIngress(ctx context.Context, d *assemble.Deps, log *slog.Logger) error {
	c := a.Cfg
	if !c.RunsWorker() {
		return nil
	}
	publicPort := 0
	if _, p, err := net.SplitHostPort(c.IngressAddr); err == nil {
		publicPort, _ = strconv.Atoi(p)
	}
	a.meter = ingress.NewMeter() // stored by the bandwidth module (wire_bandwidth.go)
	icfg := ingress.Config{AppsDomain: c.AppsDomain, PublicPort: publicPort, Logger: log, Meter: a.meter}
	if c.Engine == "temporal" {
		// Every ingress forwards the apps other hosts run (assemble: remote routes).
		icfg.ForwardKey, icfg.Self = a.derivedKey("keelson ingress forward v1"), hostAddress(c)
	}
	router, err := ingress.New(icfg)
	if err != nil {
		return &ConfigError{"KEELSON_APPS_DOMAIN", err.Error()}
	}
	// Closed last: after the apps behind it stopped.
	a.onClose(func(context.Context) error { router.Close(); return nil })
	if c.Runtime == "process" {
		log.Warn("KEELSON_RUNTIME=process: builds and apps run as plain processes of the server, NOT isolated from the server or from each other (single-tenant use only; unset KEELSON_RUNTIME to use the Docker runtime)")
	}
	a.Ingress, d.Ingress = router, router
	hosts := a.routeHosts(router)
	d.Service.Hosts = hosts
	return a.ingressHTTPS(ctx, router, hosts, log)
}
