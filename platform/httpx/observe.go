package httpx

import (
	"net/http"
	"time"
)

// Observe calls done after h served each request, with the status it answered
// (200 when it wrote none) and how long it took: the hook for request metrics.
// done runs on the request's goroutine and must be cheap. Wrap Middleware
// with it (Observe(Middleware(log, h), done)) so a recovered panic counts as
// the 500 it answered. The writer h gets still flushes, hijacks and unwraps
// (SSE streams keep working through it).
func Observe(h http.Handler, done func(r *http.Request, status int, took time.Duration)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		defer func() { done(r, sw.code(), time.Since(start)) }()
		h.ServeHTTP(sw, r)
	})
}
