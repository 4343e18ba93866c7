package main

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/container"
)

// Config is the reference server's configuration, read from the environment
// (DESIGN.md section 3). Zero values mean "use the default".
type Config struct {
	Addr string // KEELSON_ADDR
	// PprofAddr (KEELSON_PPROF_ADDR) serves net/http/pprof on this loopback
	// address; empty (the default) serves no profiles.
	PprofAddr string
	// MetricsAddr (KEELSON_METRICS_ADDR) serves Prometheus' /metrics on this
	// address, on its own listener apart from the API; empty (the default)
	// serves no metrics (README "Metrics").
	MetricsAddr string
	DataDir     string // KEELSON_DATA_DIR
	DatabaseURL string // KEELSON_DATABASE_URL; empty: SQLite in DataDir
	PublicURL   string // KEELSON_PUBLIC_URL
	FrontendURL string // KEELSON_FRONTEND_URL
	JWTSecret   string // KEELSON_JWT_SECRET; empty: generated once into DataDir
	SecretKey   string // KEELSON_SECRET_KEY; empty: generated once into DataDir
	AdminEmails []string
	// TrustedProxies (KEELSON_TRUSTED_PROXIES: comma-separated CIDRs or
	// addresses) are the reverse proxies whose X-Forwarded-For is believed.
	TrustedProxies []netip.Prefix
	SMTPURL        string // KEELSON_SMTP_URL
	MailFrom       string // KEELSON_MAIL_FROM

	CodehostClientID      string
	CodehostClientSecret  string
	CodehostAppID         string
	CodehostAppSlug       string
	CodehostAppPrivateKey string // PEM contents (an @file value is read at load time)
	CodehostWebhookSecret string
	CodehostAPIURL        string
	CodehostWebURL        string

	IDPIssuer       string
	IDPClientID     string
	IDPClientSecret string

	OAuthRedirectMode string // KEELSON_OAUTH_REDIRECT_MODE: tokens (default) | code

	IngressAddr string // KEELSON_INGRESS_ADDR
	// IngressTLSAddr (KEELSON_INGRESS_TLS_ADDR) is the ingress's HTTPS
	// listener; empty: off (a laptop, or TLS ended by a load balancer).
	IngressTLSAddr string
	// ACMEDirectoryURL, ACMEEmail and ACMECARoots (KEELSON_ACME_*) are the
	// ACME CA certificates are ordered from, the account's contact and a PEM
	// file of extra roots to trust for the CA's API.
	ACMEDirectoryURL, ACMEEmail, ACMECARoots string
	// IngressTLSCertFile and IngressTLSKeyFile (KEELSON_INGRESS_TLS_CERT_FILE,
	// _KEY_FILE) are a certificate the operator issued (the apps domain's
	// wildcard), served for the names it covers instead of ordering one.
	IngressTLSCertFile, IngressTLSKeyFile string
	AppsDomain                            string // KEELSON_APPS_DOMAIN
	AllowLocalRepos                       bool   // KEELSON_ALLOW_LOCAL_REPOS
	// IngressIPs (KEELSON_INGRESS_IPS) are the ingress's public addresses:
	// the A/AAAA records of custom apex domains.
	IngressIPs []netip.Addr
	// DNSResolvers (KEELSON_DNS_RESOLVERS, host:port) check custom domains'
	// records; empty: the system's resolver.
	DNSResolvers []string
	// MaxDomainsPerProject is KEELSON_MAX_DOMAINS_PER_PROJECT (default 20).
	MaxDomainsPerProject int
	// MaxAPITokens is KEELSON_MAX_API_TOKENS: API tokens per account (default 50).
	MaxAPITokens int
	// DomainCheckInterval is KEELSON_DOMAIN_CHECK_INTERVAL: how often each
	// custom domain is checked again (default 10m).
	DomainCheckInterval time.Duration
	// InviteTTL is KEELSON_INVITE_TTL: how long a team invitation stays
	// valid (default 7 days).
	InviteTTL time.Duration
	// AuditRetention is KEELSON_AUDIT_RETENTION: how long audit-log rows
	// are kept (default 365 days).
	AuditRetention time.Duration
	// AllowPrivateRepoHosts (KEELSON_ALLOW_PRIVATE_REPO_HOSTS) lets https repos
	// live on hosts that resolve to private addresses (a code host on the LAN).
	AllowPrivateRepoHosts bool
	GitCAFile             string // KEELSON_GIT_CA_FILE: PEM bundle git trusts for https clones (a private code host)
	MaxLogStreams         int    // KEELSON_MAX_LOG_STREAMS: concurrent log streams per user (default 20)
	Regions               []string
	Engine                string // KEELSON_ENGINE: local | temporal
	// Runtime is KEELSON_RUNTIME: docker, process, or "" (docker). Start-up
	// stops when docker has no engine; it never falls back to process.
	Runtime string
	// RuntimeWait is KEELSON_RUNTIME_WAIT: how long start-up waits for the
	// Docker engine to answer (default 30s).
	RuntimeWait time.Duration
	// Images are KEELSON_IMAGE_GO, _GO_RUN, _NODE and _STATIC: the docker
	// runtime's preset images ("" = the documented official image).
	ImageGo, ImageGoRun, ImageNode, ImageStatic string
	// Egress is KEELSON_EGRESS: fenced (default) or open; EgressAllowCIDRs
	// is KEELSON_EGRESS_ALLOW_CIDRS, private networks tenant code may reach.
	Egress           string
	EgressAllowCIDRs []netip.Prefix
	TemporalAddress  string // KEELSON_TEMPORAL_ADDRESS: host:port of the Temporal frontend
	// TemporalNamespace is KEELSON_TEMPORAL_NAMESPACE (default "default").
	TemporalNamespace string
	// TemporalTaskQueue is KEELSON_TEMPORAL_TASK_QUEUE (default
	// "keelson-deployments"): API replicas start workflows on it, workers poll it.
	TemporalTaskQueue string
	// Role is KEELSON_ROLE: all (default: API and deployment worker in one
	// process), api (the API only: no runtime, no ingress, no worker) or
	// worker (runs deployments and serves their apps on the ingress; its API
	// address answers /healthz and /readyz only). api and worker need
	// KEELSON_ENGINE=temporal and Postgres; the local engine runs as all.
	Role string

	// Connection limits of the API and ingress listeners (issue 15).
	ReadHeaderTimeout time.Duration // KEELSON_READ_HEADER_TIMEOUT (default 5s)
	ReadTimeout       time.Duration // KEELSON_READ_TIMEOUT: a whole request, body included (default 2m)
	IdleTimeout       time.Duration // KEELSON_IDLE_TIMEOUT: a keep-alive connection between requests (default 60s)
	MaxConns          int           // KEELSON_MAX_CONNS: connections the API holds open (default 4096)
	IngressMaxConns   int           // KEELSON_INGRESS_MAX_CONNS: connections the ingress holds open (default 8192)
	// MaxConnsPerAddr and IngressMaxConnsPerAddr are KEELSON_MAX_CONNS_PER_ADDR
	// and KEELSON_INGRESS_MAX_CONNS_PER_ADDR: connections one client address
	// (IPv6: its /64) holds on each listener (default 256).
	MaxConnsPerAddr, IngressMaxConnsPerAddr int
	// MaxBodyMemoryMiB is KEELSON_MAX_BODY_MEMORY_MIB: memory request bodies
	// may hold together while handled (default 64).
	MaxBodyMemoryMiB int
	// MaxBodyMemoryPerAddrMiB is KEELSON_MAX_BODY_MEMORY_PER_ADDR_MIB: what
	// the bodies of one client address may hold of it (default 16).
	MaxBodyMemoryPerAddrMiB int
	// MinBodyRateKiB is KEELSON_MIN_BODY_RATE_KIB: the slowest a body may
	// arrive after a 5 s grace, in KiB/s, else 408 (default 16).
	MinBodyRateKiB int

	// Log caps per deployment (operator settings, not plan quotas).
	BuildLogMaxLines int // KEELSON_BUILD_LOG_MAX_LINES (default 100000)
	BuildLogMaxMB    int // KEELSON_BUILD_LOG_MAX_MB (default 50)
	AppLogMaxLines   int // KEELSON_APP_LOG_MAX_LINES: newest app lines kept (default 10000)
	// BuildsPerUser is KEELSON_BUILDS_PER_USER: deployments one owner runs at
	// once, on either engine (twice that on a priorityBuilds plan). Default 2.
	BuildsPerUser int
	// BuildSlots is KEELSON_BUILD_SLOTS: builds at once, on the local engine
	// in this server, on the Temporal engine across every worker. Default 4.
	BuildSlots int
	// FreeBuildSlots is KEELSON_FREE_BUILD_SLOTS: how many of BuildSlots the
	// builds of accounts on a FREE plan hold together. 0: BuildSlots-1.
	FreeBuildSlots int
	// BuildPidsLimit is KEELSON_BUILD_PIDS_LIMIT: processes one build runs at
	// once on the docker runtime. Default 1024.
	BuildPidsLimit int
	// LogRetention is KEELSON_LOG_RETENTION: logs of deployments that ended
	// FAILED or CANCELLED longer ago are deleted (hourly; SQLite gives the
	// space back). Default 30 days.
	LogRetention time.Duration
	// LogBudgetMB is KEELSON_LOG_BUDGET_MB: the log messages one account's
	// deployments keep together, in MiB; past it the logs of its oldest
	// ended deployments are deleted. 0: no budget. Default 512.
	LogBudgetMB int
	// HostAddress, HostMaxApps and HostDownAfter are KEELSON_HOST_ADDRESS,
	// KEELSON_HOST_MAX_APPS and KEELSON_HOST_DOWN_AFTER: a worker's entry in
	// the hosts register (deployments/hosts).
	HostAddress   string
	HostMaxApps   int
	HostDownAfter time.Duration
	// hostHeartbeat replaces the hosts register's 10 s heartbeat: a test
	// hook with no setting.
	hostHeartbeat time.Duration
	// Registry, RegistryUsername and RegistryPassword are KEELSON_REGISTRY
	// and its credentials: the image registry builds are pushed to
	// (container.Registry). Empty: images stay on the local engine.
	Registry, RegistryUsername, RegistryPassword string
	// KeepBuilds is KEELSON_KEEP_BUILDS: how many replaced deployments of a
	// project keep their build (image or workspace) for a rollback. 0: none.
	KeepBuilds int

	// bandwidthBytesPerGB replaces the 10^9 bytes of one GB of a plan's
	// maxBandwidthGb (bandwidth.Deps.BytesPerGB). A test hook with no
	// setting: plans are sold in GB, and a setting would make every plan's
	// figure mean something else than it says.
	bandwidthBytesPerGB int64
}

// Defaults of the connection settings.
const (
	DefaultReadHeaderTimeout = 5 * time.Second
	DefaultReadTimeout       = 2 * time.Minute
	DefaultIdleTimeout       = 60 * time.Second
	DefaultMaxConns          = 4096
	DefaultIngressMaxConns   = 8192
	DefaultMaxBodyMemoryMiB  = 64
	DefaultBuildsPerUser     = 2
	DefaultBuildSlots        = 4
	DefaultBuildPidsLimit    = 1024
	DefaultLogRetention      = deployments.DefaultLogRetention
	DefaultLogBudgetMB       = int(deployments.DefaultAccountLogBudget >> 20)
	// DefaultMaxConnsPerAddr lets one office behind NAT hold a good share
	// and no single address most of DefaultMaxConns.
	DefaultMaxConnsPerAddr         = 256
	DefaultIngressMaxConnsPerAddr  = 256
	DefaultMaxBodyMemoryPerAddrMiB = 16
	DefaultMinBodyRateKiB          = 16
	// BodyGrace is the time a body's first bytes may take.
	BodyGrace = 5 * time.Second
)

// Roles of KEELSON_ROLE.
const (
	RoleAll    = "all"
	RoleAPI    = "api"
	RoleWorker = "worker"
)

// ServesAPI reports whether this process serves the API routes.
func (c Config) ServesAPI() bool { return c.Role != RoleWorker }

// RunsWorker reports whether this process runs deployment steps (and apps).
func (c Config) RunsWorker() bool { return c.Role != RoleAPI }

// ConfigError names the variable that stopped start-up.
type ConfigError struct {
	Var, Problem string
}

func (e *ConfigError) Error() string { return e.Var + ": " + e.Problem }

// LoadConfig reads the configuration through getenv (ParseConfig) and
// validates it (Validate). The first bad setting is returned as a
// *ConfigError naming its variable.
func LoadConfig(getenv func(string) string) (Config, error) {
	c, err := ParseConfig(getenv)
	if err != nil {
		return c, err
	}
	return c, c.Validate()
}

// ParseConfig reads every setting through getenv into a Config: a blank or
// unset variable takes its default, and a value that is not of its kind (a
// number, a duration, a boolean, a list of addresses) is a *ConfigError.
// Whether the values make sense together is Validate's.
func ParseConfig(getenv func(string) string) (Config, error) {
	var c Config
	for _, s := range settings {
		v := getenv(s.name)
		if !s.raw {
			v = strings.TrimSpace(v)
		}
		if v == "" {
			v = s.def
		}
		if err := s.parse(&c, v); err != nil {
			return c, &ConfigError{s.name, err.Error()}
		}
	}
	return c, nil
}

// Validate checks every value's range and form, and the settings that
// depend on each other (an engine and its role, Temporal's address). The
// first problem is a *ConfigError naming its variable.
func (c Config) Validate() error {
	if c.Egress != "" && c.Egress != "fenced" && c.Egress != "open" {
		return &ConfigError{"KEELSON_EGRESS", fmt.Sprintf("%q is not fenced or open", c.Egress)}
	}
	for _, e := range c.AdminEmails {
		if !strings.Contains(e, "@") {
			return &ConfigError{"KEELSON_ADMIN_EMAILS", fmt.Sprintf("%q is not an email address", e)}
		}
	}
	if len(c.Regions) == 0 {
		return &ConfigError{"KEELSON_REGIONS", "must list at least one region"}
	}
	if c.OAuthRedirectMode != "tokens" && c.OAuthRedirectMode != "code" {
		return &ConfigError{"KEELSON_OAUTH_REDIRECT_MODE", fmt.Sprintf("%q is not tokens or code", c.OAuthRedirectMode)}
	}
	switch c.Runtime {
	case "", "docker", "process":
	default:
		return &ConfigError{"KEELSON_RUNTIME", fmt.Sprintf("%q is not docker or process", c.Runtime)}
	}
	if err := (container.Registry{Repository: c.Registry}).Check(); err != nil {
		return &ConfigError{"KEELSON_REGISTRY", err.Error()}
	}
	if c.Registry != "" && c.Runtime == "process" {
		return &ConfigError{"KEELSON_REGISTRY", "needs the docker runtime (KEELSON_RUNTIME=process keeps builds as workspaces)"}
	}
	if !validDomain(c.AppsDomain) {
		return &ConfigError{"KEELSON_APPS_DOMAIN", fmt.Sprintf("%q is not a domain name", c.AppsDomain)}
	}
	for _, check := range []func() error{c.validateLimits, c.validateAddrs, c.validateURLs, c.validateEngine} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// validateLimits checks the numeric limits and timeouts.
func (c Config) validateLimits() error {
	if c.MaxLogStreams < 1 || c.MaxLogStreams > 1_000_000 {
		return &ConfigError{"KEELSON_MAX_LOG_STREAMS", fmt.Sprintf("%d is not a number from 1 to 1000000", c.MaxLogStreams)}
	}
	for _, d := range []struct {
		name string
		val  time.Duration
		max  time.Duration
	}{
		{"KEELSON_READ_HEADER_TIMEOUT", c.ReadHeaderTimeout, 10 * time.Minute},
		{"KEELSON_READ_TIMEOUT", c.ReadTimeout, time.Hour},
		{"KEELSON_IDLE_TIMEOUT", c.IdleTimeout, time.Hour},
		{"KEELSON_LOG_RETENTION", c.LogRetention, 100 * 365 * 24 * time.Hour},
		{"KEELSON_RUNTIME_WAIT", c.RuntimeWait, 10 * time.Minute},
		{"KEELSON_DOMAIN_CHECK_INTERVAL", c.DomainCheckInterval, 7 * 24 * time.Hour},
		{"KEELSON_INVITE_TTL", c.InviteTTL, 90 * 24 * time.Hour},
		{"KEELSON_HOST_DOWN_AFTER", c.HostDownAfter, 24 * time.Hour},
		{"KEELSON_AUDIT_RETENTION", c.AuditRetention, 100 * 365 * 24 * time.Hour},
	} {
		if d.val <= 0 || d.val > d.max {
			return &ConfigError{d.name, fmt.Sprintf("%s must be more than 0 and at most %s", d.val, d.max)}
		}
	}
	for _, n := range []struct {
		name     string
		val, min int
	}{
		{"KEELSON_MAX_CONNS", c.MaxConns, 16},
		{"KEELSON_INGRESS_MAX_CONNS", c.IngressMaxConns, 16},
		{"KEELSON_MAX_BODY_MEMORY_MIB", c.MaxBodyMemoryMiB, 16},
		{"KEELSON_MAX_CONNS_PER_ADDR", c.MaxConnsPerAddr, 1},
		{"KEELSON_INGRESS_MAX_CONNS_PER_ADDR", c.IngressMaxConnsPerAddr, 1},
		{"KEELSON_MAX_BODY_MEMORY_PER_ADDR_MIB", c.MaxBodyMemoryPerAddrMiB, 1},
		{"KEELSON_MIN_BODY_RATE_KIB", c.MinBodyRateKiB, 1},
		{"KEELSON_BUILD_LOG_MAX_LINES", c.BuildLogMaxLines, 100},
		{"KEELSON_BUILD_LOG_MAX_MB", c.BuildLogMaxMB, 1},
		{"KEELSON_APP_LOG_MAX_LINES", c.AppLogMaxLines, 100},
		{"KEELSON_BUILDS_PER_USER", c.BuildsPerUser, 1},
		{"KEELSON_BUILD_SLOTS", c.BuildSlots, 1},
		{"KEELSON_FREE_BUILD_SLOTS", c.FreeBuildSlots, 0},
		{"KEELSON_LOG_BUDGET_MB", c.LogBudgetMB, 0},
		{"KEELSON_KEEP_BUILDS", c.KeepBuilds, 0},
		{"KEELSON_HOST_MAX_APPS", c.HostMaxApps, 0},
		{"KEELSON_BUILD_PIDS_LIMIT", c.BuildPidsLimit, 16},
		{"KEELSON_MAX_DOMAINS_PER_PROJECT", c.MaxDomainsPerProject, 1},
		{"KEELSON_MAX_API_TOKENS", c.MaxAPITokens, 1},
	} {
		if n.val < n.min || n.val > 1_000_000 {
			return &ConfigError{n.name, fmt.Sprintf("%d is not a number from %d to 1000000", n.val, n.min)}
		}
	}
	if c.HostDownAfter < 2*c.heartbeat() {
		return &ConfigError{"KEELSON_HOST_DOWN_AFTER", fmt.Sprintf("%s is less than two heartbeats (%s)", c.HostDownAfter, 2*c.heartbeat())}
	}
	if c.BuildSlots > 1 && c.FreeBuildSlots >= c.BuildSlots {
		return &ConfigError{"KEELSON_FREE_BUILD_SLOTS", fmt.Sprintf("%d is not less than KEELSON_BUILD_SLOTS (%d): FREE builds may not hold every slot", c.FreeBuildSlots, c.BuildSlots)}
	}
	if c.MaxBodyMemoryPerAddrMiB > c.MaxBodyMemoryMiB {
		return &ConfigError{"KEELSON_MAX_BODY_MEMORY_PER_ADDR_MIB", fmt.Sprintf("%d is more than KEELSON_MAX_BODY_MEMORY_MIB (%d)", c.MaxBodyMemoryPerAddrMiB, c.MaxBodyMemoryMiB)}
	}
	return nil
}

// validateAddrs checks the listeners' addresses: the API, the ingress, and
// the private metrics and pprof listeners.
func (c Config) validateAddrs() error {
	addrs := []struct{ name, val string }{{"KEELSON_ADDR", c.Addr}, {"KEELSON_INGRESS_ADDR", c.IngressAddr}}
	if c.IngressTLSAddr != "" {
		addrs = append(addrs, struct{ name, val string }{"KEELSON_INGRESS_TLS_ADDR", c.IngressTLSAddr})
	}
	if (c.IngressTLSCertFile == "") != (c.IngressTLSKeyFile == "") {
		return &ConfigError{"KEELSON_INGRESS_TLS_CERT_FILE", "set it and KEELSON_INGRESS_TLS_KEY_FILE together, or neither"}
	}
	for _, a := range addrs {
		if _, port, err := net.SplitHostPort(a.val); err != nil {
			return &ConfigError{a.name, fmt.Sprintf("%q is not host:port (e.g. :8080)", a.val)}
		} else if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
			return &ConfigError{a.name, fmt.Sprintf("port %q is not 0-65535", port)}
		}
	}
	if c.MetricsAddr != "" {
		_, port, err := net.SplitHostPort(c.MetricsAddr)
		if p, aerr := strconv.Atoi(port); err != nil || aerr != nil || p < 0 || p > 65535 {
			return &ConfigError{"KEELSON_METRICS_ADDR", fmt.Sprintf("%q is not host:port (e.g. 127.0.0.1:9090, or :9090 on a private network)", c.MetricsAddr)}
		}
		if c.MetricsAddr == c.Addr || c.MetricsAddr == c.IngressAddr {
			return &ConfigError{"KEELSON_METRICS_ADDR", fmt.Sprintf("%q is the API's or the ingress' address: metrics get a listener of their own, never a public one", c.MetricsAddr)}
		}
	}
	if c.PprofAddr != "" {
		host, port, err := net.SplitHostPort(c.PprofAddr)
		ip, perr := netip.ParseAddr(host)
		if p, aerr := strconv.Atoi(port); err != nil || aerr != nil || p < 0 || p > 65535 ||
			(host != "localhost" && (perr != nil || !ip.IsLoopback())) {
			return &ConfigError{"KEELSON_PPROF_ADDR", fmt.Sprintf("%q is not a loopback host:port (e.g. 127.0.0.1:6060): profiles reveal memory and must not be reachable from outside", c.PprofAddr)}
		}
	}
	return nil
}

// validateURLs checks the URLs, the database URL, the secrets and SMTP.
func (c Config) validateURLs() error {
	for _, u := range []struct{ name, val string }{
		{"KEELSON_PUBLIC_URL", c.PublicURL}, {"KEELSON_FRONTEND_URL", c.FrontendURL},
		{"KEELSON_CODEHOST_API_URL", c.CodehostAPIURL}, {"KEELSON_CODEHOST_WEB_URL", c.CodehostWebURL},
	} {
		if err := checkHTTPURL(u.val); err != nil {
			return &ConfigError{u.name, err.Error()}
		}
	}
	if c.IDPIssuer != "" {
		if err := checkHTTPURL(c.IDPIssuer); err != nil {
			return &ConfigError{"KEELSON_IDP_ISSUER", err.Error()}
		}
	}
	if c.DatabaseURL != "" && !strings.HasPrefix(c.DatabaseURL, "postgres://") &&
		!strings.HasPrefix(c.DatabaseURL, "postgresql://") && !strings.HasPrefix(c.DatabaseURL, "sqlite:") {
		return &ConfigError{"KEELSON_DATABASE_URL", "must start with postgres:// or sqlite://"}
	}
	if c.JWTSecret != "" && len(c.JWTSecret) < 32 {
		return &ConfigError{"KEELSON_JWT_SECRET", "must be at least 32 characters"}
	}
	if c.SecretKey != "" && len(c.SecretKey) < 32 {
		return &ConfigError{"KEELSON_SECRET_KEY", "must be at least 32 characters"}
	}
	if c.SMTPURL != "" {
		if u, err := url.Parse(c.SMTPURL); err != nil || (u.Scheme != "smtp" && u.Scheme != "smtps") || u.Host == "" {
			return &ConfigError{"KEELSON_SMTP_URL", "must look like smtp://user:pass@host:port"}
		}
	}
	return nil
}

// validateEngine checks KEELSON_ENGINE, its Temporal settings and
// KEELSON_ROLE, which depend on each other.
func (c Config) validateEngine() error {
	switch c.Engine {
	case "local":
	case "temporal":
		if c.TemporalAddress == "" {
			return &ConfigError{"KEELSON_TEMPORAL_ADDRESS", "is required when KEELSON_ENGINE=temporal"}
		}
		if host, port, err := net.SplitHostPort(c.TemporalAddress); err != nil || host == "" {
			return &ConfigError{"KEELSON_TEMPORAL_ADDRESS", fmt.Sprintf("%q is not host:port (e.g. temporal:7233)", c.TemporalAddress)}
		} else if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return &ConfigError{"KEELSON_TEMPORAL_ADDRESS", fmt.Sprintf("port %q is not 1-65535", port)}
		}
		if !validNamespace(c.TemporalNamespace) {
			return &ConfigError{"KEELSON_TEMPORAL_NAMESPACE", fmt.Sprintf("%q is not a namespace name (letters, digits, '.', '-', '_'; 2 to 255 characters)", c.TemporalNamespace)}
		}
		if err := checkTaskQueue(c.TemporalTaskQueue); err != nil {
			return &ConfigError{"KEELSON_TEMPORAL_TASK_QUEUE", err.Error()}
		}
	default:
		return &ConfigError{"KEELSON_ENGINE", fmt.Sprintf("%q is not local or temporal", c.Engine)}
	}
	switch c.Role {
	case RoleAll:
	case RoleAPI, RoleWorker:
		if c.Engine != "temporal" {
			return &ConfigError{"KEELSON_ROLE", fmt.Sprintf("%q needs KEELSON_ENGINE=temporal: the local engine runs the API and the deployments in one process (KEELSON_ROLE=all)", c.Role)}
		}
		if !strings.HasPrefix(c.DatabaseURL, "postgres://") && !strings.HasPrefix(c.DatabaseURL, "postgresql://") {
			return &ConfigError{"KEELSON_ROLE", fmt.Sprintf("%q needs a shared Postgres database (KEELSON_DATABASE_URL=postgres://...): API replicas and workers are separate processes", c.Role)}
		}
	default:
		return &ConfigError{"KEELSON_ROLE", fmt.Sprintf("%q is not all, api or worker", c.Role)}
	}
	return nil
}

func checkHTTPURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an http(s) URL", s)
	}
	return nil
}

// validNamespace accepts Temporal namespace names.
func validNamespace(ns string) bool {
	if len(ns) < 2 || len(ns) > 255 {
		return false
	}
	for _, r := range ns {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// checkTaskQueue accepts task queue names workers can poll (each worker adds
// "/worker/<host>-<pid>-<id>" for its own queue, so leave room for that).
func checkTaskQueue(q string) error {
	switch {
	case len(q) > 200:
		return fmt.Errorf("is longer than 200 characters")
	case strings.HasPrefix(q, "/_sys/"):
		return fmt.Errorf("%q uses Temporal's reserved /_sys/ prefix", q)
	}
	for _, r := range q {
		if r <= ' ' || r == 0x7f || !unicode.IsPrint(r) {
			return fmt.Errorf("%q has spaces or control characters", q)
		}
	}
	return nil
}

func validDomain(d string) bool {
	if d == "" || len(d) > 200 {
		return false
	}
	for _, label := range strings.Split(d, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
				return false
			}
		}
	}
	return true
}

// settingError names the variable of a bad assemble.Config field.
func settingError(field, problem string) error {
	return &ConfigError{map[string]string{"Role": "KEELSON_ROLE", "DataDir": "KEELSON_DATA_DIR", "Temporal.Address": "KEELSON_TEMPORAL_ADDRESS",
		"Temporal.Namespace": "KEELSON_TEMPORAL_NAMESPACE", "Temporal.TaskQueue": "KEELSON_TEMPORAL_TASK_QUEUE"}[field], problem}
}

// logBudget is KEELSON_LOG_BUDGET_MB in bytes, or -1 (none) for 0.
func logBudget(mb int) int64 {
	if mb == 0 {
		return -1
	}
	return int64(mb) << 20
}
