package certs

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// limiter is a token bucket per host and one for all hosts.
type limiter struct {
	l      Limits
	mu     sync.Mutex
	global bucket
	hosts  map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

// maxHosts bounds the per-host buckets kept; full buckets are dropped past it.
const maxHosts = 10000

func newLimiter(l Limits) *limiter {
	return &limiter{l: l, hosts: map[string]*bucket{}, global: bucket{tokens: float64(l.GlobalBurst)}}
}

// take refills b for the time since its last use and takes a token if there is one.
func (b *bucket) take(now time.Time, burst int, every time.Duration) bool {
	if !b.at.IsZero() && every > 0 {
		b.tokens = min(float64(burst), b.tokens+float64(now.Sub(b.at))/float64(every))
	}
	b.at = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// allow reports whether host may seek a certificate now (taking a token of
// host's bucket and of the global one).
func (l *limiter) allow(host string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.hosts[host]
	if b == nil {
		if len(l.hosts) >= maxHosts {
			l.prune(now)
		}
		b = &bucket{tokens: float64(l.l.HostBurst)}
		l.hosts[host] = b
	}
	probe := *b
	if !probe.take(now, l.l.HostBurst, l.l.HostEvery) {
		*b = probe
		return false
	}
	if !l.global.take(now, l.l.GlobalBurst, l.l.GlobalEvery) {
		return false
	}
	*b = probe
	return true
}

// prune drops the buckets that refilled (they are as good as new).
func (l *limiter) prune(now time.Time) {
	for h, b := range l.hosts {
		if float64(now.Sub(b.at))/float64(max(l.l.HostEvery, time.Nanosecond))+b.tokens >= float64(l.l.HostBurst) {
			delete(l.hosts, h)
		}
	}
}

// How long Holds remembers the database's answer for a host: a
// certificate found until it expires or storedHitTTL passes, none found
// for storedMissTTL (another ingress's new certificate then redirects here
// within that; this ingress's own does at once, from memory).
const (
	storedHitTTL  = 10 * time.Minute
	storedMissTTL = 30 * time.Second
	maxStored     = 10000 // entries kept; past it the expired ones go, then all
)

// heldCache remembers, per host, whether the database holds a valid
// certificate, until a time.
type heldCache struct {
	mu sync.Mutex
	m  map[string]heldEntry
}

type heldEntry struct {
	ok    bool
	until time.Time
}

func (c *heldCache) get(host string, now time.Time) (ok, known bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, found := c.m[host]
	if !found || !now.Before(e.until) {
		return false, false
	}
	return e.ok, true
}

func (c *heldCache) put(host string, ok bool, until time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]heldEntry{}
	}
	if len(c.m) >= maxStored {
		now := time.Now()
		for h, e := range c.m {
			if !now.Before(e.until) {
				delete(c.m, h)
			}
		}
		if len(c.m) >= maxStored {
			clear(c.m)
		}
	}
	c.m[host] = heldEntry{ok: ok, until: until}
}

// firstCert parses the first certificate of a PEM bundle.
func firstCert(b []byte) (*x509.Certificate, error) {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return nil, errors.New("certs: no certificate in PEM")
		}
		if blk.Type == "CERTIFICATE" {
			return x509.ParseCertificate(blk.Bytes)
		}
	}
}

// zapLogger turns certmagic's zap logging into records of log (Info and up).
func zapLogger(log *slog.Logger) *zap.Logger {
	return zap.New(slogCore{h: log.Handler()})
}

type slogCore struct {
	h      slog.Handler
	fields []zapcore.Field
}

func (c slogCore) Enabled(l zapcore.Level) bool {
	return l >= zapcore.InfoLevel && c.h.Enabled(context.Background(), slogLevel(l))
}

func (c slogCore) With(f []zapcore.Field) zapcore.Core {
	return slogCore{h: c.h, fields: append(slices.Clip(c.fields), f...)}
}

func (c slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c slogCore) Write(e zapcore.Entry, fs []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range append(slices.Clip(c.fields), fs...) {
		f.AddTo(enc)
	}
	r := slog.NewRecord(e.Time, slogLevel(e.Level), "certmagic: "+e.Message, 0)
	for k, v := range enc.Fields {
		r.AddAttrs(slog.Any(k, v))
	}
	return c.h.Handle(context.Background(), r)
}

func (slogCore) Sync() error { return nil }

func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l >= zapcore.ErrorLevel:
		return slog.LevelError
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	}
	return slog.LevelDebug
}
