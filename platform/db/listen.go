package db

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/keelson-dev/keelson/platform"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/driver/pgdriver"
)

// Invalidator is a cache kept exact across replicas by Postgres
// LISTEN/NOTIFY (see Listen).
type Invalidator interface {
	// Invalidate drops what a notification's payload names.
	Invalidate(channel, payload string)
	// Reset empties the cache; live says whether it may serve from now on.
	Reset(live bool)
}

// ListenConfig configures Listen.
type ListenConfig struct {
	// Channels to LISTEN on; the first also carries the listener's pings. Required.
	Channels []string
	// PingEvery is how often the connection is proven (default 2 s);
	// PingTimeout ends a session whose pings stop coming back (default 5 s).
	PingEvery, PingTimeout time.Duration
	// Logger defaults to a logger that discards.
	Logger *slog.Logger
}

// Listen keeps c exact until ctx ends: one listening session after another
// on bdb (Postgres), the cache emptied and bypassed (Reset(false)) between
// them. Within a session the cache serves only once one of the session's own
// pings came back (LISTEN is then in force, so nothing committed after it can
// be missed), and every notification other than a ping is passed to
// Invalidate. A session ends, and the cache is bypassed, when the connection
// fails or a ping goes unanswered for PingTimeout. Retries back off from 1 s
// to 10 s while Postgres does not answer. The auth module's bearer cache
// and the projects list cache use it.
func Listen(ctx context.Context, bdb *bun.DB, c Invalidator, cfg ListenConfig) {
	if cfg.PingEvery <= 0 {
		cfg.PingEvery = 2 * time.Second
	}
	if cfg.PingTimeout <= 0 {
		cfg.PingTimeout = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	wait := time.Second
	for {
		wasLive, err := listenSession(ctx, bdb, c, cfg)
		c.Reset(false)
		if ctx.Err() != nil {
			return
		}
		if wasLive {
			wait = time.Second
		} else {
			wait = min(2*wait, 10*time.Second)
		}
		cfg.Logger.Warn("cache listener lost its connection; the cache is bypassed until it is back",
			"channels", cfg.Channels, "err", err, "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// StartListen runs Listen on a goroutine of its own until stop, which returns
// once Listen has.
func StartListen(bdb *bun.DB, c Invalidator, cfg ListenConfig) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Listen(ctx, bdb, c, cfg)
	}()
	return func() {
		cancel()
		<-done
	}
}

var errPingLost = errors.New("db: no ping came back")

type notification struct{ channel, payload string }

// listenSession listens on one connection until it fails or ctx ends. It
// reports whether the cache went live in it.
func listenSession(ctx context.Context, bdb *bun.DB, c Invalidator, cfg ListenConfig) (live bool, _ error) {
	ln := pgdriver.NewListener(bdb)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		_ = ln.Close() // unblocks Receive
		wg.Wait()
	}()
	if err := ln.Listen(ctx, cfg.Channels...); err != nil {
		return false, err
	}
	notes := make(chan notification, 1024)
	recvErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			ch, p, err := ln.Receive(ctx)
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case notes <- notification{ch, p}:
			default:
				recvErr <- errors.New("db: notification buffer overflowed")
				return
			}
		}
	}()
	// LISTEN is only sent, not awaited: a ping may commit before it is in
	// force and never come back. So a ping goes out on every tick, and any of
	// this session's pings coming back proves the LISTEN (and the connection).
	nonce := "ping:" + platform.NewID() + ":"
	seq := 0
	ping := func() error {
		seq++
		_, err := bdb.ExecContext(ctx, "SELECT pg_notify(?, ?)", cfg.Channels[0], fmt.Sprint(nonce, seq))
		return err
	}
	heard := time.Now() // the last pong (the session's start before the first)
	if err := ping(); err != nil {
		return false, err
	}
	tick := time.NewTicker(cfg.PingEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return live, nil
		case err := <-recvErr:
			return live, err
		case <-tick.C:
			if time.Since(heard) > cfg.PingTimeout {
				return live, errPingLost
			}
			if err := ping(); err != nil {
				return live, err
			}
		case n := <-notes:
			if strings.HasPrefix(n.payload, nonce) {
				heard = time.Now()
				if !live {
					c.Reset(true)
					live = true
				}
				continue
			}
			if strings.HasPrefix(n.payload, "ping:") {
				continue // another replica's
			}
			c.Invalidate(n.channel, n.payload)
		}
	}
}
