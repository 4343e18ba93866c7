package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
	"github.com/keelson-dev/keelson/auth"
	"github.com/keelson-dev/keelson/auth/apitokens"
	"github.com/keelson-dev/keelson/auth/auditlog"
	"github.com/keelson-dev/keelson/auth/oauth"
	"github.com/keelson-dev/keelson/auth/teams"
	"github.com/keelson-dev/keelson/codehost"
	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/bandwidth"
	"github.com/keelson-dev/keelson/deployments/hosts"
	"github.com/keelson-dev/keelson/deployments/ingress"
	"github.com/keelson-dev/keelson/deployments/ingress/certs"
	"github.com/keelson-dev/keelson/plans"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/apidocs"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/platform/httpx"
	"github.com/keelson-dev/keelson/platform/secret"
	"github.com/keelson-dev/keelson/projects"
	"github.com/keelson-dev/keelson/projects/domains"
	"github.com/uptrace/bun"
)

// Version is the API version shown in the OpenAPI document.
const Version = "0.1.0"

// App is the assembled reference server: every module built from one Config,
// sharing one database and one Huma API. The module services are exported
// for tests; none of them is set after NewApp returns.
type App struct {
	Cfg       Config
	Log       *slog.Logger
	DB        *bun.DB
	API       huma.API
	Handler   http.Handler   // the API with request logging, ids, recovery
	Ingress   http.Handler   // the apps' ingress proxy; nil when this role runs no apps
	meter     *ingress.Meter // the ingress' byte counts; nil when this role runs no apps
	Authn     platform.Authenticator
	Sealer    *secret.Sealer
	JWTSecret []byte

	// ShutdownCtx is cancelled when the server begins to shut down, so
	// long-lived streams (SSE) can end and let in-flight requests drain.
	ShutdownCtx    context.Context
	cancelShutdown context.CancelFunc

	mux  *http.ServeMux
	mods platform.Assembly // every module and part, in build order

	// The module services, built in phase one of NewApp (build*).
	Auth        *auth.Service
	APITokens   *apitokens.Service
	OAuth       *oauth.Service
	Plans       *plans.Service
	Teams       *teams.Service
	AuditLog    *auditlog.Service
	Projects    *projects.Service
	Deployments *deployments.Service
	Codehost    *codehost.Service
	Domains     *domains.Service
	Bandwidth   *bandwidth.Service
	// Hosts is the register of the machines that run apps.
	Hosts     *hosts.Service
	localHost *hosts.Local // this process's host, when it runs a Temporal worker
	hosts     *hostRoutes  // the ingress's custom hostnames; nil when this role runs no apps
	// Certs are the ingress's certificates (nil unless KEELSON_INGRESS_TLS_ADDR is set).
	Certs      *certs.Manager
	ingressTLS *tlsIngress

	// Mailer sends the server's mail (the auth module's, and notices of
	// other modules): SMTP, or the log without KEELSON_SMTP_URL.
	Mailer auth.Mailer

	// LogStreams caps each user's concurrently open log streams (SSE); it is
	// the deployments module's Streams gate.
	LogStreams *httpx.StreamLimit

	// APIConns and IngressConns cap the connections Serve holds on each
	// listener.
	APIConns, IngressConns *httpx.ConnLimit

	// Metrics serves Prometheus' /metrics (on KEELSON_METRICS_ADDR, never on
	// the API's listener); nil when that setting is empty.
	Metrics http.Handler
	metrics *serverMetrics // nil when metrics are off
}

// MaxLogStreamsPerUser is LogStreams' default cap (KEELSON_MAX_LOG_STREAMS):
// a browser tab needs one or two; a script looping without closing its
// streams is stopped here.
const MaxLogStreamsPerUser = 20

// maxJSONBody is the largest body limit of a JSON operation (PATCH
// /projects/{id}/settings, 2 MiB), so httpx.CheckJSON sees every body a
// handler can accept.
const maxJSONBody = 2 << 20

// isWebhook exempts the code host's webhook from httpx.CheckJSON: its body is
// the provider's, verified by a signature over the raw bytes, and the
// codehost module decodes and validates it itself.
func isWebhook(r *http.Request) bool { return r.URL.Path == "/codehost/webhook" }

// maxBodyBytes is the largest body any route accepts, for the body budget:
// the webhook's 25 MiB, maxJSONBody elsewhere (a route needing more must be
// named here, or its larger bodies are refused 413 at the edge).
func maxBodyBytes(r *http.Request) int64 {
	if isWebhook(r) {
		return codehost.MaxWebhookBytes
	}
	return maxJSONBody
}

// NewApp opens the database, builds and registers every module, and runs the
// migrations and start-up hooks. Close releases everything.
func NewApp(ctx context.Context, cfg Config, log *slog.Logger) (_ *App, err error) {
	// a is not the named result: "return nil, err" must not nil it before
	// the deferred Close runs.
	a := &App{Cfg: cfg, Log: log, mux: http.NewServeMux(), LogStreams: httpx.NewStreamLimit(cmp.Or(cfg.MaxLogStreams, MaxLogStreamsPerUser), 5*time.Second)}
	a.ShutdownCtx, a.cancelShutdown = context.WithCancel(context.Background())
	// Trusted proxies carry every client on one address: not capped per address.
	a.APIConns = httpx.NewConnLimitWith(httpx.ConnLimitConfig{Max: cmp.Or(cfg.MaxConns, DefaultMaxConns),
		PerAddr: cmp.Or(cfg.MaxConnsPerAddr, DefaultMaxConnsPerAddr), Exempt: cfg.TrustedProxies})
	a.IngressConns = httpx.NewConnLimitWith(httpx.ConnLimitConfig{Max: cmp.Or(cfg.IngressMaxConns, DefaultIngressMaxConns),
		PerAddr: cmp.Or(cfg.IngressMaxConnsPerAddr, DefaultIngressMaxConnsPerAddr), Exempt: cfg.TrustedProxies})
	defer func() {
		if err != nil {
			a.Close(context.Background())
		}
	}()
	if err := a.openCore(ctx); err != nil {
		return nil, err
	}
	a.API = humago.New(a.mux, platform.APIConfig("Keelson API", Version))
	// Before any operation registers: where API tokens may go, and the
	// client's address they record.
	a.API.UseMiddleware(a.clientAddr, platform.TokenRules(a.API, tokenRule))
	describeAPI(a.API.OpenAPI(), cfg.PublicURL)
	if err := apidocs.Register(a.API, apidocs.Options{}); err != nil {
		return nil, err
	}
	a.registerHealth()

	// Build every service in dependency order: each gets the services built
	// before it. What an earlier module asks of a later one it asks of a
	// reader over the later one's tables (teams.Members, projects.Counts,
	// deployments.Usage, ...); what it tells a later one it publishes as an
	// event (platform/events), which the later one subscribes to when it is
	// built. Each build adds its routes, migrations and start/close hooks.
	for _, b := range []struct {
		name string
		fn   func(context.Context) error
	}{
		{"auth", a.buildAuth},
		{"oauth", a.buildOAuth},
		{"apitokens", a.buildAPITokens},
		{"plans", a.buildPlans},
		{"teams", a.buildTeams},
		{"auditlog", a.buildAuditLog},
		{"projects", a.buildProjects},
		{"domains", a.buildDomains},
		{"deployments", a.buildDeployments},
		{"codehost", a.buildCodehost},
		{"deployhooks", a.buildDeployHooks},
		{"bandwidth", a.buildBandwidth},
		{"scaffold", a.buildScaffold},
	} {
		if err := b.fn(ctx); err != nil {
			return nil, fmt.Errorf("%s: %w", b.name, err)
		}
	}

	// Then every module's routes are registered, all migrations run, and
	// the modules start in build order (a failure closes them all).
	if err := a.mods.Start(ctx, a.API, db.Migrator(a.DB)); err != nil {
		return nil, err
	}
	a.Handler = a.handler(a.mux)
	return a, nil
}

// openCore creates the data directory, reads or generates the secrets, opens
// the database and sets up the metrics registry.
func (a *App) openCore(ctx context.Context) error {
	if err := os.MkdirAll(a.Cfg.DataDir, 0o700); err != nil {
		return &ConfigError{"KEELSON_DATA_DIR", fmt.Sprintf("cannot create %s: %v", a.Cfg.DataDir, err)}
	}
	jwtSecret, err := secretSetting(a.Cfg.DataDir, "jwt-secret", a.Cfg.JWTSecret)
	if err != nil {
		return &ConfigError{"KEELSON_JWT_SECRET", err.Error()}
	}
	a.JWTSecret = []byte(jwtSecret)
	sealKey, err := secretSetting(a.Cfg.DataDir, "secret-key", a.Cfg.SecretKey)
	if err != nil {
		return &ConfigError{"KEELSON_SECRET_KEY", err.Error()}
	}
	if a.Sealer, err = secret.New(sealKey); err != nil {
		return &ConfigError{"KEELSON_SECRET_KEY", err.Error()}
	}
	a.DB, err = db.Open(ctx, db.Options{URL: a.Cfg.DatabaseURL, DataDir: a.Cfg.DataDir})
	if err != nil {
		return &ConfigError{"KEELSON_DATABASE_URL", err.Error()}
	}
	a.onClose(func(context.Context) error { return a.DB.Close() })
	if a.Cfg.MetricsAddr != "" {
		if a.metrics, err = newServerMetrics(); err != nil {
			return err
		}
		a.Metrics = a.metrics.handler(a.Log)
	}
	return nil
}

// handler wraps mux in the server's middleware: the body budget
// (KEELSON_MAX_BODY_MEMORY_MIB, a share per client address, a minimum rate),
// JSON checks, CORS, request logs and metrics. A worker serves health only.
func (a *App) handler(mux *http.ServeMux) http.Handler {
	budget := httpx.BodyBudget{
		Bytes:    int64(cmp.Or(a.Cfg.MaxBodyMemoryMiB, DefaultMaxBodyMemoryMiB)) << 20,
		PerAddr:  int64(cmp.Or(a.Cfg.MaxBodyMemoryPerAddrMiB, DefaultMaxBodyMemoryPerAddrMiB)) << 20,
		MaxBytes: maxBodyBytes,
		MinRate:  int64(cmp.Or(a.Cfg.MinBodyRateKiB, DefaultMinBodyRateKiB)) << 10,
		Grace:    BodyGrace,
		MaxTime:  cmp.Or(a.Cfg.ReadTimeout, DefaultReadTimeout),
		Addr:     func(r *http.Request) string { return httpx.AddrKey(httpx.RequestClient(r, a.Cfg.TrustedProxies)) },
	}
	h := httpx.Middleware(a.Log, httpx.LimitBodies(budget,
		httpx.CORS(httpx.CORSConfig{Origin: a.Cfg.FrontendURL},
			httpx.CheckJSON(httpx.JSONCheck{MaxBytes: maxJSONBody, Skip: isWebhook}, mux))))
	routes := mux // what labels a request's route in the metrics
	if !a.Cfg.ServesAPI() {
		// A worker (KEELSON_ROLE=worker) answers health checks only; the
		// modules are built all the same (its deployments read projects).
		health := http.NewServeMux()
		health.Handle("GET /healthz", mux)
		health.Handle("GET /readyz", mux)
		h = httpx.Middleware(a.Log, health)
		routes = health
	}
	if a.metrics != nil {
		h = a.metrics.instrument(routes, h)
	}
	return h
}

// add adds built modules to the assembly: they start in build order and
// close in reverse.
func (a *App) add(mods ...platform.Module) { a.mods.Add(mods...) }

// migrate adds migrations that belong to no module's service (pgnotify).
func (a *App) migrate(set db.MigrationSet) { a.add(platform.Part{Schema: set}) }

// onStart runs fn after migrations, in build order.
func (a *App) onStart(fn func(context.Context) error) { a.add(platform.Part{OnStart: fn}) }

// onClose runs fn at shutdown, in reverse build order.
func (a *App) onClose(fn func(context.Context) error) { a.add(platform.Part{OnClose: fn}) }

// Close stops every module (reverse order) and closes the database.
func (a *App) Close(ctx context.Context) error {
	a.cancelShutdown()
	return a.mods.Close(ctx)
}

type healthOutput struct {
	Body struct {
		Status string `json:"status" example:"ok"`
	}
}

func (a *App) registerHealth() {
	huma.Register(a.API, huma.Operation{
		OperationID: "healthz", Method: http.MethodGet, Path: "/healthz",
		Summary: "Liveness: the process answers", Tags: []string{"Health"},
	}, func(ctx context.Context, _ *struct{}) (*healthOutput, error) {
		out := &healthOutput{}
		out.Body.Status = "ok"
		return out, nil
	})
	huma.Register(a.API, huma.Operation{
		OperationID: "readyz", Method: http.MethodGet, Path: "/readyz",
		Summary: "Readiness: the database is reachable", Tags: []string{"Health"},
	}, func(ctx context.Context, _ *struct{}) (*healthOutput, error) {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if err := a.DB.PingContext(ctx); err != nil {
			return nil, platform.Unavailable("database unreachable")
		}
		out := &healthOutput{}
		out.Body.Status = "ok"
		return out, nil
	})
}

// secretSetting returns value if set, else the secret kept in dataDir/name,
// generating it (256 random bits, hex) on first start.
func secretSetting(dataDir, name, value string) (string, error) {
	if value != "" {
		return value, nil
	}
	path := filepath.Join(dataDir, name)
	b, err := os.ReadFile(path)
	if err == nil {
		if s := strings.TrimSpace(string(b)); len(s) >= 32 {
			return s, nil
		}
		return "", fmt.Errorf("%s is too short; delete it to regenerate", path)
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	s := hex.EncodeToString(raw)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		if errors.Is(err, os.ErrExist) { // another replica won the race
			return secretSetting(dataDir, name, "")
		}
		return "", err
	}
	defer f.Close()
	if _, err := f.WriteString(s + "\n"); err != nil {
		return "", err
	}
	return s, nil
}

// Serve serves the API on apiL and, when deployments are wired and ingressL is
// not nil, the ingress on ingressL (and its HTTPS on ingressTLSL, when
// KEELSON_INGRESS_TLS_ADDR is set and a listener is given), until ctx is done; then it shuts down
// gracefully: streams are told to end, in-flight requests finish (up to 20 s).
// Each listener holds at most its configured connections
// (KEELSON_MAX_CONNS, KEELSON_INGRESS_MAX_CONNS; see httpx.ConnLimit).
func (a *App) Serve(ctx context.Context, apiL, ingressL net.Listener, ingressTLSL ...net.Listener) error {
	api := a.httpServer(a.Handler)
	servers := []*http.Server{api}
	listeners := []net.Listener{a.APIConns.Apply(api, apiL)}
	if a.Ingress != nil && ingressL != nil {
		// Slow uploads through the ingress count as waiting, like slow headers.
		ing := a.httpServer(httpx.TrackBodies(a.Ingress))
		servers = append(servers, ing)
		listeners = append(listeners, a.IngressConns.Apply(ing, ingressL))
		if a.ingressTLS != nil && len(ingressTLSL) == 1 {
			sec := a.httpServer(httpx.TrackBodies(a.ingressTLS.handler))
			sec.TLSConfig = a.ingressTLS.config
			servers = append(servers, sec)
			listeners = append(listeners, tls.NewListener(a.IngressConns.Apply(sec, ingressTLSL[0]), a.ingressTLS.config))
		}
	}
	errc := make(chan error, len(servers))
	for i, s := range servers {
		go func() {
			if err := s.Serve(listeners[i]); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	a.cancelShutdown()
	sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, s := range servers {
		wg.Add(1)
		go func() { defer wg.Done(); _ = s.Shutdown(sctx) }()
	}
	wg.Wait()
	return serveErr
}

// httpServer applies the connection timeouts (KEELSON_READ_HEADER_TIMEOUT,
// KEELSON_READ_TIMEOUT, KEELSON_IDLE_TIMEOUT).
func (a *App) httpServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler: h,
		// Seconds, not minutes: a client trickling its headers holds a
		// connection this long at most (and is evicted first at the cap).
		ReadHeaderTimeout: cmp.Or(a.Cfg.ReadHeaderTimeout, DefaultReadHeaderTimeout),
		ReadTimeout:       cmp.Or(a.Cfg.ReadTimeout, DefaultReadTimeout), // webhooks up to 25 MB on slow links
		IdleTimeout:       cmp.Or(a.Cfg.IdleTimeout, DefaultIdleTimeout),
		// Neither cuts an SSE stream: net/http clears the read deadline once
		// the request is read (connReader.startBackgroundRead), and IdleTimeout
		// counts only between requests (TestTimeoutsKeepStreamsOpen).
		// No WriteTimeout: it would cut SSE log streams; streams heartbeat and
		// set a deadline per write instead, so a stuck client is dropped.
		ErrorLog: slog.NewLogLogger(a.Log.Handler(), slog.LevelWarn),
	}
}
