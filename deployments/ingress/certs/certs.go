// Package certs gives the ingress HTTPS: certificates from an ACME CA (Let's
// Encrypt by default), issued on demand at the first TLS handshake for a
// hostname the host allows, kept in Keelson's database and renewed ahead of
// expiry. It is built on github.com/caddyserver/certmagic:
//
//   - on-demand issuance behind Config.Allowed (the ingress: an active custom
//     domain or the apps-domain host of a project that is LIVE), then a
//     per-host and a global rate limit on orders (a certificate the
//     database holds loads without counting);
//   - HTTP-01 (Handler answers /.well-known/acme-challenge/ before any app
//     routing) and TLS-ALPN-01 (TLSConfig) challenges, both enabled;
//   - Storage: certificates, the ACME account, challenge state and locks in
//     the database, so several ingresses share them and one orders a
//     certificate while the others wait for it;
//   - renewal ahead of expiry by the Manager's own loop, when a third of a
//     certificate's lifetime is left or the CA's renewal info says, under a
//     context Close ends (renew.go);
//   - plain HTTP redirected to HTTPS for a host whose certificate is held,
//     in memory or in the database (Holds: a restarted ingress redirects
//     before any handshake), unless Config.KeepHTTP keeps it; HSTS for the
//     hosts Config.HSTS names (HTTPSHandler);
//   - a static certificate (the apps domain's wildcard, issued by the
//     operator) served instead of ordering one for the names it covers.
package certs

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/keelson-dev/keelson/platform"
	"github.com/mholt/acmez/v3"
	"github.com/uptrace/bun"
	"go.uber.org/zap"
)

// LetsEncrypt is the default ACME directory.
const LetsEncrypt = certmagic.LetsEncryptProductionCA

// Config configures a Manager.
type Config struct {
	// DB holds the certificates and locks (Migrations). Required.
	DB *bun.DB
	// Allowed decides whether a certificate may be obtained for host (lower
	// case, no port): nil when it may. Required.
	Allowed func(ctx context.Context, host string) error
	// Challenged decides whether an ACME challenge for host (lower case, no
	// port) is looked up: true for every host this ingress or another one
	// sharing the database may have ordered a certificate for. The lookup
	// of a challenge this ingress did not start reads the database, so a
	// host no ingress serves must answer false: made-up Host headers and
	// SNI names then cost no query. Default: the hosts Allowed here.
	Challenged func(ctx context.Context, host string) bool
	// DirectoryURL is the ACME directory. Default LetsEncrypt.
	DirectoryURL string
	// Email is the ACME account's contact. Optional.
	Email string
	// Roots are extra roots to trust for the ACME directory's HTTPS (a
	// test CA). Optional: the system's roots.
	Roots *x509.CertPool
	// StaticCertFile and StaticKeyFile are a PEM certificate and key (the
	// apps domain's wildcard) served for the names they cover; no ACME
	// order is placed for those. Optional; both or neither.
	StaticCertFile, StaticKeyFile string
	// HTTPSPort is the port clients reach HTTPS on, for redirects; 443 or 0
	// leaves it out of the URL.
	HTTPSPort int
	// KeepHTTP, when set and true for host, serves host on plain HTTP too
	// instead of redirecting to HTTPS. Optional.
	KeepHTTP func(host string) bool
	// HSTS, when set and true for host, adds Strict-Transport-Security to
	// its HTTPS answers. Optional.
	HSTS func(host string) bool
	// OnCertificate, when set, is told each certificate obtained (or
	// renewed), with its expiry, and each order given up on (err set).
	// Optional.
	OnCertificate func(ctx context.Context, host string, expires time.Time, err error)
	// RenewCheckEvery is how often the certificates of the hosts still
	// served are checked for renewal (renewed when a third of their lifetime
	// is left, or when the CA's renewal info says: renew.go). Default 10
	// minutes.
	RenewCheckEvery time.Duration
	// Limits bound ACME orders. Defaults: DefaultLimits.
	Limits Limits
	// Logger receives issuance and renewal messages. Default: discard.
	Logger *slog.Logger
}

// Limits bound how often a certificate is sought: each host may start
// HostBurst, then one per HostEvery; all hosts together GlobalBurst, then
// one per GlobalEvery. A handshake past them fails at once.
type Limits struct {
	HostBurst   int
	HostEvery   time.Duration
	GlobalBurst int
	GlobalEvery time.Duration
}

// DefaultLimits: 3 per host, then one a minute; 30 in all, then one every 2 s.
var DefaultLimits = Limits{HostBurst: 3, HostEvery: time.Minute, GlobalBurst: 30, GlobalEvery: 2 * time.Second}

// Manager obtains, stores, renews and serves the ingress's certificates.
type Manager struct {
	cfg     Config
	storage *Storage
	cache   *certmagic.Cache
	magic   *certmagic.Config     // handshakes: on-demand issuance, no ARI
	renewer *certmagic.Config     // the renewal loop's: earlier window, ARI, orders with "replaces"
	issuer  *certmagic.ACMEIssuer // magic's, which answers the challenges
	limit   *limiter
	log     *slog.Logger

	// life is the Manager's lifetime, the renewal loop's context: Close
	// cancels it (stop), which ends a renewal under way.
	life       context.Context
	stop       context.CancelFunc
	closeCache sync.Once

	obtained, failed, refused atomic.Uint64

	held heldCache // whether the database holds a host's certificate (stored)

	mu       sync.Mutex
	names    map[string]bool // hosts a certificate was sought for: renew's
	renewals *platform.Loop
	ariNext  map[string]ariCheck // the loop's own: refreshARI

	staticNames []string // the static certificate's names (Held)
	staticHash  string   // and its hash in the cache (never renewed)
}

// Stats are a Manager's counts since it was built, for metrics.
type Stats struct {
	// Obtained and Failed count certificate orders (and renewals) this
	// ingress completed or gave up on; Refused counts handshakes for a host
	// the rules or the rate limits turned away (no order placed).
	Obtained, Failed, Refused uint64
}

// Stats returns the counts so far.
func (m *Manager) Stats() Stats {
	return Stats{Obtained: m.obtained.Load(), Failed: m.failed.Load(), Refused: m.refused.Load()}
}

// Held counts the valid certificates this ingress serves from memory (the
// ones it sought for hosts it still serves, and the static one) and
// returns the earliest expiry among them (zero when none), for metrics: a
// renewal that keeps failing shows as an expiry coming closer.
func (m *Manager) Held() (n int, earliest time.Time) {
	m.mu.Lock()
	names := make([]string, 0, len(m.names)+1)
	for h := range m.names {
		names = append(names, h)
	}
	m.mu.Unlock()
	names = append(names, m.staticNames...)
	seen := map[string]bool{}
	for _, h := range names {
		for _, c := range m.cache.AllMatchingCertificates(h) {
			if c.Leaf == nil || c.Expired() || seen[c.Hash()] {
				continue
			}
			seen[c.Hash()] = true
			if n++; earliest.IsZero() || c.Leaf.NotAfter.Before(earliest) {
				earliest = c.Leaf.NotAfter
			}
		}
	}
	return n, earliest
}

// event counts certmagic's outcomes and tells OnCertificate.
func (m *Manager) event(ctx context.Context, event string, data map[string]any) error {
	host, _ := data["identifier"].(string)
	var err error
	switch event {
	case "cert_obtained":
		m.obtained.Add(1)
		m.log.Info("certs: certificate obtained", "host", host, "renewal", data["renewal"])
	case "cert_failed":
		if m.life.Err() != nil {
			// Close cut a renewal short: no failure of the certificate's.
			m.log.Debug("certs: renewal ended by Close", "host", host)
			return nil
		}
		m.failed.Add(1)
		m.log.Warn("certs: certificate not obtained", "host", host, "renewal", data["renewal"], "err", data["error"])
		if err, _ = data["error"].(error); err == nil {
			err = errors.New("certificate not obtained")
		}
	default:
		return nil
	}
	if m.cfg.OnCertificate != nil && host != "" {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		var exp time.Time
		if err == nil {
			// The certificate just stored: a renewed one is not in memory
			// yet, where the one it replaces still is (Expiry's answer).
			var serr error
			if exp, serr = m.storedExpiry(ctx, host); serr != nil {
				exp, _ = m.Expiry(ctx, host)
			}
		}
		m.cfg.OnCertificate(ctx, host, exp, err)
	}
	return nil
}

// New builds a Manager; Close stops its renewals and releases its locks.
func New(ctx context.Context, cfg Config) (*Manager, error) {
	if cfg.DB == nil || cfg.Allowed == nil {
		return nil, errors.New("certs: DB and Allowed are required")
	}
	if (cfg.StaticCertFile == "") != (cfg.StaticKeyFile == "") {
		return nil, errors.New("certs: a static certificate needs both its certificate and its key file")
	}
	cfg.DirectoryURL = cmp.Or(cfg.DirectoryURL, LetsEncrypt)
	if cfg.Challenged == nil {
		allowed := cfg.Allowed
		cfg.Challenged = func(ctx context.Context, host string) bool { return allowed(ctx, host) == nil }
	}
	if cfg.Limits == (Limits{}) {
		cfg.Limits = DefaultLimits
	}
	log := cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	m := &Manager{cfg: cfg, storage: NewStorage(cfg.DB), limit: newLimiter(cfg.Limits), log: log,
		names: map[string]bool{}, ariNext: map[string]ariCheck{}}
	m.life, m.stop = context.WithCancel(context.Background())
	zl := zapLogger(log)
	m.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert:   func(certmagic.Certificate) (*certmagic.Config, error) { return m.magic, nil },
		RenewCheckInterval: cfg.RenewCheckEvery,
		Logger:             zl,
	})
	// Handshakes renew only late (handshakeRatio) and never for ARI, which
	// certmagic would do in goroutines of its own: see renew.go.
	m.magic = certmagic.New(m.cache, certmagic.Config{
		Storage:            m.storage,
		OnDemand:           &certmagic.OnDemandConfig{DecisionFunc: m.decide},
		RenewalWindowRatio: handshakeRatio,
		DisableARI:         true,
		OnEvent:            m.event,
		Logger:             zl,
	})
	m.issuer = acmeIssuer(m.magic, cfg, zl)
	m.magic.Issuers = []certmagic.Issuer{m.issuer}
	m.renewer = certmagic.New(m.cache, certmagic.Config{
		Storage:            m.storage,
		RenewalWindowRatio: renewRatio,
		OnEvent:            m.event,
		Logger:             zl,
	})
	m.renewer.Issuers = []certmagic.Issuer{replacingIssuer(m.renewer, cfg, zl)}
	if err := m.loadStatic(ctx); err != nil {
		m.stop()
		m.cache.Stop()
		return nil, err
	}
	m.renewals = platform.Every(m.life, cmp.Or(cfg.RenewCheckEvery, 10*time.Minute), false, nil, m.renew)
	return m, nil
}

// replacingIssuer is the renewal loop's ACME issuer: its orders name the
// certificate they renew (RFC 9773's "replaces"), which Let's Encrypt
// exempts from its rate limits. certmagic sets it (acmeissuer.go, doIssue)
// only for an issuer whose own Config has ARI on, and never on the "test
// CA", which an issuer is on whenever TestCA equals the directory; so this
// one is the renewer's, and has no test CA (NewACMEIssuer would fill in
// Let's Encrypt's staging, where a retry would then go). The handshakes'
// issuer keeps TestCA equal to the directory: never staging, never
// "replaces". A CA that refuses "replaces" as alreadyReplaced gets the
// order again without it (acmez's ObtainCertificate).
func replacingIssuer(renewer *certmagic.Config, cfg Config, zl *zap.Logger) *certmagic.ACMEIssuer {
	iss := acmeIssuer(renewer, cfg, zl)
	iss.TestCA = ""
	return iss
}

// acmeIssuer is an issuer of cfg's ACME directory on the certmagic Config c,
// with the directory as its "test CA" too (so never Let's Encrypt's staging).
func acmeIssuer(c *certmagic.Config, cfg Config, zl *zap.Logger) *certmagic.ACMEIssuer {
	return certmagic.NewACMEIssuer(c, certmagic.ACMEIssuer{
		CA: cfg.DirectoryURL, TestCA: cfg.DirectoryURL, Email: cfg.Email, Agreed: true,
		TrustedRoots: cfg.Roots, Logger: zl,
	})
}

// loadStatic caches the static certificate, if any, and notes its names.
func (m *Manager) loadStatic(ctx context.Context) error {
	if m.cfg.StaticCertFile == "" {
		return nil
	}
	hash, err := m.magic.CacheUnmanagedCertificatePEMFile(ctx, m.cfg.StaticCertFile, m.cfg.StaticKeyFile, nil)
	if err != nil {
		return fmt.Errorf("certs: static certificate %s: %w", m.cfg.StaticCertFile, err)
	}
	m.staticHash = hash
	if pemBytes, err := os.ReadFile(m.cfg.StaticCertFile); err == nil {
		if leaf, err := firstCert(pemBytes); err == nil {
			m.staticNames = leaf.DNSNames
		}
	}
	return nil
}

// decide is certmagic's on-demand decision: the host's rule, then the rate
// limits. It runs at a handshake for a name with no certificate in memory,
// before certmagic loads one from storage or orders one, and before it
// renews one held in memory. Loading a stored certificate places no order,
// so it passes the limits without a token (else a restarted ingress could
// serve only GlobalBurst of its hosts at once, then one per GlobalEvery);
// a renewal is an order and takes one.
func (m *Manager) decide(ctx context.Context, name string) error {
	name = strings.ToLower(name)
	if err := m.cfg.Allowed(ctx, name); err != nil {
		m.refused.Add(1)
		m.log.Debug("certs: no certificate for this host", "host", name, "reason", err)
		return err
	}
	load := !m.HasCertificate(name) && m.stored(ctx, name)
	if !load && !m.limit.allow(name, time.Now()) {
		m.refused.Add(1)
		m.log.Warn("certs: certificate requests for this host are rate limited", "host", name)
		return fmt.Errorf("certs: %s: too many certificate requests; try again later", name)
	}
	m.mu.Lock()
	m.names[name] = true
	m.mu.Unlock()
	return nil
}

// TLSConfig is the TLS listener's configuration: certificates by SNI
// (issued on demand), TLS-ALPN-01 challenges, HTTP/2 and HTTP/1.1.
func (m *Manager) TLSConfig() *tls.Config {
	c := m.magic.TLSConfig()
	c.NextProtos = append([]string{"h2", "http/1.1"}, c.NextProtos...)
	c.MinVersion = tls.VersionTLS12
	get := c.GetCertificate
	c.GetCertificate = func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		// A TLS-ALPN-01 challenge handshake for a host not Challenged is
		// refused before certmagic looks the challenge up in the database.
		if slices.Contains(hello.SupportedProtos, acmez.ACMETLS1Protocol) &&
			!m.cfg.Challenged(hello.Context(), hostOnly(hello.ServerName)) {
			return nil, errNoChallenge
		}
		return get(hello)
	}
	return c
}

// errNoChallenge refuses an ACME challenge for a host not Challenged.
var errNoChallenge = errors.New("certs: no ACME challenge for this host")

// Handler wraps the plain-HTTP ingress: it answers every request under
// /.well-known/acme-challenge/ itself (the challenge of this or another
// ingress sharing the database, or 404: never the app's), and redirects a
// host with a certificate (Holds) to HTTPS unless KeepHTTP says otherwise.
func (m *Manager) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/.well-known/acme-challenge/") {
			if !m.cfg.Challenged(r.Context(), hostOnly(r.Host)) || !m.issuer.HandleHTTPChallenge(w, r) {
				http.Error(w, "no such ACME challenge", http.StatusNotFound)
			}
			return
		}
		host := hostOnly(r.Host)
		if (m.cfg.KeepHTTP == nil || !m.cfg.KeepHTTP(host)) && m.Holds(r.Context(), host) {
			http.Redirect(w, r, m.httpsURL(host, r.URL.RequestURI()), http.StatusPermanentRedirect)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// HTTPSHandler wraps the HTTPS ingress: Strict-Transport-Security for the
// hosts HSTS opts in.
func (m *Manager) HTTPSHandler(next http.Handler) http.Handler {
	if m.cfg.HSTS == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if m.cfg.HSTS(hostOnly(r.Host)) {
			w.Header().Set("Strict-Transport-Security", "max-age=31536000")
		}
		next.ServeHTTP(w, r)
	})
}

func (m *Manager) httpsURL(host, uri string) string {
	if p := m.cfg.HTTPSPort; p != 0 && p != 443 {
		host = net.JoinHostPort(host, fmt.Sprint(p))
	}
	return "https://" + host + uri
}

// Holds reports whether a valid certificate for host is held: in this
// ingress's memory (HasCertificate), or, for a host Allowed, in the
// database (another ingress obtained it, or this one before a restart,
// and no handshake has loaded it here yet). The database's answer is
// remembered (heldCache), so plain HTTP costs a query per host at most
// every storedMissTTL; a host not Allowed is never looked up, so a flood
// of made-up Host headers costs none.
func (m *Manager) Holds(ctx context.Context, host string) bool {
	if m.HasCertificate(host) {
		return true
	}
	if ok, known := m.held.get(host, time.Now()); known {
		return ok
	}
	return m.cfg.Allowed(ctx, host) == nil && m.stored(ctx, host)
}

// stored reports whether the database holds a valid certificate for host,
// remembering the answer (heldCache).
func (m *Manager) stored(ctx context.Context, host string) bool {
	now := time.Now()
	if ok, known := m.held.get(host, now); known {
		return ok
	}
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	exp, err := m.storedExpiry(lctx, host)
	switch {
	case err == nil:
		until := now.Add(storedHitTTL)
		if exp.Before(until) {
			until = exp
		}
		m.held.put(host, true, until)
		return true
	case !errors.Is(err, fs.ErrNotExist) && ctx.Err() == nil:
		m.log.Warn("certs: look up a stored certificate", "host", host, "err", err)
	}
	m.held.put(host, false, now.Add(storedMissTTL))
	return false
}

// HasCertificate reports whether this ingress holds a valid certificate
// for host in memory (after a handshake, or the static one).
func (m *Manager) HasCertificate(host string) bool {
	for _, c := range m.cache.AllMatchingCertificates(host) {
		if !c.Expired() {
			return true
		}
	}
	return false
}

// Status says in words whether host's certificate is ready, for the DNS
// step's log: ready (with its expiry) when this ingress or the database
// holds one, else that it is issued at the first HTTPS request.
func (m *Manager) Status(ctx context.Context, host string) string {
	if exp, ok := m.Expiry(ctx, host); ok {
		return "ready, expires " + exp.UTC().Format(time.RFC3339)
	}
	return "issued at the first HTTPS request"
}

// Expiry returns when host's certificate expires, if one is held in memory
// or stored.
func (m *Manager) Expiry(ctx context.Context, host string) (time.Time, bool) {
	for _, c := range m.cache.AllMatchingCertificates(host) {
		if c.Leaf != nil && !c.Expired() {
			return c.Leaf.NotAfter, true
		}
	}
	exp, err := m.storedExpiry(ctx, host)
	return exp, err == nil
}

// storedExpiry returns when the certificate the database holds for host
// expires; an error wrapping fs.ErrNotExist when it holds none that is
// valid.
func (m *Manager) storedExpiry(ctx context.Context, host string) (time.Time, error) {
	pemBytes, err := m.storage.Load(ctx, certmagic.StorageKeys.SiteCert(m.issuer.IssuerKey(), host))
	if err != nil {
		return time.Time{}, err
	}
	leaf, err := firstCert(pemBytes)
	if err != nil || time.Now().After(leaf.NotAfter) {
		return time.Time{}, fmt.Errorf("certs: %s: no valid stored certificate: %w", host, fs.ErrNotExist)
	}
	return leaf.NotAfter, nil
}

// Close stops the renewal loop and waits, at most until ctx ends, for a
// renewal under way, which it ends (its context is the Manager's lifetime);
// then it stops the cache and releases the locks this Manager holds.
// Calling it again is harmless.
func (m *Manager) Close(ctx context.Context) error {
	m.stop()
	stopped := make(chan struct{})
	go func() {
		m.renewals.Stop()
		close(stopped)
	}()
	var err error
	select {
	case <-stopped:
	case <-ctx.Done():
		select {
		case <-stopped:
		default:
			err = fmt.Errorf("certs: a renewal was still ending: %w", ctx.Err())
		}
	}
	m.closeCache.Do(m.cache.Stop)
	return errors.Join(err, m.storage.Close(ctx))
}

func hostOnly(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return strings.TrimSuffix(strings.ToLower(h), ".")
}
