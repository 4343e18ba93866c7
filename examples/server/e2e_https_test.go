package main

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/deployments/ingress/certs/acmetest"
	"github.com/keelson-dev/keelson/projects/domains"
	"github.com/keelson-dev/keelson/projects/domains/dnstest"
)

// TestCustomDomainHTTPSE2E: the whole server with HTTPS on, a real ACME CA
// (Pebble) and DNS server (pebble-challtestsrv), the app on the process
// runtime. The DNS step's log says the certificate is issued at the first
// HTTPS request; a host that is no domain gets no certificate (firstHTTPS);
// a client trusting only Pebble's root gets a valid certificate for the
// verified custom domain and the app's answer; plain HTTP redirects to
// HTTPS; the domain shows certificateStatus issued with its expiry; the next
// deployment's log says the certificate is ready; the certificate figures
// show on /metrics.
func TestCustomDomainHTTPSE2E(t *testing.T) {
	dns := dnstest.Start(t)
	eachDB(t, func(t *testing.T, dbURL string) {
		httpL, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		tlsL, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tlsL.Close() })
		p := acmetest.Start(t, acmetest.Options{DNS: dns.DNS,
			HTTPPort: httpL.Addr().(*net.TCPAddr).Port, TLSPort: tlsL.Addr().(*net.TCPAddr).Port})
		roots := filepath.Join(t.TempDir(), "acme-roots.pem")
		if err := os.WriteFile(roots, p.APIRootsPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		ts := startServerOn(t, dbURL, httpL, tlsL, func(c *Config) {
			c.DNSResolvers = []string{dns.DNS}
			c.AppsDomain = "apps.example.test"
			c.IngressTLSAddr = tlsL.Addr().String()
			c.ACMEDirectoryURL, c.ACMECARoots, c.ACMEEmail = p.DirectoryURL, roots, "ops@example.test"
			c.MetricsAddr = "127.0.0.1:0"
		})
		host := "www." + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")) + ".example.org"
		admin := ts.signup(t, "admin@example.com")
		alice := ts.signup(t, "alice@example.com")
		starterPlan(t, ts, admin, alice)
		work, bare := newRepo(t, map[string]string{"index.html": "<h1>v1</h1>\n"})
		var proj webhookProject
		ts.doJSON(t, http.StatusCreated, "POST", "/projects", alice, map[string]any{
			"name": "shop", "repoUrl": "file://" + bare, "framework": "static", "port": 8080}, &proj)
		var d domains.Domain
		ts.doJSON(t, http.StatusCreated, "POST", "/projects/"+proj.ID+"/domains", alice, map[string]any{"hostname": host}, &d)
		dns.SetTXT(d.Records[0].Name, d.Records[0].Value)
		dns.SetCNAME(host, d.Records[1].Value)
		dns.AddA(d.Records[1].Value, "127.0.0.1") // the app host: where Pebble checks the challenges
		var v domains.Domain
		ts.doJSON(t, http.StatusOK, "POST", "/projects/"+proj.ID+"/domains/"+d.ID+"/verify", alice, nil, &v)
		if v.Status != "active" {
			t.Fatalf("verify: %+v", v)
		}
		id := deployLive(t, ts, alice, proj.ID)
		if log := logText(t, ts, alice, id); !strings.Contains(log, "serving "+host+" (certificate: issued at the first HTTPS request)") {
			t.Fatalf("the DNS step's log:\n%s", log)
		}

		firstHTTPS(t, ts, p, host)
		var got domains.Domain
		ts.doJSON(t, http.StatusOK, "GET", "/projects/"+proj.ID+"/domains/"+d.ID, alice, nil, &got)
		if got.CertificateStatus != "issued" || got.CertificateExpiresAt == nil || time.Until(*got.CertificateExpiresAt) < 24*time.Hour {
			t.Fatalf("the domain after its certificate was issued: %+v", got)
		}

		commit(t, work, bare, "main", map[string]string{"index.html": "<h1>v2</h1>\n"}, "second")
		id = deployLive(t, ts, alice, proj.ID)
		if log := logText(t, ts, alice, id); !strings.Contains(log, "serving "+host+" (certificate: ready, expires ") {
			t.Fatalf("the second DNS step's log:\n%s", log)
		}
		https := pinnedClient(p, t, ts.IngressTLS)
		if res, err := https.Get("https://" + host + "/"); err != nil || !strings.Contains(readAll(t, res), "<h1>v2</h1>") || p.Orders() != 1 {
			t.Fatalf("HTTPS after the second deployment: %v (orders %d)", err, p.Orders())
		}
		m := scrape(t, ts)
		m.want(t, 1, "keelson_tls_certificates_obtained_total")
		m.want(t, 0, "keelson_tls_certificate_failures_total")
		m.want(t, 1, "keelson_tls_handshakes_refused_total")
		m.want(t, 1, "keelson_tls_certificates_held")
		if exp := m.value("keelson_tls_certificate_earliest_expiry_timestamp_seconds"); exp != float64(got.CertificateExpiresAt.Unix()) {
			t.Fatalf("earliest expiry %v, want the domain's certificate's %v", exp, got.CertificateExpiresAt)
		}
	})
}

// firstHTTPS: a host that is no domain gets no certificate and no order;
// then a client trusting only Pebble's root gets host's certificate and the
// app's answer, and plain HTTP redirects to HTTPS.
func firstHTTPS(t *testing.T, ts *testServer, p *acmetest.Pebble, host string) {
	t.Helper()
	if _, err := tls.Dial("tcp", ts.IngressTLS, &tls.Config{ServerName: "stranger.example.org", RootCAs: p.IssuingRoots(t)}); err == nil {
		t.Fatal("a handshake for a host that is no domain succeeded")
	}
	if n := p.Orders(); n != 0 {
		t.Fatalf("%d orders for a host that is no domain", n)
	}
	res, err := pinnedClient(p, t, ts.IngressTLS).Get("https://" + host + "/")
	if err != nil {
		t.Fatalf("HTTPS: %v\npebble:\n%s", err, p.Log())
	}
	body := readAll(t, res)
	if res.StatusCode != http.StatusOK || !strings.Contains(body, "<h1>v1</h1>") || res.TLS.PeerCertificates[0].VerifyHostname(host) != nil {
		t.Fatalf("HTTPS: %d %q", res.StatusCode, body)
	}
	res, err = pinnedClient(nil, t, ts.Ingress).Get("http://" + host + "/page")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if loc := res.Header.Get("Location"); res.StatusCode != http.StatusPermanentRedirect || !strings.HasPrefix(loc, "https://"+host+":") || !strings.HasSuffix(loc, "/page") {
		t.Fatalf("plain HTTP: %d %q", res.StatusCode, loc)
	}
}

// pinnedClient sends every connection to addr, trusting only Pebble's
// issuing root (p nil: plain HTTP), and does not follow redirects.
func pinnedClient(p *acmetest.Pebble, t *testing.T, addr string) *http.Client {
	cfg := &tls.Config{}
	if p != nil {
		cfg.RootCAs = p.IssuingRoots(t)
	}
	d := &net.Dialer{Timeout: 5 * time.Second}
	return &http.Client{Timeout: time.Minute,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: cfg,
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return d.DialContext(ctx, network, addr)
			}}}
}

func readAll(t *testing.T, res *http.Response) string {
	t.Helper()
	defer res.Body.Close()
	var b strings.Builder
	if _, err := io.Copy(&b, res.Body); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
