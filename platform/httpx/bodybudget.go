package httpx

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"golang.org/x/sync/semaphore"
)

// BodyBudget bounds the memory request bodies hold across the whole server,
// not only per request: 16 clients posting 25 MiB each would otherwise hold
// more than a gigabyte while their bodies are buffered, decoded and judged.
type BodyBudget struct {
	// Bytes is the memory all bodies being handled may hold together.
	// Default 64 MiB.
	Bytes int64
	// Factor is how many times its size a body costs while handled (the
	// buffer read into, its growth, what decoding copies). Default 3.
	Factor int64
	// MaxBytes is the largest body a request may send, by request (e.g. the
	// webhook's 25 MiB, 2 MiB elsewhere); a larger declared Content-Length is
	// answered 413 before anything is read, and a body without one is cut
	// there. Default: 2 MiB for every request.
	MaxBytes func(*http.Request) int64
	// Wait is how long a request waits for its share before it is answered
	// 503 with Retry-After. Default 30s.
	Wait time.Duration
}

// LimitBodies applies b to next: each request with a body first reserves
// Factor times its Content-Length (or times MaxBytes when the length is not
// declared) of the budget, waiting its turn in arrival order, and gives it
// back when the handler returns. Requests without a body pass at once.
func LimitBodies(b BodyBudget, next http.Handler) http.Handler {
	if b.Bytes <= 0 {
		b.Bytes = 64 << 20
	}
	if b.Factor <= 0 {
		b.Factor = 3
	}
	if b.Wait <= 0 {
		b.Wait = 30 * time.Second
	}
	if b.MaxBytes == nil {
		b.MaxBytes = func(*http.Request) int64 { return 2 << 20 }
	}
	sem := semaphore.NewWeighted(b.Bytes)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			next.ServeHTTP(w, r)
			return
		}
		max := b.MaxBytes(r)
		size := r.ContentLength
		if size > max {
			w.Header().Set("Connection", "close")
			writeError(w, http.StatusRequestEntityTooLarge,
				"body: "+strconv.FormatInt(size, 10)+" bytes is more than this route accepts ("+strconv.FormatInt(max, 10)+" bytes)")
			return
		}
		if size < 0 { // not declared (chunked): at most max is read
			size = max
			r.Body = http.MaxBytesReader(w, r.Body, max)
		}
		cost := min(size*b.Factor, b.Bytes)
		ctx, cancel := context.WithTimeout(r.Context(), b.Wait)
		err := sem.Acquire(ctx, cost)
		cancel()
		if err != nil {
			if r.Context().Err() != nil {
				return // the client left
			}
			w.Header().Set("Retry-After", "5")
			w.Header().Set("Connection", "close")
			writeError(w, http.StatusServiceUnavailable, "server busy: too many large request bodies in progress; retry shortly")
			return
		}
		defer sem.Release(cost)
		next.ServeHTTP(w, r)
	})
}
