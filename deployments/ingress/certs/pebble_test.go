package certs_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/keelson-dev/keelson/deployments/ingress"
	"github.com/keelson-dev/keelson/deployments/ingress/certs"
	"github.com/keelson-dev/keelson/deployments/ingress/certs/acmetest"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/keelson-dev/keelson/platform/platformtest"
	"github.com/keelson-dev/keelson/projects/domains/dnstest"
)

// edge is one ingress under test: the router behind a plain-HTTP and an
// HTTPS listener, with certificates from a Manager.
type edge struct {
	router   *ingress.Router
	mgr      *certs.Manager
	httpAddr string
	tlsAddr  string
}

// app is a real upstream that answers its name and counts the requests for
// an ACME challenge path it got (there must be none).
type app struct {
	addr       string
	challenges atomic.Int64
}

func startApp(t *testing.T, name string) *app {
	t.Helper()
	a := &app{}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "acme-challenge") {
			a.challenges.Add(1)
		}
		fmt.Fprintf(w, "%s proto=%s", name, r.Header.Get("X-Forwarded-Proto"))
	})}
	go srv.Serve(l) //nolint:errcheck
	t.Cleanup(func() { srv.Close() })
	a.addr = l.Addr().String()
	return a
}

// listen opens a loopback listener (its port is what Pebble checks).
func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func port(l net.Listener) int { return l.Addr().(*net.TCPAddr).Port }

// hostOnPebble is one app host of the renewal tests: <slug>.apps.example.test,
// routed to an app of its own and named in a test DNS, with a Pebble that
// issues certificates valid for validity (0: Pebble's default), a database
// and the listeners its first ingress (edge) serves on.
type hostOnPebble struct {
	dns         *dnstest.Server
	bdb         *bun.DB
	p           *acmetest.Pebble
	router      *ingress.Router
	httpL, tlsL net.Listener
	host        string
}

func newHostOnPebble(t *testing.T, slug string, validity time.Duration) *hostOnPebble {
	t.Helper()
	h := &hostOnPebble{dns: dnstest.Start(t), bdb: dbtest.SQLite(t, sets...), httpL: listen(t), tlsL: listen(t),
		host: slug + ".apps.example.test"}
	h.p = acmetest.Start(t, acmetest.Options{DNS: h.dns.DNS, HTTPPort: port(h.httpL), TLSPort: port(h.tlsL), Validity: validity})
	router, err := ingress.New(ingress.Config{AppsDomain: "apps.example.test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(router.Close)
	if err := router.Set(slug, "d1", startApp(t, slug).addr); err != nil {
		t.Fatal(err)
	}
	h.router = router
	h.dns.AddA(h.host, "127.0.0.1")
	return h
}

// edge starts the host's first ingress (startEdge), on its listeners.
func (h *hostOnPebble) edge(t *testing.T, tweak ...func(*certs.Config)) *edge {
	return startEdge(t, h.bdb, h.p, h.router, h.httpL, h.tlsL, tweak...)
}

// startEdge serves router on httpL and tlsL with a Manager over bdb and p
// (tweak, when given, adjusts its Config).
func startEdge(t *testing.T, bdb *bun.DB, p *acmetest.Pebble, router *ingress.Router, httpL, tlsL net.Listener, tweak ...func(*certs.Config)) *edge {
	t.Helper()
	cfg := certs.Config{
		DB: bdb, DirectoryURL: p.DirectoryURL, Roots: p.APIRoots, Email: "ops@example.test", HTTPSPort: port(tlsL),
		Allowed: func(_ context.Context, host string) error {
			if _, ok := router.Resolve(host); !ok {
				return errors.New("no app is served at this host")
			}
			return nil
		},
	}
	for _, f := range tweak {
		f(&cfg)
	}
	mgr, err := certs.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	plain := &http.Server{Handler: mgr.Handler(router)}
	secure := &http.Server{Handler: mgr.HTTPSHandler(router), TLSConfig: mgr.TLSConfig()}
	go plain.Serve(httpL)            //nolint:errcheck
	go secure.ServeTLS(tlsL, "", "") //nolint:errcheck
	t.Cleanup(func() {
		plain.Close()
		secure.Close()
		if err := mgr.Close(context.Background()); err != nil {
			t.Errorf("close the manager: %v", err)
		}
	})
	return &edge{router: router, mgr: mgr, httpAddr: httpL.Addr().String(), tlsAddr: tlsL.Addr().String()}
}

// client trusts only roots and sends every connection to addr.
func client(roots *x509.CertPool, addr string) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second}
	return &http.Client{Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{RootCAs: roots},
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return d.DialContext(ctx, network, addr)
			}}}
}

func get(t *testing.T, c *http.Client, url string) (*http.Response, string) {
	t.Helper()
	res, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

// TestOnDemandCertificatesFromPebble: a real ACME CA (Pebble) validating
// challenges against the ingress, DNS from pebble-challtestsrv. A client
// trusting only Pebble's root gets a valid certificate for a custom domain
// of a routed slug and the app's answer; a host the ingress does not serve
// gets no certificate and no ACME order; challenge paths never reach the
// app; plain HTTP redirects once the certificate exists.
func TestOnDemandCertificatesFromPebble(t *testing.T) {
	dns := dnstest.Start(t)
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		httpL, tlsL := listen(t), listen(t)
		p := acmetest.Start(t, acmetest.Options{DNS: dns.DNS, HTTPPort: port(httpL), TLSPort: port(tlsL)})
		router, err := ingress.New(ingress.Config{AppsDomain: "apps.example.test"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(router.Close)
		a := startApp(t, "shop")
		host := "www." + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")) + ".example.org"
		if err := router.Set("shop", "d1", a.addr); err != nil {
			t.Fatal(err)
		}
		router.SetHosts("shop", []string{host})
		dns.AddA(host, "127.0.0.1")
		e := startEdge(t, bdb, p, router, httpL, tlsL)
		roots := p.IssuingRoots(t)

		// A host that is no domain: the handshake fails and no order is placed.
		dns.AddA("stranger.example.org", "127.0.0.1")
		start := time.Now()
		_, err = tls.Dial("tcp", e.tlsAddr, &tls.Config{ServerName: "stranger.example.org", RootCAs: roots})
		if err == nil {
			t.Fatal("a handshake for a host that is not served succeeded")
		}
		t.Logf("refused handshake in %s: %v", time.Since(start), err)
		if n := p.Orders(); n != 0 || e.mgr.Stats().Refused != 1 {
			t.Fatalf("%d ACME orders for a host that is not served (stats %+v)", n, e.mgr.Stats())
		}

		https := client(roots, e.tlsAddr)
		res, body := get(t, https, "https://"+host+"/")
		if res.StatusCode != http.StatusOK || body != "shop proto=https" {
			t.Fatalf("HTTPS: %d %q", res.StatusCode, body)
		}
		leaf := res.TLS.PeerCertificates[0]
		if err := leaf.VerifyHostname(host); err != nil || p.Orders() != 1 || e.mgr.Stats().Obtained != 1 {
			t.Fatalf("certificate for %v (orders %d): %v", leaf.DNSNames, p.Orders(), err)
		}
		if !e.mgr.HasCertificate(host) || !strings.HasPrefix(e.mgr.Status(context.Background(), host), "ready, expires ") {
			t.Fatalf("status: %s", e.mgr.Status(context.Background(), host))
		}
		if n, exp := e.mgr.Held(); n != 1 || !exp.Equal(leaf.NotAfter) {
			t.Fatalf("Held: %d, %s; want 1, %s", n, exp, leaf.NotAfter)
		}

		// Plain HTTP: a challenge path is answered here (404), never proxied;
		// anything else redirects to HTTPS now that the certificate exists.
		plainC := client(nil, e.httpAddr)
		res, body = get(t, plainC, "http://"+host+"/.well-known/acme-challenge/abc")
		if res.StatusCode != http.StatusNotFound || strings.Contains(body, "shop") {
			t.Fatalf("challenge path: %d %q", res.StatusCode, body)
		}
		res, _ = get(t, plainC, "http://"+host+"/x?y=1")
		if want := fmt.Sprintf("https://%s:%d/x?y=1", host, port(tlsL)); res.StatusCode != http.StatusPermanentRedirect || res.Header.Get("Location") != want {
			t.Fatalf("redirect: %d %q, want %q", res.StatusCode, res.Header.Get("Location"), want)
		}
		if n := a.challenges.Load(); n != 0 {
			t.Fatalf("the app got %d challenge requests", n)
		}
		// A second handshake uses the certificate held: no new order.
		if res, _ = get(t, https, "https://"+host+"/"); res.StatusCode != http.StatusOK || p.Orders() != 1 {
			t.Fatalf("again: %d, orders %d", res.StatusCode, p.Orders())
		}
		restartedRedirects(t, bdb, p, a, host)
	})
}

// TestRestartLoadsStoredCertificatesPastTheLimits: certificates one
// ingress obtained are served by a new ingress on the same database (a
// restart) even past its order limits, which loading a stored certificate
// does not count against; a host without one still is limited.
func TestRestartLoadsStoredCertificatesPastTheLimits(t *testing.T) {
	dns := dnstest.Start(t)
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		httpL, tlsL := listen(t), listen(t)
		p := acmetest.Start(t, acmetest.Options{DNS: dns.DNS, HTTPPort: port(httpL), TLSPort: port(tlsL)})
		router, err := ingress.New(ingress.Config{AppsDomain: "apps.example.test"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(router.Close)
		a := startApp(t, "shop")
		if err := router.Set("shop", "d1", a.addr); err != nil {
			t.Fatal(err)
		}
		suffix := strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")) + ".example.org"
		hosts := []string{"a." + suffix, "b." + suffix, "c." + suffix, "d." + suffix}
		router.SetHosts("shop", hosts)
		for _, h := range hosts {
			dns.AddA(h, "127.0.0.1")
		}
		roots := p.IssuingRoots(t)
		first := startEdge(t, bdb, p, router, httpL, tlsL)
		for _, h := range hosts[:2] {
			if res, _ := get(t, client(roots, first.tlsAddr), "https://"+h+"/"); res.StatusCode != http.StatusOK {
				t.Fatalf("%s: %d", h, res.StatusCode)
			}
		}
		tight := func(c *certs.Config) {
			c.Limits = certs.Limits{HostBurst: 1, HostEvery: time.Hour, GlobalBurst: 1, GlobalEvery: time.Hour}
		}
		second := startEdge(t, bdb, p, router, listen(t), listen(t), tight)
		https := client(roots, second.tlsAddr)
		for _, h := range hosts[:3] { // two stored, then one order: the only token
			if res, _ := get(t, https, "https://"+h+"/"); res.StatusCode != http.StatusOK {
				t.Fatalf("%s on the new ingress: %d", h, res.StatusCode)
			}
		}
		if _, err := https.Get("https://" + hosts[3] + "/"); err == nil || p.Orders() != 3 {
			t.Fatalf("a fourth host past the limits: %v (orders %d, want 3)", err, p.Orders())
		}
	})
}

// restartedRedirects: a new ingress on the same database (a restart, or
// another replica) redirects plain HTTP for host before any handshake
// loaded the certificate into it, and serves a routed host without a
// certificate (its apps-domain host) plain.
func restartedRedirects(t *testing.T, bdb *bun.DB, p *acmetest.Pebble, a *app, host string) {
	t.Helper()
	router, err := ingress.New(ingress.Config{AppsDomain: "apps.example.test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(router.Close)
	if err := router.Set("shop", "d1", a.addr); err != nil {
		t.Fatal(err)
	}
	router.SetHosts("shop", []string{host})
	httpL, tlsL := listen(t), listen(t)
	e := startEdge(t, bdb, p, router, httpL, tlsL)
	if e.mgr.HasCertificate(host) {
		t.Fatal("a new ingress holds the certificate in memory before any handshake")
	}
	plainC := client(nil, e.httpAddr)
	for range 2 { // the second from the remembered answer
		res, _ := get(t, plainC, "http://"+host+"/x")
		if want := fmt.Sprintf("https://%s:%d/x", host, port(tlsL)); res.StatusCode != http.StatusPermanentRedirect || res.Header.Get("Location") != want {
			t.Fatalf("a new ingress's redirect: %d %q, want %q", res.StatusCode, res.Header.Get("Location"), want)
		}
	}
	if res, body := get(t, plainC, "http://shop.apps.example.test/"); res.StatusCode != http.StatusOK || body != "shop proto=http" {
		t.Fatalf("a routed host without a certificate: %d %q", res.StatusCode, body)
	}
	if n, _ := e.mgr.Held(); e.mgr.HasCertificate(host) || n != 0 || p.Orders() != 1 {
		t.Fatalf("the redirect loaded the certificate (held %d) or ordered one (orders %d)", n, p.Orders())
	}
}

// TestTwoIngressesOrderOneCertificate: two ingresses in two processes
// sharing Postgres (this test's and a child process running helperIngress)
// get their first handshake for the same host at once: one ACME order is
// placed, and both serve the certificate. Pebble checks challenges on this
// process's ingress only: whichever ingress ordered, this one answers from
// the shared storage.
func TestTwoIngressesOrderOneCertificate(t *testing.T) {
	dns := dnstest.Start(t)
	dbURL := dbtest.PostgresURL(t)
	ctx := context.Background()
	bdb, err := db.Open(ctx, db.Options{URL: dbURL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bdb.Close() })
	if err := db.Migrate(ctx, bdb, sets...); err != nil {
		t.Fatal(err)
	}
	host := "www.shared.example.org"
	dns.AddA(host, "127.0.0.1")
	a := startApp(t, "shared")
	router, err := ingress.New(ingress.Config{AppsDomain: "apps.example.test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(router.Close)
	if err := router.Set("shared", "d1", a.addr); err != nil {
		t.Fatal(err)
	}
	router.SetHosts("shared", []string{host})
	httpL, tlsL := listen(t), listen(t)
	p := acmetest.Start(t, acmetest.Options{DNS: dns.DNS, HTTPPort: port(httpL), TLSPort: port(tlsL)})
	local := startEdge(t, bdb, p, router, httpL, tlsL)
	other := startHelper(t, p, dbURL, host, a.addr)

	roots := p.IssuingRoots(t)
	var wg sync.WaitGroup
	addrs := []string{local.tlsAddr, other}
	errs := make([]error, len(addrs))
	for i, addr := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Minute}, "tcp", addr, &tls.Config{ServerName: host, RootCAs: roots})
			if err == nil {
				conn.Close()
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("handshakes: %v\npebble:\n%s", err, p.Log())
	}
	if n := p.Orders(); n != 1 {
		t.Fatalf("%d ACME orders for one host and two ingresses, want 1", n)
	}
	if !local.mgr.HasCertificate(host) {
		t.Fatal("this ingress does not hold the certificate")
	}
}

// startHelper runs helperIngress in a child process (this test binary) on
// the same database and returns its HTTPS address; the child ends when t does.
func startHelper(t *testing.T, p *acmetest.Pebble, dbURL, host, upstream string) string {
	t.Helper()
	roots := filepath.Join(t.TempDir(), "roots.pem")
	if err := os.WriteFile(roots, p.APIRootsPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), "KEELSON_CERTS_HELPER=1", "HELPER_DB="+dbURL, "HELPER_DIR="+p.DirectoryURL,
		"HELPER_ROOTS="+roots, "HELPER_HOST="+host, "HELPER_UPSTREAM="+upstream)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close() // the child stops when its stdin closes
		if err := cmd.Wait(); err != nil {
			t.Errorf("helper ingress: %v", err)
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "READY ")
	if err != nil || !ok {
		t.Fatalf("helper ingress: %q %v", line, err)
	}
	return addr
}

// helperIngress is the child of startHelper: an ingress with its own
// Manager on the shared database, serving HTTPS until its stdin closes.
func helperIngress() error {
	ctx := context.Background()
	bdb, err := db.Open(ctx, db.Options{URL: os.Getenv("HELPER_DB")})
	if err != nil {
		return err
	}
	defer bdb.Close()
	pemBytes, err := os.ReadFile(os.Getenv("HELPER_ROOTS"))
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pemBytes)
	router, err := ingress.New(ingress.Config{AppsDomain: "apps.example.test"})
	if err != nil {
		return err
	}
	defer router.Close()
	if err := router.Set("shared", "d1", os.Getenv("HELPER_UPSTREAM")); err != nil {
		return err
	}
	router.SetHosts("shared", []string{os.Getenv("HELPER_HOST")})
	mgr, err := certs.New(ctx, certs.Config{DB: bdb, DirectoryURL: os.Getenv("HELPER_DIR"), Roots: roots,
		Allowed: func(_ context.Context, host string) error {
			if _, ok := router.Resolve(host); !ok {
				return errors.New("not served")
			}
			return nil
		}})
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mgr.HTTPSHandler(router), TLSConfig: mgr.TLSConfig()}
	go srv.ServeTLS(l, "", "") //nolint:errcheck
	fmt.Printf("READY %s\n", l.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	srv.Close()
	if !mgr.HasCertificate(os.Getenv("HELPER_HOST")) {
		return errors.New("the helper ingress does not hold the certificate")
	}
	return mgr.Close(ctx)
}

// TestRenewalAheadOfExpiry: certificates that live 30 s (Pebble's profile)
// are renewed by the ingress's maintenance before they expire, with no
// handshake asking, and the renewed one is served; OnCertificate is told
// its expiry.
func TestRenewalAheadOfExpiry(t *testing.T) {
	h := newHostOnPebble(t, "renewed", 30*time.Second)
	p, host := h.p, h.host
	var told atomic.Int64 // the expiry OnCertificate was last told (Unix seconds)
	e := h.edge(t, func(c *certs.Config) {
		c.RenewCheckEvery = time.Second
		c.OnCertificate = func(_ context.Context, _ string, expires time.Time, _ error) { told.Store(expires.Unix()) }
	})
	roots := p.IssuingRoots(t)
	first := handshakeLeaf(t, e.tlsAddr, host, roots)
	platformtest.Eventually(t, time.Minute, "a renewal", func() bool { return e.mgr.Stats().Obtained >= 2 })
	// A renewal is counted once stored (certmagic's cert_obtained), a moment
	// before the maintenance loads it from storage for handshakes.
	var second *x509.Certificate
	platformtest.Eventually(t, 10*time.Second, "the renewed certificate to be served", func() bool {
		second = handshakeLeaf(t, e.tlsAddr, host, roots)
		return second.NotAfter.After(first.NotAfter)
	})
	if time.Now().After(first.NotAfter) && p.Orders() < 2 {
		t.Fatalf("served after renewal: expires %s (the first %s), orders %d", second.NotAfter, first.NotAfter, p.Orders())
	}
	if got := time.Unix(told.Load(), 0); got.Before(second.NotAfter.Truncate(time.Second)) {
		t.Fatalf("OnCertificate was told the certificate expires %s; the one served expires %s", got.UTC(), second.NotAfter)
	}
}

// handshakeLeaf returns the certificate addr serves for host, checked against roots.
func handshakeLeaf(t *testing.T, addr, host string, roots *x509.CertPool) *x509.Certificate {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Minute}, "tcp", addr, &tls.Config{ServerName: host, RootCAs: roots})
	if err != nil {
		t.Fatalf("handshake for %s: %v", host, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0]
}
