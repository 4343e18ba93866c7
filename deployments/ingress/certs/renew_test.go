package certs_test

import (
	"context"
	"encoding/json"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/mholt/acmez/v3/acme"
	"github.com/uptrace/bun"

	"github.com/keelson-dev/keelson/deployments/ingress/certs"
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
