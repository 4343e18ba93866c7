// Package ingress is Keelson's built-in ingress proxy: an http.Handler that
// routes a request by its Host (<slug>.<apps-domain>, any port, any case) to the
// upstream (host:port) of the project's live deployment.
//
// A project's custom domains are names of its slug (SetHosts): the ingress
// resolves such a host to the slug's route, so the one route switch of a
// deployment moves every hostname of the project together.
//
// The route table is replaced atomically on every change, so a reader sees the
// old route or the new one, never none. A deployment swap therefore sets the new
// route first and stops the old app afterwards; Drain lets the caller wait for
// the requests still in flight to the old deployment before stopping it.
//
// A Meter (Config.Meter) counts each slug's bytes and refuses the slugs over
// their bandwidth; the deployments/bandwidth module stores the counts.
//
// It is not a general-purpose edge proxy: TLS is its certs subpackage's (ACME
// certificates for the hosts it serves), and it keeps no access log and no
// rate limits. Put a real edge (or real DNS and ingress) in front of it at scale.
// Inbound X-Forwarded-* headers (and their underscore spellings, such as
// X_Forwarded_For) are dropped and rebuilt from the connection, so an app
// behind it can trust them as far as it trusts this proxy.
package ingress

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/keelson-dev/keelson/deployments/rt"
)

// Config configures a Router.
type Config struct {
	// AppsDomain is the domain apps answer under: <slug>.<AppsDomain>.
	// Default "localhost".
	AppsDomain string
	// PublicPort is the port clients reach the ingress on; URL omits it when it
	// is 80 or 0. Default 0.
	PublicPort int
	// Logger receives proxy errors. Default: discard.
	Logger *slog.Logger
	// DialTimeout bounds connecting to an upstream. Default 5s.
	DialTimeout time.Duration
	// Meter, when set, counts each slug's bytes and answers the slugs it
	// blocks with a 429 (meter.go). Default: nothing counted or refused.
	Meter *Meter
	// ForwardKey, the same on every ingress of an installation, marks the
	// requests one ingress forwards to another (SetRemote, remote.go).
	// Without it nothing is forwarded, and no request is trusted as forwarded.
	ForwardKey []byte
	// Self is this ingress's own address as other hosts reach it (the hosts
	// register's address): a remote route to it is ignored.
	Self string
}

func (c Config) withDefaults() Config {
	c.AppsDomain = strings.TrimSuffix(strings.ToLower(cmp.Or(c.AppsDomain, "localhost")), ".")
	c.Logger = cmp.Or(c.Logger, slog.New(slog.DiscardHandler))
	c.DialTimeout = cmp.Or(c.DialTimeout, 5*time.Second)
	return c
}

// Route is where one slug's traffic goes.
type Route struct {
	Slug         string
	DeploymentID string
	Upstream     string // host:port
	// Down: the app exited and is not answering on Upstream, where another
	// process may meanwhile listen; requests get a 503 without a dial until
	// the route is set or updated again (Router.Down).
	Down bool
}

// route is an immutable table entry; inflight is shared by every entry of the
// same deployment so Drain sees requests sent under any of its upstreams.
type route struct {
	Route
	target   *url.URL
	inflight *atomic.Int64
	pool     *pool // idle connections to Upstream (upstream.go)
}

// Router is the ingress handler. Safe for concurrent use; the zero value is not
// usable, call New.
type Router struct {
	cfg   Config
	proxy *httputil.ReverseProxy
	tr    *http.Transport

	mu       sync.Mutex                        // serializes writers of table, hosts and counts
	table    atomic.Pointer[map[string]*route] // slug -> route; replaced, never mutated
	hosts    atomic.Pointer[map[string]string] // custom hostname -> slug; replaced, never mutated
	counters map[string]*atomic.Int64          // deploymentID -> requests in flight
	pools    map[string]*pool                  // upstream -> its connections, while routed
	dialer   *net.Dialer

	remote  remoteTable // slugs other hosts serve (remote.go)
	token   string      // forwardHeader's value; "" without Config.ForwardKey
	forward *httputil.ReverseProxy
}

type ctxKey struct{}

// idlePerApp is how many idle connections the ingress keeps to each app.
const idlePerApp = 1024

// New returns a Router with an empty table.
func New(cfg Config) (*Router, error) {
	cfg = cfg.withDefaults()
	if cfg.PublicPort < 0 || cfg.PublicPort > 65535 {
		return nil, fmt.Errorf("ingress: public port %d out of range", cfg.PublicPort)
	}
	if strings.ContainsAny(cfg.AppsDomain, "/:@ ") {
		return nil, fmt.Errorf("ingress: apps domain %q is not a domain name", cfg.AppsDomain)
	}
	r := &Router{cfg: cfg, counters: map[string]*atomic.Int64{}, pools: map[string]*pool{},
		dialer: &net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}}
	empty := map[string]*route{}
	r.table.Store(&empty)
	noHosts := map[string]string{}
	r.hosts.Store(&noHosts)
	r.tr = &http.Transport{
		Proxy:       nil, // never send app traffic through the server's HTTP_PROXY
		DialContext: r.dialer.DialContext,
		// Idle connections kept per app, so many clients at once reuse them
		// instead of closing and opening them per request (64 churned past
		// 64 clients); bounded per app, and by the idle timeout.
		MaxIdleConns:          0, // no limit across apps: each app's own bound holds
		MaxIdleConnsPerHost:   idlePerApp,
		IdleConnTimeout:       60 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	r.proxy = &httputil.ReverseProxy{
		Transport: r.tr,
		Rewrite: func(pr *httputil.ProxyRequest) {
			rt := pr.In.Context().Value(ctxKey{}).(*route)
			pr.SetURL(rt.target)
			pr.Out.Host = pr.In.Host // apps see the public host, as behind any ingress
			r.setForwarded(pr)
		},
		// Streaming responses (unknown length, text/event-stream) are flushed
		// on every write by ReverseProxy itself; others are buffered briefly.
		FlushInterval: 50 * time.Millisecond,
		ModifyResponse: func(res *http.Response) error {
			r.scopeCookies(res.Header)
			return nil
		},
		ErrorHandler: r.proxyError,
		ErrorLog:     slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}
	if len(cfg.ForwardKey) > 0 {
		r.token = forwardToken(cfg.ForwardKey)
	}
	r.forward = r.newForwarder()
	return r, nil
}

// Set points slug at upstream for deploymentID, atomically replacing any
// previous route of that slug, unless that route leads to a newer deployment
// (rt.ErrNewerRouted; see newer).
func (r *Router) Set(slug, deploymentID, upstream string) error {
	slug = strings.ToLower(slug)
	if slug == "" || strings.ContainsAny(slug, ".:/ ") {
		return fmt.Errorf("ingress: invalid slug %q", slug)
	}
	if deploymentID == "" {
		return errors.New("ingress: empty deployment id")
	}
	host, port, err := net.SplitHostPort(upstream)
	if err != nil || host == "" || port == "" {
		return fmt.Errorf("ingress: upstream %q is not host:port", upstream)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur := (*r.table.Load())[slug]; cur != nil && newer(cur.DeploymentID, deploymentID) {
		return fmt.Errorf("ingress: %q routes deployment %s: %w", slug, cur.DeploymentID, rt.ErrNewerRouted)
	}
	c := r.counters[deploymentID]
	if c == nil {
		c = new(atomic.Int64)
		r.counters[deploymentID] = c
	}
	rt := &route{
		Route:    Route{Slug: slug, DeploymentID: deploymentID, Upstream: upstream},
		target:   &url.URL{Scheme: "http", Host: upstream},
		inflight: c,
		pool:     r.poolOf(upstream),
	}
	r.swap(func(m map[string]*route) { m[slug] = rt })
	return nil
}

// newer reports whether deployment id a was made after b. Deployment ids are
// UUIDv7 (platform.NewID), which begin with their creation time in
// milliseconds; ids of another form are never newer.
func newer(a, b string) bool {
	ua, errA := uuid.Parse(a)
	ub, errB := uuid.Parse(b)
	if errA != nil || errB != nil || ua.Version() != 7 || ub.Version() != 7 {
		return false
	}
	return bytes.Compare(ua[:], ub[:]) > 0
}

// Update changes the upstream of slug only if it still points at
// deploymentID (e.g. an app restarted on another port). It reports whether it did.
func (r *Router) Update(slug, deploymentID, upstream string) (bool, error) {
	slug = strings.ToLower(slug)
	if _, _, err := net.SplitHostPort(upstream); err != nil {
		return false, fmt.Errorf("ingress: upstream %q is not host:port", upstream)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := (*r.table.Load())[slug]
	if cur == nil || cur.DeploymentID != deploymentID {
		return false, nil
	}
	rt := &route{
		Route:    Route{Slug: slug, DeploymentID: deploymentID, Upstream: upstream},
		target:   &url.URL{Scheme: "http", Host: upstream},
		inflight: cur.inflight,
		pool:     r.poolOf(upstream),
	}
	r.swap(func(m map[string]*route) { m[slug] = rt })
	return true, nil
}

// Down marks the route of slug, if it still points at deploymentID, down:
// its app exited, and until Set or Update routes it again every request gets
// a 503 and nothing dials Upstream, which another process may bind
// meanwhile. Idle connections to Upstream are closed. It reports whether it
// marked the route (false: not routed to deploymentID, or down already).
func (r *Router) Down(slug, deploymentID string) bool {
	slug = strings.ToLower(slug)
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := (*r.table.Load())[slug]
	if cur == nil || cur.DeploymentID != deploymentID || cur.Down {
		return false
	}
	down := &route{Route: cur.Route, target: cur.target, inflight: cur.inflight}
	down.Down = true
	r.swap(func(m map[string]*route) { m[slug] = down })
	return true
}

// Remove deletes the route of slug if it still points at deploymentID and
// reports whether it did.
func (r *Router) Remove(slug, deploymentID string) bool {
	slug = strings.ToLower(slug)
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := (*r.table.Load())[slug]
	if cur == nil || cur.DeploymentID != deploymentID {
		return false
	}
	r.swap(func(m map[string]*route) { delete(m, slug) })
	return true
}

// swap copies the table, applies fn and publishes the copy. Caller holds r.mu.
func (r *Router) swap(fn func(map[string]*route)) {
	old := *r.table.Load()
	next := make(map[string]*route, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	fn(next)
	r.table.Store(&next)
	// Forget counters of deployments no longer routed and idle, and close
	// the connections to upstreams no longer routed.
	for id, c := range r.counters {
		if c.Load() == 0 && !routed(next, id) {
			delete(r.counters, id)
		}
	}
	for addr, p := range r.pools {
		if !upstreamRouted(next, addr) {
			p.close()
			delete(r.pools, addr)
		}
	}
}

// poolOf answers the connection pool of upstream. Caller holds r.mu.
func (r *Router) poolOf(upstream string) *pool {
	p := r.pools[upstream]
	if p == nil {
		p = newPool(upstream, r.dialer)
		r.pools[upstream] = p
	}
	return p
}

// upstreamRouted reports whether a route of m that is not down leads to upstream.
func upstreamRouted(m map[string]*route, upstream string) bool {
	for _, rt := range m {
		if rt.Upstream == upstream && !rt.Down {
			return true
		}
	}
	return false
}

func routed(m map[string]*route, deploymentID string) bool {
	for _, rt := range m {
		if rt.DeploymentID == deploymentID {
			return true
		}
	}
	return false
}

// SetHosts makes hosts (custom hostnames, normalised: lower case, ASCII)
// the names of slug, replacing the ones it had: a request for any of them
// goes to slug's route, whichever deployment that is. A hostname given to
// another slug moves there. An empty hosts removes slug's names.
func (r *Router) SetHosts(slug string, hosts []string) {
	slug = strings.ToLower(slug)
	r.mu.Lock()
	defer r.mu.Unlock()
	old := *r.hosts.Load()
	next := make(map[string]string, len(old)+len(hosts))
	for h, s := range old {
		if s != slug {
			next[h] = s
		}
	}
	for _, h := range hosts {
		if h = normHost(h); h != "" {
			next[h] = slug
		}
	}
	r.hosts.Store(&next)
}

// ReplaceHosts replaces every slug's names at once with hosts (hostname ->
// slug): a full resync from the database.
func (r *Router) ReplaceHosts(hosts map[string]string) {
	next := make(map[string]string, len(hosts))
	for h, s := range hosts {
		if h = normHost(h); h != "" {
			next[h] = strings.ToLower(s)
		}
	}
	r.mu.Lock()
	r.hosts.Store(&next)
	r.mu.Unlock()
}

// Hosts returns the custom hostnames of slug, sorted.
func (r *Router) Hosts(slug string) []string {
	slug = strings.ToLower(slug)
	var out []string
	for h, s := range *r.hosts.Load() {
		if s == slug {
			out = append(out, h)
		}
	}
	slices.Sort(out)
	return out
}

// Resolve returns the route host (as a request names it: any case, a port
// or a trailing dot) reaches: <slug>.<apps-domain>, or a custom hostname of
// a slug that is routed.
func (r *Router) Resolve(host string) (Route, bool) {
	slug := r.slugOf(host)
	if slug == "" {
		return Route{}, false
	}
	return r.Lookup(slug)
}

// Slug returns the slug host names (as a request names it): the slug of
// <slug>.<apps-domain>, or of a custom hostname (SetHosts); "" for any
// other host. The slug need not be routed.
func (r *Router) Slug(host string) string { return r.slugOf(host) }

// Lookup returns the route of slug.
func (r *Router) Lookup(slug string) (Route, bool) {
	rt := (*r.table.Load())[strings.ToLower(slug)]
	if rt == nil {
		return Route{}, false
	}
	return rt.Route, true
}

// Routes returns a snapshot of the table.
func (r *Router) Routes() []Route {
	m := *r.table.Load()
	out := make([]Route, 0, len(m))
	for _, rt := range m {
		out = append(out, rt.Route)
	}
	return out
}

// Host is slug's host under the apps domain: <slug>.<apps-domain>.
func (r *Router) Host(slug string) string { return strings.ToLower(slug) + "." + r.cfg.AppsDomain }

// URL is the public URL of slug: http://<slug>.<apps-domain>[:<port>].
func (r *Router) URL(slug string) string {
	host := r.Host(slug)
	if r.cfg.PublicPort != 0 && r.cfg.PublicPort != 80 {
		host = net.JoinHostPort(host, strconv.Itoa(r.cfg.PublicPort))
	}
	return "http://" + host
}

// Drain waits until no request sent to deploymentID is in flight, or ctx is
// done. Call it after the deployment's route was replaced or removed and
// before stopping its app, so no request is cut off by the stop.
func (r *Router) Drain(ctx context.Context, deploymentID string) error {
	r.mu.Lock()
	c := r.counters[deploymentID]
	r.mu.Unlock()
	if c == nil {
		return nil
	}
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for c.Load() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// Close closes idle connections to upstreams.
func (r *Router) Close() {
	r.tr.CloseIdleConnections()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.pools {
		p.close()
	}
}

// normHost is host without a port or a trailing dot, in lower case.
func normHost(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.TrimSuffix(strings.ToLower(host), ".")
}

// slugOf returns the slug host names: <slug>.<apps-domain>, or a custom
// hostname of slug (SetHosts); "" for any other host.
func (r *Router) slugOf(host string) string {
	host = normHost(host)
	slug, ok := strings.CutSuffix(host, "."+r.cfg.AppsDomain)
	if !ok || slug == "" {
		return (*r.hosts.Load())[host]
	}
	return slug
}

// ServeHTTP proxies req to the live deployment of its host's slug.
func (r *Router) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	slug := r.slugOf(req.Host)
	var rt *route
	for slug != "" {
		rt = (*r.table.Load())[slug]
		if rt == nil {
			break
		}
		rt.inflight.Add(1)
		// Re-check after counting: a Drain that started after a swap either sees
		// this request counted or this request sees the new table.
		if (*r.table.Load())[slug] == rt {
			break
		}
		rt.inflight.Add(-1)
	}
	if rt == nil {
		if addr, ok := r.remoteOf(slug, req); ok {
			r.forward.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), remoteKey{}, addr)))
			return
		}
		host := req.Host
		if len(host) > 255 {
			host = host[:255]
		}
		plain(w, http.StatusNotFound, fmt.Sprintf("no app is served at host %q\n", host))
		return
	}
	defer rt.inflight.Add(-1)
	if rt.Down {
		w.Header().Set("Retry-After", "1")
		plain(w, http.StatusServiceUnavailable, fmt.Sprintf("the app %q is restarting\n", rt.Slug))
		return
	}
	m := r.cfg.Meter
	if direct(req) {
		var c *slugBytes
		if m != nil {
			if b, ok := m.Blocked(rt.Slug); ok {
				refuse(w, b)
				return
			}
			c = m.counter(rt.Slug)
		}
		r.serveDirect(w, req, rt, c)
		return
	}
	req = req.WithContext(context.WithValue(req.Context(), ctxKey{}, rt))
	if m != nil {
		m.serve(w, req, rt.Slug, r.proxy)
		return
	}
	r.proxy.ServeHTTP(w, req)
}

func (r *Router) proxyError(w http.ResponseWriter, req *http.Request, err error) {
	if errors.Is(err, context.Canceled) && req.Context().Err() != nil {
		return // the client went away; nobody to answer
	}
	r.upstreamFailed(w, req, req.Context().Value(ctxKey{}).(*route), err)
}

// upstreamFailed logs why rt's app did not answer req and answers 502.
func (r *Router) upstreamFailed(w http.ResponseWriter, req *http.Request, rt *route, err error) {
	if req.Context().Err() != nil {
		return // the client went away; nobody to answer
	}
	r.cfg.Logger.Warn("ingress: upstream failed", "slug", rt.Slug, "deployment", rt.DeploymentID,
		"upstream", rt.Upstream, "err", err)
	plain(w, http.StatusBadGateway, fmt.Sprintf("the app %q is not answering\n", rt.Slug))
}

func plain(w http.ResponseWriter, status int, msg string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(msg))
}
