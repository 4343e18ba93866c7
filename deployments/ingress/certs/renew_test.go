package certs_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/asn1"
	"encoding/base64"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/mholt/acmez/v3/acme"
	"github.com/uptrace/bun"

	"github.com/keelson-dev/keelson/deployments/ingress/certs"
	"github.com/keelson-dev/keelson/deployments/ingress/certs/acmetest"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

// TestCloseEndsRenewalUnderWay: a Manager closed while its loop renews a
// certificate (waiting here for the lock certmagic takes to renew it,
// which another ingress holds) ends that renewal: Close returns without
// error, and no goroutine of a certmagic renewal or order, nor its TLS-ALPN
// challenge server, is left; the renewal cut short is no failure of the
// certificate's (OnCertificate hears none).
func TestCloseEndsRenewalUnderWay(t *testing.T) {
	h := newHostOnPebble(t, "closing", 30*time.Second)
	bdb, p, host := h.bdb, h.p, h.host
	log, logs := platformtest.CaptureTextLogs()
	var failures atomic.Int64
	e := h.edge(t, func(c *certs.Config) {
		c.RenewCheckEvery, c.Logger = time.Second, log
		c.OnCertificate = func(_ context.Context, _ string, _ time.Time, err error) {
			if err != nil {
				failures.Add(1)
			}
		}
	})
	handshakeLeaf(t, e.tlsAddr, host, p.IssuingRoots(t))

	other := certs.NewStorage(bdb) // another ingress, renewing host
	if err := other.Lock(context.Background(), "issue_cert_"+host); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close(context.Background()) })
	mark := len(logs.String())
	platformtest.Eventually(t, time.Minute, "a renewal waiting for the lock", func() bool {
		return strings.Contains(logs.String()[mark:], `msg="certmagic: acquiring lock" identifier=`+host)
	})

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	if err := e.mgr.Close(ctx); err != nil {
		t.Fatalf("close with a renewal under way: %v", err)
	}
	t.Logf("closed in %s", time.Since(start))
	if left := renewalGoroutines(); len(left) > 0 {
		t.Fatalf("after Close, %d goroutines of certmagic's renewal are left:\n\n%s", len(left), strings.Join(left, "\n\n"))
	}
	if n := failures.Load(); n != 0 {
		t.Fatalf("OnCertificate heard %d failures; the renewal Close ended is none", n)
	}
}

// renewalGoroutines returns the stacks of the goroutines in a certmagic
// renewal or order (whatever started it), or serving its TLS-ALPN challenge.
func renewalGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var found []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, f := range []string{"certmagic.(*Config).renewCert", "certmagic.(*Config).obtainCert",
			"certmagic.(*Config).renewDynamicCertificate", "certmagic.(*tlsALPNSolver).Present"} {
			if strings.Contains(g, f) {
				found = append(found, g)
				break
			}
		}
	}
	return found
}

// TestRenewalFollowsTheCAsRenewalInfo: once the renewal window (ARI) stored
// with a certificate is past its Retry-After, the loop asks the CA again; a
// window the CA moved into the past (as after an incident) has the
// certificate renewed at once, months before it expires, and the renewed
// one served.
func TestRenewalFollowsTheCAsRenewalInfo(t *testing.T) {
	h := newHostOnPebble(t, "incident", 0)
	bdb, p, host := h.bdb, h.p, h.host
	first := h.edge(t) // its loop: every 10 minutes
	roots := p.IssuingRoots(t)
	leaf := handshakeLeaf(t, first.tlsAddr, host, roots)

	p.SetRenewalInfo(t, leaf, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour))
	expireStoredRetryAfter(t, bdb, host)
	// Another ingress on the database, its loop every second, loads the
	// certificate at a handshake, then asks the CA and renews it.
	second := startEdge(t, bdb, p, h.router, listen(t), listen(t), func(c *certs.Config) { c.RenewCheckEvery = time.Second })
	if got := handshakeLeaf(t, second.tlsAddr, host, roots); !got.Equal(leaf) {
		t.Fatalf("the second ingress serves %s, not the stored certificate", got.SerialNumber)
	}
	platformtest.Eventually(t, time.Minute, "the renewed certificate served", func() bool {
		return !handshakeLeaf(t, second.tlsAddr, host, roots).Equal(leaf)
	})
	if n := p.Orders(); n != 2 {
		t.Fatalf("%d orders, want 2 (the certificate and one renewal)", n)
	}
}

// expireStoredRetryAfter makes the renewal info stored with host's
// certificate due for a refresh (its Retry-After, 6 hours with Pebble, past).
func expireStoredRetryAfter(t *testing.T, bdb *bun.DB, host string) {
	t.Helper()
	ctx := context.Background()
	s := certs.NewStorage(bdb)
	keys, err := s.List(ctx, "certificates", true)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(keys, func(k string) bool { return strings.HasSuffix(k, "/"+host+"/"+host+".json") })
	if i < 0 {
		t.Fatalf("no stored metadata for %s in %v", host, keys)
	}
	raw, err := s.Load(ctx, keys[i])
	if err != nil {
		t.Fatal(err)
	}
	var res certmagic.CertificateResource
	var data acme.Certificate
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(res.IssuerData, &data); err != nil || data.RenewalInfo == nil {
		t.Fatalf("no renewal info stored for %s (%v): %s", host, err, raw)
	}
	past := time.Now().Add(-time.Minute)
	data.RenewalInfo.RetryAfter = &past
	if res.IssuerData, err = json.Marshal(data); err != nil {
		t.Fatal(err)
	}
	if raw, err = json.Marshal(res); err != nil {
		t.Fatal(err)
	}
	if err := s.Store(ctx, keys[i], raw); err != nil {
		t.Fatal(err)
	}
}

// TestRenewalOrderNamesTheCertificateItReplaces: the loop's renewal tells
// the CA which certificate it replaces (RFC 9773, ACME Renewal Information:
// the newOrder payload's "replaces" is the old certificate's ARI
// identifier, base64url(Authority Key Identifier) "." base64url(serial)),
// which Let's Encrypt exempts from its rate limits, and the CA takes it so
// (Pebble logs the replacement); the renewed certificate is served and
// OnCertificate told its expiry. A CA that refuses "replaces" because the
// certificate has been replaced already (alreadyReplaced: a renewal was
// ordered but its certificate never stored, here put back by hand) still
// has it renewed, by an order without it.
func TestRenewalOrderNamesTheCertificateItReplaces(t *testing.T) {
	h := newHostOnPebble(t, "replacing", 0)
	bdb, p, host := h.bdb, h.p, h.host
	rec := recordOrders(t, p)
	var told atomic.Int64 // the expiry OnCertificate was last told (Unix seconds)
	proxied := func(c *certs.Config) { c.DirectoryURL, c.Roots = rec.directory, rec.roots }
	looping := func(c *certs.Config) { // the loop every second
		c.RenewCheckEvery = time.Second
		c.OnCertificate = func(_ context.Context, _ string, expires time.Time, _ error) { told.Store(expires.Unix()) }
	}
	first := h.edge(t, proxied) // its loop: every 10 minutes
	roots := p.IssuingRoots(t)
	old := handshakeLeaf(t, first.tlsAddr, host, roots)
	// The CA's renewal window moved into the past: the loop renews now.
	p.SetRenewalInfo(t, old, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour))
	expireStoredRetryAfter(t, bdb, host)
	stored := storedCertificate(t, bdb, host)

	second := startEdge(t, bdb, p, h.router, listen(t), listen(t), proxied, looping)
	renewed := renewedLeaf(t, second.tlsAddr, host, roots, old)
	orders := rec.all()
	if len(orders) != 2 || orders[0].replaces != "" {
		t.Fatalf("orders %+v; want the certificate's (replaces nothing), then the renewal's", orders)
	}
	if got, want := orders[1].replaces, ariID(t, old); got != want || orders[1].status != http.StatusCreated {
		t.Fatalf("the renewal's newOrder: replaces %q (answered %d); want %q, the old certificate's ARI identifier", got, orders[1].status, want)
	}
	if !strings.Contains(p.Log(), "is a replacement of") {
		t.Fatalf("Pebble took no order as a replacement:\n%s", p.Log())
	}
	if got := time.Unix(told.Load(), 0); !got.Equal(renewed.NotAfter.Truncate(time.Second)) {
		t.Fatalf("OnCertificate was told the certificate expires %s; the renewed one expires %s", got.UTC(), renewed.NotAfter)
	}

	// The old certificate back in the database, as if the renewal's had
	// never been stored: a new ingress loads it and renews it again.
	restore(t, bdb, stored)
	third := startEdge(t, bdb, p, h.router, listen(t), listen(t), proxied, looping)
	if got := handshakeLeaf(t, third.tlsAddr, host, roots); !got.Equal(old) {
		t.Fatalf("the third ingress serves %s, not the certificate put back", got.SerialNumber)
	}
	again := renewedLeaf(t, third.tlsAddr, host, roots, old)
	orders = rec.all()
	if len(orders) != 4 || orders[2].replaces != ariID(t, old) || !strings.HasSuffix(orders[2].problem, ":alreadyReplaced") ||
		orders[3].replaces != "" || orders[3].status != http.StatusCreated || again.Equal(renewed) {
		t.Fatalf("renewing a certificate replaced already: orders %+v; want one refused as alreadyReplaced, then one without replaces", orders[2:])
	}
}

// renewedLeaf waits for addr to serve host a certificate other than old,
// and returns it.
func renewedLeaf(t *testing.T, addr, host string, roots *x509.CertPool, old *x509.Certificate) *x509.Certificate {
	t.Helper()
	var leaf *x509.Certificate
	platformtest.Eventually(t, time.Minute, "the renewed certificate served", func() bool {
		leaf = handshakeLeaf(t, addr, host, roots)
		return !leaf.Equal(old)
	})
	return leaf
}

// ariID is cert's ARI certificate identifier (RFC 9773 section 4.1):
// base64url of its Authority Key Identifier, ".", base64url of its serial
// number's DER encoding without tag and length.
func ariID(t *testing.T, cert *x509.Certificate) string {
	t.Helper()
	der, err := asn1.Marshal(cert.SerialNumber)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(cert.AuthorityKeyId) + "." + base64.RawURLEncoding.EncodeToString(der[2:])
}

// storedCertificate returns what the database holds for host's certificate
// (certificate, key, metadata), by key.
func storedCertificate(t *testing.T, bdb *bun.DB, host string) map[string][]byte {
	t.Helper()
	ctx := context.Background()
	s := certs.NewStorage(bdb)
	keys, err := s.List(ctx, "certificates", true)
	if err != nil {
		t.Fatal(err)
	}
	found := map[string][]byte{}
	for _, k := range keys {
		if strings.Contains(k, "/"+host+"/") {
			if found[k], err = s.Load(ctx, k); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(found) != 3 {
		t.Fatalf("stored for %s: %d keys of %v, want 3", host, len(found), keys)
	}
	return found
}

// restore stores what storedCertificate returned again.
func restore(t *testing.T, bdb *bun.DB, stored map[string][]byte) {
	t.Helper()
	s := certs.NewStorage(bdb)
	for k, v := range stored {
		if err := s.Store(context.Background(), k, v); err != nil {
			t.Fatal(err)
		}
	}
}

// orderLog is a reverse proxy in front of Pebble's ACME API that notes
// each newOrder request (its JWS payload's "replaces") and the answer.
type orderLog struct {
	directory string         // the ACME directory, through the proxy
	roots     *x509.CertPool // trusts the proxy and Pebble
	mu        sync.Mutex
	orders    []orderSeen
}

type orderSeen struct {
	replaces string
	status   int
	problem  string // the answer's problem type, if any
}

func (l *orderLog) all() []orderSeen {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.orders)
}

// recordOrders starts an orderLog for p. The proxy passes the Host header
// on, so Pebble names its own URLs (and checks the JWS "url") with the
// proxy's address, and the ACME client never leaves the proxy.
func recordOrders(t *testing.T, p *acmetest.Pebble) *orderLog {
	t.Helper()
	target, err := url.Parse(p.DirectoryURL)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: target.Scheme, Host: target.Host})
	rp.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.APIRoots}}
	newOrder := newOrderPath(t, p)
	l := &orderLog{}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != newOrder {
			rp.ServeHTTP(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var jws struct{ Payload string }
		var o struct{ Replaces string }
		_ = json.Unmarshal(body, &jws)
		payload, _ := base64.RawURLEncoding.DecodeString(jws.Payload)
		_ = json.Unmarshal(payload, &o)
		res := httptest.NewRecorder()
		rp.ServeHTTP(res, r)
		var problem struct{ Type string }
		_ = json.Unmarshal(res.Body.Bytes(), &problem)
		l.mu.Lock()
		l.orders = append(l.orders, orderSeen{replaces: o.Replaces, status: res.Code, problem: problem.Type})
		l.mu.Unlock()
		maps.Copy(w.Header(), res.Header())
		w.WriteHeader(res.Code)
		_, _ = w.Write(res.Body.Bytes())
	}))
	t.Cleanup(srv.Close)
	l.directory = srv.URL + target.Path
	l.roots = p.APIRoots.Clone()
	l.roots.AddCert(srv.Certificate())
	return l
}

// newOrderPath is the path of Pebble's newOrder URL (its directory's).
func newOrderPath(t *testing.T, p *acmetest.Pebble) string {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.APIRoots}}}
	res, err := c.Get(p.DirectoryURL)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var dir struct{ NewOrder string }
	if err := json.NewDecoder(res.Body).Decode(&dir); err != nil || dir.NewOrder == "" {
		t.Fatalf("Pebble's directory: %v", err)
	}
	u, err := url.Parse(dir.NewOrder)
	if err != nil {
		t.Fatal(err)
	}
	return u.Path
}
