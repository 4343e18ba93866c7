package httpx

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/keelson-dev/keelson/platform"
)

// StreamLimit caps how many long-lived streams (SSE log streams) one key,
// usually a user id, may hold open at once. Its Acquire has the shape of
// deployments.StreamGate. The zero value is not usable; use NewStreamLimit.
type StreamLimit struct {
	max        int
	retryAfter time.Duration
	mu         sync.Mutex
	open       map[string]int
}

// NewStreamLimit allows max concurrent streams per key; a refused stream is
// told to retry after retryAfter (default 5 s).
func NewStreamLimit(max int, retryAfter time.Duration) *StreamLimit {
	if retryAfter <= 0 {
		retryAfter = 5 * time.Second
	}
	return &StreamLimit{max: max, retryAfter: retryAfter, open: map[string]int{}}
}

// Acquire admits one more stream for key, or answers a 429 platform error with
// Retry-After when key already holds the maximum. release must be called
// exactly once when the stream ends; calling it again does nothing.
func (l *StreamLimit) Acquire(_ context.Context, key string) (release func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[key] >= l.max {
		return nil, platform.RateLimited(fmt.Sprintf("too many open log streams: at most %d at a time; close one and retry", l.max), l.retryAfter)
	}
	l.open[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.open[key]--; l.open[key] <= 0 {
				delete(l.open, key)
			}
		})
	}, nil
}

// Open reports how many streams key holds open now.
func (l *StreamLimit) Open(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open[key]
}
