package certs

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/mholt/acmez/v3/acme"
)

// How long the loop trusts a renewal window (ARI) before asking the CA
// again when the CA named no Retry-After, and after asking failed.
const (
	ariDefaultRetry = 6 * time.Hour
	ariErrorRetry   = time.Hour
)

// ariCheck is when the loop next looks at the renewal window of the
// certificate (by hash) it holds for a host.
type ariCheck struct {
	hash string
	at   time.Time
}

// refreshARI keeps the CA's renewal window (ARI) of name's certificate c
// current, and returns the certificate to check for renewal. certmagic
// asks the CA again only at a handshake, in a goroutine of its own; with
// that off (renew.go) the loop does it, once the window stored with the
// certificate is past its Retry-After, and reloads the certificate so that
// NeedsRenewal follows the new window (a CA moves it to have certificates
// renewed early, after an incident).
func (m *Manager) refreshARI(ctx context.Context, name string, c certmagic.Certificate) certmagic.Certificate {
	if ck, ok := m.ariNext[name]; ok && ck.hash == c.Hash() && time.Now().Before(ck.at) {
		return c
	}
	next, stored, err := m.refreshStoredARI(ctx, name, c)
	if err != nil && m.life.Err() == nil {
		m.log.Warn("certs: renewal info not refreshed", "host", name, "err", err)
	}
	m.ariNext[name] = ariCheck{hash: c.Hash(), at: next}
	if !stored {
		return c
	}
	// The cached certificate keeps the window it was loaded with (and
	// caching the same certificate again is a no-op): replace it.
	m.cache.Remove([]string{c.Hash()})
	fresh, err := m.magic.CacheManagedCertificate(ctx, name)
	if err != nil {
		// The next handshake loads it from storage.
		m.log.Warn("certs: reload a certificate with its new renewal info", "host", name, "err", err)
		return c
	}
	return fresh
}

// refreshStoredARI asks the CA for c's renewal window if the one stored
// with it (certmagic's metadata of name's certificate) is due, and stores
// the answer there, keeping the time chosen in the window if the window
// did not move, as certmagic's updateARI does. It returns when to look
// again and whether it stored a new window.
func (m *Manager) refreshStoredARI(ctx context.Context, name string, c certmagic.Certificate) (time.Time, bool, error) {
	now := time.Now()
	key, res, data, err := m.storedMeta(ctx, name, c)
	if err != nil {
		return now.Add(ariErrorRetry), false, err
	}
	old := data.RenewalInfo
	switch {
	case key == "" || old == nil || !old.HasWindow():
		// The stored certificate is another (renewed by another ingress:
		// loaded here when c is due), or the CA gave no window.
		return now.Add(ariDefaultRetry), false, nil
	case !old.NeedsRefresh():
		return *old.RetryAfter, false, nil
	}
	ari, err := m.issuer.GetRenewalInfo(ctx, c)
	if err != nil {
		return now.Add(ariErrorRetry), false, err
	}
	if ari.SameWindow(*old) && !old.SelectedTime.IsZero() {
		ari.SelectedTime = old.SelectedTime
	}
	data.RenewalInfo = &ari
	// A renewal elsewhere storing its certificate meanwhile would get c's
	// window (so does certmagic's updateARI): renewed early at worst.
	raw, err := json.Marshal(data)
	if err == nil {
		res.IssuerData = raw
		raw, err = json.MarshalIndent(res, "", "\t")
	}
	if err == nil {
		err = m.storage.Store(ctx, key, raw)
	}
	if err != nil {
		return now.Add(ariErrorRetry), false, err
	}
	if ari.RetryAfter != nil {
		return *ari.RetryAfter, true, nil
	}
	return now.Add(ariDefaultRetry), true, nil
}

// storedMeta loads certmagic's metadata of the certificate stored for
// name, and its key; the key is empty when the certificate stored is not
// c.
func (m *Manager) storedMeta(ctx context.Context, name string, c certmagic.Certificate) (string, certmagic.CertificateResource, acme.Certificate, error) {
	var res certmagic.CertificateResource
	var data acme.Certificate
	pemBytes, err := m.storage.Load(ctx, certmagic.StorageKeys.SiteCert(m.issuer.IssuerKey(), name))
	if err != nil {
		return "", res, data, err
	}
	if leaf, err := firstCert(pemBytes); err != nil || !leaf.Equal(c.Leaf) {
		return "", res, data, nil
	}
	key := certmagic.StorageKeys.SiteMeta(m.issuer.IssuerKey(), name)
	raw, err := m.storage.Load(ctx, key)
	if err != nil {
		return "", res, data, err
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return "", res, data, fmt.Errorf("%s: %w", key, err)
	}
	if err := json.Unmarshal(res.IssuerData, &data); err != nil {
		return "", res, data, fmt.Errorf("%s: issuer data: %w", key, err)
	}
	return key, res, data, nil
}
