package certs

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/caddyserver/certmagic"
)

// Renewal. certmagic's maintenance renews no on-demand certificate
// (maintain.go skips a Config with OnDemand set); it renews one at a
// handshake that finds it due, in a goroutine under a context of its own
// (context.Background, 5 minutes: handshake.go renewDynamicCertificate),
// and it refreshes the CA's renewal info (ARI) at a handshake the same way
// (8 minutes). No Close of ours can end those. So the Manager renews
// itself: its loop (renew) renews each certificate it holds for a host it
// still serves under the Manager's lifetime context, which Close cancels,
// and before a handshake would:
//
//   - the loop renews with renewRatio of the lifetime left, or when the
//     CA's renewal info says (the renewer Config, ARI on), which it asks
//     the CA for again as the CA's Retry-After says (ari.go); its order
//     names the certificate it replaces (replacingIssuer);
//   - a handshake (the magic Config) renews only with handshakeRatio left
//     (or in certmagic's emergency windows: a fiftieth of the lifetime, or
//     five RenewCheckEvery), never for ARI (DisableARI), and refreshes no
//     ARI.
//
// So certmagic's own background renewal starts only when the loop has
// failed for (renewRatio - handshakeRatio) of the lifetime, 12 days of a
// 90-day certificate: the fallback that keeps a host served then, and the
// one renewal a Close cannot end. (A certificate whose OCSP staple says
// revoked is renewed at a handshake the same way, at once.)
const (
	renewRatio     = 1.0 / 3 // certmagic's default
	handshakeRatio = 1.0 / 5
	// renewTimeout bounds one renewal, certmagic's retries included (an
	// attempt, then another a minute later): the next pass tries again.
	renewTimeout = 3 * time.Minute
)

// renew is the loop's pass: the certificate of each host this ingress
// sought one for and still serves is renewed when due, one at a time. A
// host no longer served is dropped, and its certificate lapses.
func (m *Manager) renew(ctx context.Context) {
	m.mu.Lock()
	names := make([]string, 0, len(m.names))
	for n := range m.names {
		names = append(names, n)
	}
	m.mu.Unlock()
	for _, n := range names {
		if ctx.Err() != nil {
			return
		}
		if m.cfg.Allowed(ctx, n) != nil {
			m.mu.Lock()
			delete(m.names, n) // no longer served: let its certificate lapse
			m.mu.Unlock()
			delete(m.ariNext, n)
			continue
		}
		c, ok := m.managed(n)
		if !ok {
			continue // none in memory: the next handshake loads or orders one
		}
		if c = m.refreshARI(ctx, n, c); c.NeedsRenewal(m.renewer) {
			m.renewOne(ctx, n, c)
		}
	}
}

// managed returns the certificate ordered for name that this ingress holds
// in memory (the one that expires last, should there be two): not the
// static certificate, nor one for a wildcard.
func (m *Manager) managed(name string) (certmagic.Certificate, bool) {
	var found certmagic.Certificate
	for _, c := range m.cache.AllMatchingCertificates(name) {
		if c.Leaf == nil || c.Hash() == m.staticHash || !slices.Contains(c.Names, name) {
			continue
		}
		if found.Leaf == nil || c.Leaf.NotAfter.After(found.Leaf.NotAfter) {
			found = c
		}
	}
	return found, found.Leaf != nil
}

// renewOne renews name's certificate old under ctx and serves the renewed
// one. The order counts against the rate limits like a handshake's renewal
// (decide); one they refuse waits for the next pass.
func (m *Manager) renewOne(ctx context.Context, name string, old certmagic.Certificate) {
	if !m.limit.allow(name, time.Now()) {
		m.log.Warn("certs: renewal postponed by the rate limits", "host", name)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, renewTimeout)
	defer cancel()
	// RenewCertAsync is certmagic's renewal without prompts (RenewCertSync
	// may ask on stdin for an account email), retrying within ctx; it runs
	// here, not in a goroutine. Under the storage lock it first checks the
	// stored certificate: one another ingress renewed is not renewed again.
	err := m.renewer.RenewCertAsync(ctx, name, false)
	if err == nil {
		err = m.swap(ctx, name, old)
	}
	if err != nil && m.life.Err() == nil {
		m.log.Warn("certs: certificate not renewed; the next check tries again", "host", name, "err", err)
	}
}

// swap serves the certificate now stored for name instead of old: it is
// cached first (a handshake meanwhile gets either), then old is removed, so
// handshakes get the new one and old's renewal window triggers nothing.
// certmagic's own reload (reloadManagedCertificate, replaceCertificate)
// is not exported; CacheManagedCertificate and Remove are.
func (m *Manager) swap(ctx context.Context, name string, old certmagic.Certificate) error {
	cur, err := m.magic.CacheManagedCertificate(ctx, name)
	if err != nil {
		return fmt.Errorf("load the renewed certificate: %w", err)
	}
	if cur.Hash() != old.Hash() {
		m.cache.Remove([]string{old.Hash()})
	}
	return nil
}
