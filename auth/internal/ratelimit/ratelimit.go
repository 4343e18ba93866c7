// Package ratelimit keeps the account module's token buckets in the
// auth_rate_limits table, so every replica on one database shares them: one
// atomic upsert per attempt; buckets idle longer than the longest period are
// purged (at most once a minute, no goroutine).
package ratelimit

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"sync/atomic"
	"time"

	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// Limit is a token bucket: Max attempts at once, refilled evenly over Per
// (so Max attempts per Per on average). The zero Limit means "use the
// default"; a negative Max means unlimited.
type Limit struct {
	Max int
	Per time.Duration
}

// Or is l, or def where l leaves a field to the default.
func (l Limit) Or(def Limit) Limit {
	if l.Max == 0 {
		return def
	}
	if l.Per <= 0 {
		l.Per = def.Per
	}
	return l
}

// Unlimited reports a negative Max.
func (l Limit) Unlimited() bool { return l.Max < 0 }

// Limiter keeps the token buckets in the auth_rate_limits table, so every
// replica on one database shares them (on Postgres: every API replica). One
// attempt is one atomic upsert: take a token if the refilled bucket has one.
// Buckets idle for longer than the longest Per are full, the same as absent,
// and are deleted at most once a minute. It starts no goroutine.
type Limiter struct {
	db        bun.IDB
	now       func() time.Time
	pg        bool
	maxPer    time.Duration
	lastPurge atomic.Int64
}

// New keeps the buckets in idb; now is the clock and maxPer the longest
// Limit.Per (idle buckets older than it are purged).
func New(idb bun.IDB, now func() time.Time, maxPer time.Duration) *Limiter {
	return &Limiter{db: idb, now: now, pg: db.IsPostgres(idb), maxPer: maxPer}
}

func (l *Limiter) fn(name string) string {
	if l.pg {
		return map[string]string{"min": "LEAST", "max": "GREATEST"}[name]
	}
	return map[string]string{"min": "MIN", "max": "MAX"}[name]
}

// Allow takes one token from key's bucket. When none is left it answers false
// and how long until one is.
func (l *Limiter) Allow(ctx context.Context, key string, lim Limit) (bool, time.Duration, error) {
	if lim.Unlimited() {
		return true, 0, nil
	}
	now := l.now().UnixNano()
	l.purge(ctx, now)
	rate := float64(lim.Max) / float64(lim.Per) // tokens per nanosecond
	// The bucket's tokens now: what was left, refilled since, at most Max
	// (compared with a hair under 1 for floating-point error).
	// A replica whose clock is behind the bucket's refills nothing (never
	// takes tokens away).
	avail := l.fn("min") + `(?, auth_rate_limits.tokens + CAST(` + l.fn("max") + `(0, ? - auth_rate_limits.last_ns) AS DOUBLE PRECISION) * ?)`
	var left []float64
	err := l.db.NewRaw(`INSERT INTO auth_rate_limits ("key", tokens, last_ns) VALUES (?, ?, ?) `+
		`ON CONFLICT ("key") DO UPDATE SET tokens = `+avail+` - 1, last_ns = `+l.fn("max")+`(auth_rate_limits.last_ns, ?) `+
		`WHERE `+avail+` >= 0.999999 RETURNING tokens`,
		key, float64(lim.Max)-1, now,
		float64(lim.Max), now, rate, now,
		float64(lim.Max), now, rate,
	).Scan(ctx, &left)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return false, 0, db.Translate(err)
	}
	if len(left) == 1 {
		return true, 0, nil
	}
	// Refused: how long until the bucket holds one token.
	var row Row
	if err := l.db.NewSelect().Model(&row).Where(`"key" = ?`, key).Scan(ctx); err != nil {
		return false, time.Second, nil
	}
	have := min(float64(lim.Max), row.Tokens+float64(max(0, now-row.LastNS))*rate+0.000001)
	wait := time.Duration((1 - have) / rate)
	return false, max(wait, time.Second), nil
}

// Refund gives back the token an attempt took (used when it succeeded).
func (l *Limiter) Refund(ctx context.Context, key string, lim Limit) error {
	if lim.Unlimited() {
		return nil
	}
	_, err := l.db.NewRaw(`UPDATE auth_rate_limits SET tokens = `+l.fn("min")+`(?, tokens + 1) WHERE "key" = ?`,
		float64(lim.Max), key).Exec(ctx)
	return db.Translate(err)
}

// purge deletes buckets idle for longer than the longest Per (they refilled
// completely), at most once a minute.
func (l *Limiter) purge(ctx context.Context, now int64) {
	last := l.lastPurge.Load()
	if now-last < int64(time.Minute) || !l.lastPurge.CompareAndSwap(last, now) {
		return
	}
	_, _ = l.db.NewDelete().Model((*Row)(nil)).Where("last_ns < ?", now-int64(l.maxPer)).Exec(ctx)
}

// Row is one token bucket, shared by every replica on the database. Tokens
// is what is left at LastNS (unix nanoseconds).
type Row struct {
	bun.BaseModel `bun:"table:auth_rate_limits,alias:rate_row"`

	Key    string  `bun:"key,pk,type:varchar(300)"`
	Tokens float64 `bun:"tokens,notnull"`
	LastNS int64   `bun:"last_ns,notnull"`
}

// PairKey names the bucket of a pair (an account and a client address or
// device) without storing either in clear.
func PairKey(a, b string) string {
	sum := sha256.Sum256([]byte(a + "|" + b))
	return hex.EncodeToString(sum[:])
}
