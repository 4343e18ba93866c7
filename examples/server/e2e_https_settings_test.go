package main

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/deployments/ingress/certs/acmetest"
	"github.com/keelson-dev/keelson/platform/platformtest"
	"github.com/keelson-dev/keelson/projects/domains"
	"github.com/keelson-dev/keelson/projects/domains/dnstest"
)

// httpsWorld is a server with HTTPS on (Pebble, challtestsrv) and alice's
// projects, each LIVE with one active custom domain.
type httpsWorld struct {
	ts    *testServer
	p     *acmetest.Pebble
	dns   *dnstest.Server
	alice string
	cfg   func(*Config)
}

// httpsSite is one of alice's projects with its active custom domain.
type httpsSite struct {
	project webhookProject
	host    string
	domain  string // the domain's id
	body    string // what its app answers
}

func newHTTPSWorld(t *testing.T, dns *dnstest.Server, dbURL string) *httpsWorld {
	t.Helper()
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
	w := &httpsWorld{p: p, dns: dns, cfg: func(c *Config) {
		c.DNSResolvers = []string{dns.DNS}
		c.AppsDomain = "apps.example.test"
		c.IngressTLSAddr = tlsL.Addr().String()
		c.ACMEDirectoryURL, c.ACMECARoots, c.ACMEEmail = p.DirectoryURL, roots, "ops@example.test"
	}}
	w.ts = startServerOn(t, dbURL, httpL, tlsL, w.cfg)
	admin := w.ts.signup(t, "admin@example.com")
	w.alice = w.ts.signup(t, "alice@example.com")
	starterPlan(t, w.ts, admin, w.alice)
	return w
}

// site creates a project serving body, adds host as its domain, creates
// the records in the test DNS, verifies it and deploys it LIVE.
func (w *httpsWorld) site(t *testing.T, name, host, body string) httpsSite {
	t.Helper()
	ts := w.ts
	_, bare := newRepo(t, map[string]string{"index.html": body})
	s := httpsSite{host: host, body: body}
	ts.doJSON(t, http.StatusCreated, "POST", "/projects", w.alice, map[string]any{
		"name": name, "repoUrl": "file://" + bare, "framework": "static", "port": 8080}, &s.project)
	var d domains.Domain
	ts.doJSON(t, http.StatusCreated, "POST", "/projects/"+s.project.ID+"/domains", w.alice, map[string]any{"hostname": host}, &d)
	s.domain = d.ID
	w.dns.SetTXT(d.Records[0].Name, d.Records[0].Value)
	w.dns.SetCNAME(host, d.Records[1].Value)
	w.dns.AddA(d.Records[1].Value, "127.0.0.1")
	ts.doJSON(t, http.StatusOK, "POST", "/projects/"+s.project.ID+"/domains/"+d.ID+"/verify", w.alice, nil, &d)
	if d.Status != "active" {
		t.Fatalf("verify %s: %+v", host, d)
	}
	deployLive(t, ts, w.alice, s.project.ID)
	return s
}

// setRedirect sends the project's settings back with httpsRedirect set.
func (w *httpsWorld) setRedirect(t *testing.T, s httpsSite, redirect bool) {
	t.Helper()
	var cur struct {
		Region, PlanName string
		HTTPSRedirect    bool
	}
	w.ts.doJSON(t, http.StatusOK, "GET", "/projects/"+s.project.ID, w.alice, nil, &cur)
	w.ts.doJSON(t, http.StatusOK, "PATCH", "/projects/"+s.project.ID+"/settings", w.alice, map[string]any{
		"region": cur.Region, "planName": cur.PlanName, "envVars": []any{}, "httpsRedirect": redirect}, &cur)
	if cur.HTTPSRedirect != redirect {
		t.Fatalf("httpsRedirect after PATCH: %v", cur.HTTPSRedirect)
	}
}

// get sends GET path to host through the ingress at addr (HTTPS when
// tls), without following redirects.
func (w *httpsWorld) get(t *testing.T, tls bool, addr, host, path string) (*http.Response, string) {
	t.Helper()
	p, scheme := w.p, "https"
	if !tls {
		p, scheme = nil, "http"
	}
	res, err := pinnedClient(p, t, addr).Get(scheme + "://" + host + path)
	if err != nil {
		t.Fatalf("%s://%s%s: %v", scheme, host, path, err)
	}
	return res, readAll(t, res)
}

// setHSTS turns the site's domain's hsts on or off.
func (w *httpsWorld) setHSTS(t *testing.T, s httpsSite, on bool) {
	t.Helper()
	var d domains.Domain
	w.ts.doJSON(t, http.StatusOK, "PATCH", "/projects/"+s.project.ID+"/domains/"+s.domain, w.alice, map[string]any{"hsts": on}, &d)
	if d.HSTS != on {
		t.Fatalf("hsts after PATCH: %+v", d)
	}
}

// wantHSTS fails unless res carries Strict-Transport-Security exactly when want.
func wantHSTS(t *testing.T, what string, res *http.Response, want bool) {
	t.Helper()
	got := res.Header.Values("Strict-Transport-Security")
	if (want && (len(got) != 1 || got[0] != "max-age=31536000")) || (!want && len(got) != 0) {
		t.Fatalf("%s: Strict-Transport-Security %q, want it: %v", what, got, want)
	}
}

// wantRedirect fails unless res is a 308 to host's HTTPS URL on port.
func wantRedirect(t *testing.T, what string, res *http.Response, host, port, path string) {
	t.Helper()
	if loc := res.Header.Get("Location"); res.StatusCode != http.StatusPermanentRedirect || loc != "https://"+host+":"+port+path {
		t.Fatalf("%s: %d Location %q, want 308 to https://%s:%s%s", what, res.StatusCode, loc, host, port, path)
	}
}

// wantApp fails unless res is the app's 200 with body.
func wantApp(t *testing.T, what string, res *http.Response, got, body string) {
	t.Helper()
	if res.StatusCode != http.StatusOK || !strings.Contains(got, body) {
		t.Fatalf("%s: %d %q, want the app's %q", what, res.StatusCode, got, body)
	}
}

// restart stops the server and starts it again on the same database with
// new listeners: before any TLS handshake on the new ingress, plain HTTP
// for the hosts whose certificates the database holds redirects as soon as
// the apps are routed again (never the app's answer first); then HTTPS
// serves them from the stored certificates, with HSTS where opted in, and
// no new order.
func (w *httpsWorld) restart(t *testing.T, hsts, other httpsSite) {
	t.Helper()
	cfg := w.ts.App.Cfg
	w.ts.stop()
	httpL, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tlsL, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tlsL.Close() })
	cfg.IngressAddr, cfg.IngressTLSAddr = httpL.Addr().String(), tlsL.Addr().String()
	ts := startServerWith(t, cfg, httpL, tlsL)
	w.ts = ts
	_, tlsPort, _ := net.SplitHostPort(ts.IngressTLS)
	for _, s := range []httpsSite{other, hsts} {
		var res *http.Response
		platformtest.Eventually(t, 2*time.Minute, s.host+" to be routed again", func() bool {
			res, _ = w.get(t, false, ts.Ingress, s.host, "/")
			return res.StatusCode != http.StatusNotFound
		})
		wantRedirect(t, "plain HTTP after the restart, before any handshake", res, s.host, tlsPort, "/")
	}
	for _, s := range []httpsSite{other, hsts} {
		res, got := w.get(t, true, ts.IngressTLS, s.host, "/")
		wantApp(t, "HTTPS after the restart", res, got, s.body)
		wantHSTS(t, "HTTPS after the restart", res, s == hsts)
	}
	if n := w.p.Orders(); n != 2 {
		t.Fatalf("%d orders after the restart, want still 2", n)
	}
}

// TestHTTPSSettingsE2E: against a real ACME CA (Pebble) and DNS server,
// two projects with a custom domain each and a certificate each. The one
// whose httpsRedirect is false answers plain HTTP with the app (its
// apps-domain host too), the other redirects; turning it back on
// redirects at once. The domain that opted in to HSTS carries
// Strict-Transport-Security on its HTTPS answers, never on plain HTTP; the
// other domain never. After a restart, plain HTTP redirects before any
// handshake loaded a certificate.
func TestHTTPSSettingsE2E(t *testing.T) {
	dns := dnstest.Start(t)
	eachDB(t, func(t *testing.T, dbURL string) {
		w := newHTTPSWorld(t, dns, dbURL)
		ts := w.ts
		suffix := strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")) + ".example.org"
		keep := w.site(t, "keep", "keep."+suffix, "<h1>keep</h1>\n")
		shop := w.site(t, "shop", "shop."+suffix, "<h1>shop</h1>\n")
		w.setRedirect(t, keep, false)
		w.setHSTS(t, keep, true)
		_, tlsPort, _ := net.SplitHostPort(ts.IngressTLS)

		for _, s := range []httpsSite{keep, shop} { // the first HTTPS request of each obtains its certificate
			res, got := w.get(t, true, ts.IngressTLS, s.host, "/")
			wantApp(t, "HTTPS "+s.host, res, got, s.body)
			wantHSTS(t, "HTTPS "+s.host, res, s == keep)
		}
		if n := w.p.Orders(); n != 2 {
			t.Fatalf("%d orders, want 2", n)
		}
		res, got := w.get(t, false, ts.Ingress, keep.host, "/")
		wantApp(t, "plain HTTP to the project that keeps HTTP", res, got, "<h1>keep</h1>")
		wantHSTS(t, "plain HTTP to the HSTS domain", res, false)
		res, got = w.get(t, false, ts.Ingress, keep.project.Slug+".apps.example.test", "/")
		wantApp(t, "plain HTTP to its apps-domain host", res, got, "<h1>keep</h1>")
		res, _ = w.get(t, false, ts.Ingress, shop.host, "/x?y=1")
		wantRedirect(t, "plain HTTP to the other project", res, shop.host, tlsPort, "/x?y=1")
		wantHSTS(t, "the redirect", res, false)

		w.setHSTS(t, shop, true) // on and off again: at once each time
		res, _ = w.get(t, true, ts.IngressTLS, shop.host, "/")
		wantHSTS(t, "HTTPS once shop's domain opted in", res, true)
		w.setHSTS(t, shop, false)
		res, _ = w.get(t, true, ts.IngressTLS, shop.host, "/")
		wantHSTS(t, "HTTPS once shop's domain opted out", res, false)

		w.setRedirect(t, keep, true)
		res, _ = w.get(t, false, ts.Ingress, keep.host, "/")
		wantRedirect(t, "plain HTTP once httpsRedirect is true again", res, keep.host, tlsPort, "/")
		w.restart(t, keep, shop)
	})
}
