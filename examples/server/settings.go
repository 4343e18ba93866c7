package main

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/keelson-dev/keelson/auth/apitokens"
	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/container"
	"github.com/keelson-dev/keelson/deployments/ingress/certs"
	"github.com/keelson-dev/keelson/projects/domains"
)

// setting is one environment variable of the reference server, documented
// once: docs/CONFIG.md's table (every setting) and README's (the basic ones)
// are rendered from settings and checked against them by
// TestConfigTableMatchesREADME (KEELSON_UPDATE_README=1 rewrites both).
type setting struct {
	name string
	// basic settings are the few a newcomer needs; README lists only them.
	basic bool
	// def is the value parse gets when the variable is unset or blank.
	def string
	// shown is the table's default column when it is not def itself (markdown).
	shown string
	// doc is the table's meaning column (markdown, one line).
	doc string
	// raw keeps the value as given (secrets: never trimmed).
	raw bool
	// parse stores v (the value, or def) into c; an error names what is
	// wrong with v. Ranges and relations are Validate's.
	parse func(c *Config, v string) error
}

// settings are every variable LoadConfig reads, in docs/CONFIG.md's order.
var settings = []setting{
	{name: "KEELSON_ADDR", basic: true, def: ":8080", doc: "API listen address",
		parse: text(func(c *Config) *string { return &c.Addr })},
	{name: "KEELSON_PPROF_ADDR", shown: "(empty: off)",
		doc:   "Serve `net/http/pprof` (`/debug/pprof/`) on this address, on its own server apart from the API; only a loopback address is taken (e.g. `127.0.0.1:6060`), since profiles reveal memory. Profile with `go tool pprof http://127.0.0.1:6060/debug/pprof/profile?seconds=20`",
		parse: text(func(c *Config) *string { return &c.PprofAddr })},
	{name: "KEELSON_METRICS_ADDR", shown: "(empty: off)",
		doc:   "Serve Prometheus metrics at `/metrics` on this `host:port`, on a listener of its own (never the API's or the ingress' address; the API does not answer `/metrics`). Off by default because metrics reveal operational data (request volumes per route, deployment counts, build times): set it to a loopback address (`127.0.0.1:9090`) or to an address only your private network reaches (compose uses `:9090` on the compose network and does not publish it). See Metrics",
		parse: text(func(c *Config) *string { return &c.MetricsAddr })},
	{name: "KEELSON_DATA_DIR", basic: true, def: "./data", doc: "SQLite file, generated secrets, build workspaces",
		parse: text(func(c *Config) *string { return &c.DataDir })},
	{name: "KEELSON_DATABASE_URL", basic: true, shown: "SQLite file in the data dir", doc: "`postgres://...` or `sqlite:///path/file.db`",
		parse: text(func(c *Config) *string { return &c.DatabaseURL })},
	{name: "KEELSON_PUBLIC_URL", basic: true, def: "http://localhost:8080", doc: "the API's own origin, used in OAuth callbacks",
		parse: baseURL(func(c *Config) *string { return &c.PublicURL })},
	{name: "KEELSON_FRONTEND_URL", basic: true, def: "http://localhost:3000",
		doc:   "where OAuth and install callbacks redirect; mailed links point here (`/reset-password?token=`, `/verify-email?token=`); the one origin CORS allows (with credentials)",
		parse: baseURL(func(c *Config) *string { return &c.FrontendURL })},
	{name: "KEELSON_JWT_SECRET", basic: true, shown: "generated once into the data dir", doc: "signs access tokens (32+ chars)", raw: true,
		parse: text(func(c *Config) *string { return &c.JWTSecret })},
	{name: "KEELSON_SECRET_KEY", basic: true, shown: "generated once into the data dir", doc: "seals secret env values, TOTP secrets and provider tokens (32+ chars)", raw: true,
		parse: text(func(c *Config) *string { return &c.SecretKey })},
	{name: "KEELSON_ADMIN_EMAILS", basic: true, shown: "empty",
		doc:   "comma-separated emails whose accounts are ADMIN, but only once the address is verified as the account's sign-up address (its verification link redeemed; an address taken by an email change never grants ADMIN); read at every request, so removing an address demotes at once",
		parse: parseAdminEmails},
	{name: "KEELSON_TRUSTED_PROXIES", shown: "empty: `X-Forwarded-For` ignored",
		doc:   "comma-separated CIDRs or addresses of your reverse proxies (e.g. `10.0.0.0/8,127.0.0.1`). Only when the TCP peer is one of them is `X-Forwarded-For` believed: the client is the rightmost address in it that is not a trusted proxy. Rate limits key on that address",
		parse: prefixes(func(c *Config) *[]netip.Prefix { return &c.TrustedProxies }, "10.0.0.0/8")},
	{name: "KEELSON_SMTP_URL", shown: "empty: mail is logged",
		doc:   "`smtp://user:pass@host:port`. Mail (verification, reset, email-change links and notices) is queued and sent by two background senders, never inside the request; at shutdown the queue is drained within the shutdown deadline",
		parse: text(func(c *Config) *string { return &c.SMTPURL })},
	{name: "KEELSON_MAIL_FROM", def: "Keelson <no-reply@localhost>", doc: "the sender of that mail",
		parse: text(func(c *Config) *string { return &c.MailFrom })},
	{name: "KEELSON_CODEHOST_CLIENT_ID", shown: "empty: routes answer 503",
		doc:   "OAuth client for `/auth/codehost`; use the GitHub App's own client id (only a GitHub App's user token may list a user's installations, which linking an installation requires)",
		parse: text(func(c *Config) *string { return &c.CodehostClientID })},
	{name: "KEELSON_CODEHOST_CLIENT_SECRET", shown: "empty", doc: "that OAuth client's secret", raw: true,
		parse: text(func(c *Config) *string { return &c.CodehostClientSecret })},
	{name: "KEELSON_CODEHOST_APP_ID", shown: "empty", doc: "the code-hosting app's numeric id",
		parse: text(func(c *Config) *string { return &c.CodehostAppID })},
	{name: "KEELSON_CODEHOST_APP_SLUG", shown: "empty", doc: "the app's slug (its install link names it)",
		parse: text(func(c *Config) *string { return &c.CodehostAppSlug })},
	{name: "KEELSON_CODEHOST_APP_PRIVATE_KEY", shown: "empty", doc: "the app's RSA private key: PEM, or `@file` to read it from a file", raw: true,
		parse: parsePrivateKey},
	{name: "KEELSON_CODEHOST_WEBHOOK_SECRET", shown: "empty", doc: "the app's webhook secret (deliveries are verified against it)", raw: true,
		parse: text(func(c *Config) *string { return &c.CodehostWebhookSecret })},
	{name: "KEELSON_CODEHOST_API_URL", def: "https://api.github.com", doc: "the code host's API; overridable for tests and GitHub Enterprise",
		parse: baseURL(func(c *Config) *string { return &c.CodehostAPIURL })},
	{name: "KEELSON_CODEHOST_WEB_URL", def: "https://github.com", doc: "the code host's web origin; overridable for tests and GitHub Enterprise",
		parse: baseURL(func(c *Config) *string { return &c.CodehostWebURL })},
	{name: "KEELSON_IDP_ISSUER", shown: "empty: routes answer 503", doc: "any OpenID Connect provider, found by discovery",
		parse: text(func(c *Config) *string { return &c.IDPIssuer })},
	{name: "KEELSON_IDP_CLIENT_ID", shown: "empty", doc: "the OpenID Connect client id",
		parse: text(func(c *Config) *string { return &c.IDPClientID })},
	{name: "KEELSON_IDP_CLIENT_SECRET", shown: "empty", doc: "the OpenID Connect client secret", raw: true,
		parse: text(func(c *Config) *string { return &c.IDPClientSecret })},
	{name: "KEELSON_OAUTH_REDIRECT_MODE", def: "tokens",
		doc:   "`tokens`: OAuth logins redirect with `accessToken`/`refreshToken` in the query (SPEC); `code`: with a one-time `code` for `POST /auth/oauth/exchange` (safer)",
		parse: text(func(c *Config) *string { return &c.OAuthRedirectMode })},
	{name: "KEELSON_GIT_CA_FILE", shown: "empty", doc: "extra CA bundle git trusts when cloning (self-hosted code hosts)",
		parse: text(func(c *Config) *string { return &c.GitCAFile })},
	{name: "KEELSON_INGRESS_ADDR", basic: true, def: ":8081", doc: "the ingress proxy for deployed apps",
		parse: text(func(c *Config) *string { return &c.IngressAddr })},
	{name: "KEELSON_INGRESS_TLS_ADDR", shown: "(empty: off)",
		doc:   "HTTPS for deployed apps (e.g. `:443`): certificates from an ACME CA, ordered at the first handshake for a LIVE project's `<slug>.<apps-domain>` or an active custom domain, stored in the database (several ingresses share them). Leave it off behind a load balancer that ends TLS. See [Domains and HTTPS](BEHAVIOUR.md#https)",
		parse: text(func(c *Config) *string { return &c.IngressTLSAddr })},
	{name: "KEELSON_ACME_DIRECTORY_URL", def: certs.LetsEncrypt, doc: "the ACME directory certificates are ordered from",
		parse: text(func(c *Config) *string { return &c.ACMEDirectoryURL })},
	{name: "KEELSON_ACME_EMAIL", shown: "empty", doc: "the ACME account's contact address (expiry notices)",
		parse: text(func(c *Config) *string { return &c.ACMEEmail })},
	{name: "KEELSON_ACME_CA_ROOTS", shown: "empty: the system's roots", doc: "PEM file of extra CA roots trusted for the ACME directory's HTTPS (a private or test CA)",
		parse: text(func(c *Config) *string { return &c.ACMECARoots })},
	{name: "KEELSON_INGRESS_TLS_CERT_FILE", shown: "empty", doc: "PEM certificate (with its chain) you issued yourself, e.g. `*.<apps-domain>`: served for the names it covers, and no certificate is ordered for them",
		parse: text(func(c *Config) *string { return &c.IngressTLSCertFile })},
	{name: "KEELSON_INGRESS_TLS_KEY_FILE", shown: "empty", doc: "its PEM private key",
		parse: text(func(c *Config) *string { return &c.IngressTLSKeyFile })},
	{name: "KEELSON_APPS_DOMAIN", basic: true, def: "localhost", doc: "apps answer at `<slug>.<apps-domain>`",
		parse: lower(func(c *Config) *string { return &c.AppsDomain })},
	{name: "KEELSON_INGRESS_IPS", shown: "empty",
		doc:   "comma-separated public IPv4/IPv6 addresses of the ingress: the A/AAAA records custom apex domains (`example.com`) are told to create. Empty: apex domains are told to use their DNS provider's CNAME flattening (ALIAS) to `<slug>.<apps-domain>`. See [Custom domains](BEHAVIOUR.md#custom-domains)",
		parse: parseIngressIPs},
	{name: "KEELSON_DNS_RESOLVERS", shown: "empty: the system's resolver",
		doc:   "comma-separated DNS servers (`host:port`, or an address for port 53) that custom domains' records are checked with, asked in turn; use a resolver that does not cache long, so a fixed record is seen soon",
		parse: parseResolvers},
	{name: "KEELSON_MAX_DOMAINS_PER_PROJECT", def: strconv.Itoa(domains.DefaultMaxPerProject), doc: "custom domains one project may have (the plan's `customDomains` decides whether it may have any)",
		parse: number(func(c *Config) *int { return &c.MaxDomainsPerProject })},
	{name: "KEELSON_DOMAIN_CHECK_INTERVAL", def: domains.DefaultCheckInterval.String(),
		doc:   "how often every custom domain's DNS records are checked again: an active domain whose records no longer point at Keelson stops being served (its owner is mailed) until they do again",
		parse: duration(func(c *Config) *time.Duration { return &c.DomainCheckInterval })},
	{name: "KEELSON_MAX_API_TOKENS", def: strconv.Itoa(apitokens.DefaultMaxPerUser),
		doc:   "API tokens one account may hold (`POST /auth/tokens` answers 403 past it). See [API tokens](API_TOKENS.md)",
		parse: number(func(c *Config) *int { return &c.MaxAPITokens })},
	{name: "KEELSON_INVITE_TTL", def: "168h0m0s",
		doc:   "how long a team invitation link stays valid (at most 90 days); it also works only once, and only for the invited, verified address. See [Teams](BEHAVIOUR.md#teams)",
		parse: duration(func(c *Config) *time.Duration { return &c.InviteTTL })},
	{name: "KEELSON_AUDIT_RETENTION", def: "365d",
		doc:   "how long audit-log rows are kept (a duration such as `8760h`, or days such as `365d`); older ones are deleted at start, then hourly. See [Audit log](BEHAVIOUR.md#audit-log)",
		parse: duration(func(c *Config) *time.Duration { return &c.AuditRetention })},
	{name: "KEELSON_ALLOW_LOCAL_REPOS", basic: true, def: "false", doc: "allow `file://` or local-path `repoUrl`s (dev and tests)",
		parse: boolean(func(c *Config) *bool { return &c.AllowLocalRepos })},
	{name: "KEELSON_ALLOW_PRIVATE_REPO_HOSTS", def: "false",
		doc:   "allow https repositories on hosts that resolve to loopback, private or link-local addresses (a code host on your LAN); otherwise git is refused and pinned to the public address it was checked against (a host that is an IP literal, e.g. `https://[2001:db8::1]/x.git`, is checked the same way and needs no pin)",
		parse: boolean(func(c *Config) *bool { return &c.AllowPrivateRepoHosts })},
	{name: "KEELSON_MAX_LOG_STREAMS", def: strconv.Itoa(MaxLogStreamsPerUser), doc: "log streams (SSE) one user may hold open at once; past it 429 with `Retry-After`",
		parse: number(func(c *Config) *int { return &c.MaxLogStreams })},
	{name: "KEELSON_REGIONS", def: "local", doc: "regions a project may choose; the first is the default",
		parse: parseRegions},
	{name: "KEELSON_ENGINE", def: "local", doc: "`local` (embedded, one process) or `temporal` (see Scaling out)",
		parse: text(func(c *Config) *string { return &c.Engine })},
	{name: "KEELSON_RUNTIME", basic: true, shown: "`docker`",
		doc:   "where builds and apps run: `docker` (containers with the plan's limits on the engine at `DOCKER_HOST`, else `/var/run/docker.sock`; see Security model) or `process` (plain child processes of the server, not sandboxed: development and single-tenant use only, one WARN line at every start). When no engine answers within `KEELSON_RUNTIME_WAIT`, or its socket refuses the server's user, start-up stops naming this variable; it never falls back to `process`. Workers of the Temporal engine use the same setting",
		parse: lower(func(c *Config) *string { return &c.Runtime })},
	{name: "KEELSON_RUNTIME_WAIT", def: "30s", doc: "how long start-up waits for the Docker engine to answer (a duration, or seconds; at most 10m): an engine started together with the server has this long to come up",
		parse: duration(func(c *Config) *time.Duration { return &c.RuntimeWait })},
	{name: "KEELSON_IMAGE_GO", shown: "`" + container.DefaultImages().Go + "`", doc: "docker runtime: builder image of the `go` preset (needs `go` and `sh`)",
		parse: text(func(c *Config) *string { return &c.ImageGo })},
	{name: "KEELSON_IMAGE_GO_RUN", shown: "`" + container.DefaultImages().GoRun + "`", doc: "docker runtime: run image of the `go` preset (the binary is static, `CGO_ENABLED=0`)",
		parse: text(func(c *Config) *string { return &c.ImageGoRun })},
	{name: "KEELSON_IMAGE_NODE", shown: "`" + container.DefaultImages().Node + "`", doc: "docker runtime: builder and run image of the `node` preset (needs `npm`)",
		parse: text(func(c *Config) *string { return &c.ImageNode })},
	{name: "KEELSON_IMAGE_STATIC", shown: "`" + container.DefaultImages().Static + "`", doc: "docker runtime: run image of the `static` preset (needs `sh` and busybox `httpd`)",
		parse: text(func(c *Config) *string { return &c.ImageStatic })},
	{name: "KEELSON_BUILD_PIDS_LIMIT", def: strconv.Itoa(DefaultBuildPidsLimit),
		doc:   "docker runtime: processes (and threads) one build runs at once, all its steps together (16 to 1000000). Set as `pids.max` of a cgroup the server makes for the build under the host's `/sys/fs/cgroup` and removes after it (the engine must use the `cgroupfs` cgroup driver, and the server must see the host's cgroup file system); a build whose limit cannot be set up does not run",
		parse: number(func(c *Config) *int { return &c.BuildPidsLimit })},
	{name: "KEELSON_EGRESS", def: "fenced",
		doc:   "docker runtime: what builds (`RUN` steps) and apps may reach. `fenced`: the public internet only, not this host (any address or port), loopback, private, CGNAT, link-local (cloud metadata) or IPv6 addresses, nor each other; Keelson keeps iptables rules for its own bridges, so it must run as root on the engine's host, and start-up stops if it cannot. A Dockerfile's `ADD <url>` and images on a private registry are refused. `open`: no rules (single-tenant only). See Security model",
		parse: lower(func(c *Config) *string { return &c.Egress })},
	{name: "KEELSON_EGRESS_ALLOW_CIDRS", shown: "empty",
		doc:   "comma-separated private networks builds and apps may reach all the same when `KEELSON_EGRESS=fenced` (a database on your LAN, a package mirror, a registry), e.g. `10.1.2.0/24,192.168.5.7`",
		parse: prefixes(func(c *Config) *[]netip.Prefix { return &c.EgressAllowCIDRs }, "10.1.2.0/24")},
	{name: "KEELSON_REGISTRY", shown: "empty: images stay on the engine that built them",
		doc:   "docker runtime: an image registry (`host[:port]/path`, e.g. `registry.example.com/keelson`) every build is pushed to (`<registry>/<project id>:<deployment id>`); the deployment records the image by digest, and a host whose engine lacks it pulls it by that digest, never by a tag, so a moved, drained or rolled-back app starts on any host with no clone and no build. A failed push fails BUILD, a failed pull fails PROVISION, each naming the registry or the digest. Set it on every worker. The engine must reach it over TLS, or list it in its `insecure-registries` (127.0.0.0/8 is by default). See Scaling out",
		parse: text(func(c *Config) *string { return &c.Registry })},
	{name: "KEELSON_REGISTRY_USERNAME", shown: "empty", doc: "docker runtime: the user pushes and pulls authenticate as, when the registry asks (sent to the engine for that registry only)",
		parse: text(func(c *Config) *string { return &c.RegistryUsername })},
	{name: "KEELSON_REGISTRY_PASSWORD", shown: "empty", doc: "that user's password or token (never logged)", raw: true,
		parse: text(func(c *Config) *string { return &c.RegistryPassword })},
	{name: "KEELSON_ROLE", def: RoleAll,
		doc:   "`all`: API, deployment steps and apps in one process; `api`: the API only (no runtime, no ingress, no worker); `worker`: runs deployment steps and serves their apps on the ingress, its `KEELSON_ADDR` answers `/healthz` and `/readyz` only. `api` and `worker` need `KEELSON_ENGINE=temporal` and Postgres",
		parse: lower(func(c *Config) *string { return &c.Role })},
	{name: "KEELSON_TEMPORAL_ADDRESS", shown: "empty (required with `temporal`)", doc: "`host:port` of the Temporal frontend; start-up stops if it cannot be reached",
		parse: text(func(c *Config) *string { return &c.TemporalAddress })},
	{name: "KEELSON_TEMPORAL_NAMESPACE", def: "default", doc: "Temporal namespace (must exist; start-up checks it)",
		parse: text(func(c *Config) *string { return &c.TemporalNamespace })},
	{name: "KEELSON_TEMPORAL_TASK_QUEUE", def: "keelson-deployments", doc: "task queue API replicas start workflows on and workers poll; the same on every process of one installation",
		parse: text(func(c *Config) *string { return &c.TemporalTaskQueue })},
	{name: "KEELSON_HOST_ADDRESS", shown: "`KEELSON_INGRESS_ADDR` when it names a host, else this machine's name and its port",
		doc:   "worker (Temporal engine): where other hosts' ingresses reach this host's ingress (`host:port`, plain HTTP): every ingress forwards the apps other hosts run there, so a load balancer may send any app's traffic to any worker. Shown on `GET /hosts`",
		parse: text(func(c *Config) *string { return &c.HostAddress })},
	{name: "KEELSON_HOST_MAX_APPS", def: "0", doc: "worker: most apps this host runs, shown on `GET /hosts` for placement; `0`: no limit",
		parse: number(func(c *Config) *int { return &c.HostMaxApps })},
	{name: "KEELSON_HOST_DOWN_AFTER", def: "30s",
		doc:   "a host (a worker's machine) whose heartbeat (every 10 s) is older than this is `down`: once per outage another worker deploys each of its LIVE deployments again (from its image when `KEELSON_REGISTRY` holds it, with no build; else the same commit built again) on a host that answers, and the old deployment's log says so; a down host can be removed from `GET /hosts`. At least 20s",
		parse: duration(func(c *Config) *time.Duration { return &c.HostDownAfter })},
	{name: "KEELSON_READ_HEADER_TIMEOUT", def: "5s", doc: "longest a client may take to send its request headers (a duration, or seconds); API and ingress",
		parse: duration(func(c *Config) *time.Duration { return &c.ReadHeaderTimeout })},
	{name: "KEELSON_READ_TIMEOUT", def: "2m", doc: "longest a client may take to send a whole request, body included (webhooks up to 25 MB); never cuts a log stream",
		parse: duration(func(c *Config) *time.Duration { return &c.ReadTimeout })},
	{name: "KEELSON_IDLE_TIMEOUT", def: "60s", doc: "how long a keep-alive connection may sit idle between requests",
		parse: duration(func(c *Config) *time.Duration { return &c.IdleTimeout })},
	{name: "KEELSON_MAX_CONNS", def: strconv.Itoa(DefaultMaxConns),
		doc:   "connections the API listener holds open (16 to 1000000). At the cap a new connection first evicts the one that waited longest without progress (still sending its headers or its body, or idle), so a whole request such as `/healthz` always gets in; when every held connection is busy with a request, the new one is answered `503` with `Retry-After: 5` and closed. An open log stream holds its connection (counted as busy) until it ends",
		parse: number(func(c *Config) *int { return &c.MaxConns })},
	{name: "KEELSON_INGRESS_MAX_CONNS", def: strconv.Itoa(DefaultIngressMaxConns), doc: "the same cap for the ingress listener. Keep both caps well under the process's open-file limit (`ulimit -n`)",
		parse: number(func(c *Config) *int { return &c.IngressMaxConns })},
	{name: "KEELSON_MAX_CONNS_PER_ADDR", def: strconv.Itoa(DefaultMaxConnsPerAddr),
		doc:   "connections one client address holds on the API listener (an IPv6 address counts by its /64, as for every per-address limit; the TCP peer, and `KEELSON_TRUSTED_PROXIES` are not capped). At its cap a new connection of the address evicts its own oldest waiting one (headers or body still arriving, or idle); when all of them are busy it is answered `429` with `Retry-After: 5`",
		parse: number(func(c *Config) *int { return &c.MaxConnsPerAddr })},
	{name: "KEELSON_INGRESS_MAX_CONNS_PER_ADDR", def: strconv.Itoa(DefaultIngressMaxConnsPerAddr), doc: "the same cap per client address for the ingress listener",
		parse: number(func(c *Config) *int { return &c.IngressMaxConnsPerAddr })},
	{name: "KEELSON_MAX_BODY_MEMORY_MIB", def: strconv.Itoa(DefaultMaxBodyMemoryMiB),
		doc:   "memory all request bodies being handled may hold together (16 or more). Each body reserves 3x its size (buffering and decoding) once its first bytes arrived (at most `KEELSON_MAX_BODY_MEMORY_PER_ADDR_MIB`), in arrival order; one waiting more than 30 s is answered `429` with `Retry-After` when its address' own bodies hold its share, else `503`. A declared body larger than its route accepts (the webhook 25 MiB, every other route 2 MiB) is `413` before it is read. JSON bodies nested deeper than 64 levels are `400` (checked before decoding)",
		parse: number(func(c *Config) *int { return &c.MaxBodyMemoryMiB })},
	{name: "KEELSON_MAX_BODY_MEMORY_PER_ADDR_MIB", def: strconv.Itoa(DefaultMaxBodyMemoryPerAddrMiB),
		doc:   "the part of `KEELSON_MAX_BODY_MEMORY_MIB` the bodies of one client address may hold at once (1 to that setting); a body reserves at most this much. The reservation is made only once the body's first bytes arrived: a body that does not come holds nothing",
		parse: number(func(c *Config) *int { return &c.MaxBodyMemoryPerAddrMiB })},
	{name: "KEELSON_MIN_BODY_RATE_KIB", def: strconv.Itoa(DefaultMinBodyRateKiB),
		doc:   "the slowest a request body may arrive on the API, in KiB per second after the headers: its first bytes get 5 s, then by 5 s + n / rate its first n bytes must be in, else `408` and the connection is closed (its memory reservation given back). While a body arrives its connection counts as waiting for the connection caps, evictable like one still sending headers. `KEELSON_READ_TIMEOUT` still bounds the whole body",
		parse: number(func(c *Config) *int { return &c.MinBodyRateKiB })},
	{name: "KEELSON_BUILD_LOG_MAX_LINES", def: strconv.Itoa(deployments.DefaultMaxBuildLines),
		doc:   "build output lines stored per deployment (an operator setting, the same for every plan). Past this or `KEELSON_BUILD_LOG_MAX_MB`, one system line says `build output reached the log cap (...)` and later build output is dropped unread; the build itself runs on",
		parse: number(func(c *Config) *int { return &c.BuildLogMaxLines })},
	{name: "KEELSON_BUILD_LOG_MAX_MB", def: strconv.Itoa(int(deployments.DefaultMaxBuildBytes >> 20)), doc: "build output stored per deployment, in MiB (see the line above)",
		parse: number(func(c *Config) *int { return &c.BuildLogMaxMB })},
	{name: "KEELSON_APP_LOG_MAX_LINES", def: strconv.Itoa(deployments.DefaultMaxAppLines),
		doc:   "app output lines kept per deployment: the newest are kept, older ones deleted in steps of a tenth of the cap; one system line says so the first time",
		parse: number(func(c *Config) *int { return &c.AppLogMaxLines })},
	{name: "KEELSON_LOG_RETENTION", def: "30d",
		doc:   "logs of deployments that ended FAILED or CANCELLED longer ago are deleted (at start, then hourly; a duration such as `720h`, or days such as `30d`); LIVE deployments keep theirs. SQLite databases run in `auto_vacuum=INCREMENTAL` mode and give the freed pages back (`PRAGMA incremental_vacuum`); a database created before this mode is rewritten once (`VACUUM`) at the first start, which takes a while on a large file",
		parse: duration(func(c *Config) *time.Duration { return &c.LogRetention })},
	{name: "KEELSON_LOG_BUDGET_MB", def: strconv.Itoa(DefaultLogBudgetMB),
		doc:   "log messages (build, app and system lines) all of one account's deployments keep together, in MiB; `0`: no budget. Past it, the logs of the account's oldest ended deployments (FAILED or CANCELLED, replaced ones included) are deleted first, whole, each leaving one line saying why, until the account is within it; checked as lines are stored and hourly. The logs of a LIVE deployment or of a running build are never deleted for it (the caps above bound those), so an account can stay over while they hold more. `GET /usage` shows `logs.usedBytes` against `logs.limitBytes`",
		parse: number(func(c *Config) *int { return &c.LogBudgetMB })},
	{name: "KEELSON_KEEP_BUILDS", def: strconv.Itoa(deployments.DefaultKeepBuilds),
		doc:   "how many replaced deployments of each project keep their build (the Docker image, or the process runtime's workspace) so `POST /deployments/{id}/rollback` can run it again with no clone and no build; older builds are removed as deployments are replaced, and a rollback to one answers 409. `0`: none kept, no rollbacks",
		parse: number(func(c *Config) *int { return &c.KeepBuilds })},
	{name: "KEELSON_BUILDS_PER_USER", def: strconv.Itoa(DefaultBuildsPerUser),
		doc:   "deployments one account runs at once, on either engine (across every worker of the Temporal engine); an account whose plan has `priorityBuilds` gets twice as many, and its builds are taken first. A deployment past its account's share stays `QUEUED` with a log line saying so",
		parse: number(func(c *Config) *int { return &c.BuildsPerUser })},
	{name: "KEELSON_BUILD_SLOTS", def: strconv.Itoa(DefaultBuildSlots),
		doc:   "builds (deployments from BUILD until LIVE or ended) running at once: on the local engine in this server, on the Temporal engine across every worker (set the same on each; the queue is in `deployment_build_slots`). A free slot goes to a waiting deployment of a `priorityBuilds` account first, then of the account with the fewest running, then the oldest, so another account's waiting build goes before an account's extra ones; a deployment waiting for a slot logs its position",
		parse: number(func(c *Config) *int { return &c.BuildSlots })},
	{name: "KEELSON_FREE_BUILD_SLOTS", def: "0", shown: "`0`: `KEELSON_BUILD_SLOTS` - 1",
		doc:   "how many of the build slots the builds of accounts on a FREE-tier plan (or whose plan cannot be read) hold together, so FREE accounts cannot hold every slot; less than `KEELSON_BUILD_SLOTS` (with one slot, FREE builds may take it). A FREE deployment past it stays `QUEUED` with a line saying so",
		parse: number(func(c *Config) *int { return &c.FreeBuildSlots })},
}

// Parsers of the kinds of values settings hold.

func text(field func(*Config) *string) func(*Config, string) error {
	return func(c *Config, v string) error { *field(c) = v; return nil }
}

// baseURL stores a URL without its trailing slashes.
func baseURL(field func(*Config) *string) func(*Config, string) error {
	return func(c *Config, v string) error { *field(c) = strings.TrimRight(v, "/"); return nil }
}

func lower(field func(*Config) *string) func(*Config, string) error {
	return func(c *Config, v string) error { *field(c) = strings.ToLower(v); return nil }
}

func boolean(field func(*Config) *bool) func(*Config, string) error {
	return func(c *Config, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%q is not true or false", v)
		}
		*field(c) = b
		return nil
	}
}

func number(field func(*Config) *int) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("%q is not a whole number", v)
		}
		*field(c) = n
		return nil
	}
}

// duration reads a duration ("90s", "2m", "720h"), a number of days ("30d")
// or a number of seconds ("30").
func duration(field func(*Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		if days, ok := strings.CutSuffix(v, "d"); ok && err != nil {
			if n, nerr := strconv.Atoi(days); nerr == nil {
				d, err = time.Duration(n)*24*time.Hour, nil
			}
		}
		if err != nil {
			n, nerr := strconv.Atoi(v)
			if nerr != nil {
				return fmt.Errorf("%q is not a duration (e.g. 5s, 2m, 30d) or a number of seconds", v)
			}
			d = time.Duration(n) * time.Second
		}
		*field(c) = d
		return nil
	}
}

// list splits a comma-separated value, dropping blank items.
func list(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func parseAdminEmails(c *Config, v string) error {
	c.AdminEmails = nil
	for _, e := range list(v) {
		c.AdminEmails = append(c.AdminEmails, strings.ToLower(e))
	}
	return nil
}

// prefixes reads a list of CIDRs or addresses (an address is its own /32 or
// /128); example is a CIDR the error message shows.
func prefixes(field func(*Config) *[]netip.Prefix, example string) func(*Config, string) error {
	return func(c *Config, v string) error {
		var out []netip.Prefix
		for _, p := range list(v) {
			pfx, err := netip.ParsePrefix(p)
			if err != nil {
				a, aerr := netip.ParseAddr(p)
				if aerr != nil {
					return fmt.Errorf("%q is not a CIDR (%s) or an IP address", p, example)
				}
				pfx = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
			}
			out = append(out, pfx.Masked())
		}
		*field(c) = out
		return nil
	}
}

func parseIngressIPs(c *Config, v string) error {
	c.IngressIPs = nil
	for _, p := range list(v) {
		a, err := netip.ParseAddr(p)
		if err != nil || a.Zone() != "" {
			return fmt.Errorf("%q is not an IP address", p)
		}
		c.IngressIPs = append(c.IngressIPs, a.Unmap())
	}
	return nil
}

// parseResolvers reads host:port DNS servers; an address alone is port 53.
func parseResolvers(c *Config, v string) error {
	c.DNSResolvers = nil
	for _, r := range list(v) {
		if a, err := netip.ParseAddr(r); err == nil {
			r = netip.AddrPortFrom(a, 53).String()
		}
		host, port, err := net.SplitHostPort(r)
		if p, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || p < 1 || p > 65535 {
			return fmt.Errorf("%q is not host:port (e.g. 1.1.1.1:53)", r)
		}
		c.DNSResolvers = append(c.DNSResolvers, r)
	}
	return nil
}

func parseRegions(c *Config, v string) error {
	c.Regions = list(v)
	return nil
}

// parsePrivateKey takes a PEM, or @file to read one from.
func parsePrivateKey(c *Config, v string) error {
	if name, ok := strings.CutPrefix(v, "@"); ok {
		b, err := os.ReadFile(name)
		if err != nil {
			return fmt.Errorf("cannot read key file %s", name)
		}
		v = string(b)
	}
	c.CodehostAppPrivateKey = v
	return nil
}

// configTable renders a Configuration table from settings: every one for
// docs/CONFIG.md, or only the basic ones for README.
func configTable(basicOnly bool) string {
	var b strings.Builder
	b.WriteString("| variable | default | meaning |\n|---|---|---|\n")
	for _, s := range settings {
		if basicOnly && !s.basic {
			continue
		}
		def := s.shown
		if def == "" {
			def = "`" + s.def + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", s.name, def, s.doc)
	}
	return b.String()
}
