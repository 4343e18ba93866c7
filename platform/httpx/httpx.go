// Package httpx is the net/http plumbing around a Keelson API: request ids,
// panic recovery, one structured log line per request and security headers.
// Body limits are per operation in Huma (Operation.MaxBodyBytes, default 1 MiB).
package httpx

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/keelson-dev/keelson/platform"
)

// Middleware wraps h with request ids (X-Request-Id, taken from the client when
// well-formed), panic recovery (a bare 500), security headers and one log line
// per request through log. The request context carries a logger with the
// request id, which platform.Logger returns.
func Middleware(log *slog.Logger, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rid := r.Header.Get("X-Request-Id")
		if !validRID.MatchString(rid) {
			rid = newRID()
		}
		rl := log.With("request_id", rid)
		r = r.WithContext(platform.WithLogger(r.Context(), rl))
		sw := &statusWriter{ResponseWriter: w}
		hdr := w.Header()
		hdr.Set("X-Request-Id", rid)
		hdr.Set("X-Content-Type-Options", "nosniff")
		hdr.Set("X-Frame-Options", "DENY")
		hdr.Set("Referrer-Policy", "no-referrer")
		hdr.Set("Cross-Origin-Opener-Policy", "same-origin")
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				rl.Error("panic", "panic", p, "method", r.Method, "path", LogPath(r.URL.Path))
				if !sw.wrote {
					sw.Header().Set("Content-Type", "application/json")
					sw.WriteHeader(http.StatusInternalServerError)
					_, _ = sw.Write([]byte(`{"statusCode":500,"message":"internal server error","error":"Internal Server Error"}` + "\n"))
				}
			}
			level := slog.LevelInfo
			if sw.status >= 500 {
				level = slog.LevelError
			}
			// Path only: query strings may carry tokens (OAuth callbacks, log streams).
			// LogAttrs: no boxing of every value on the hot path.
			rl.LogAttrs(r.Context(), level, "request", slog.String("method", r.Method), slog.String("path", LogPath(r.URL.Path)),
				slog.Int("status", sw.code()), slog.Int64("bytes", sw.bytes),
				slog.Int64("duration_ms", time.Since(start).Milliseconds()), slog.String("remote", clientIP(r)))
		}()
		h.ServeHTTP(sw, r)
	})
}

// secretSegment is a path segment that is a credential: a short lower-case
// prefix, an underscore and a long random part, as a deploy hook's URL
// token (kdh_...) is.
var secretSegment = regexp.MustCompile(`^[a-z]{2,5}_[A-Za-z0-9_-]{24,}$`)

// LogPath is path as request logs write it: a segment that is a credential
// (secretSegment) keeps its prefix and the 6 characters after it, the part
// listings show (a deploy hook's prefix), and loses the rest.
func LogPath(path string) string {
	if !strings.Contains(path, "_") {
		return path
	}
	segs := strings.Split(path, "/")
	for i, seg := range segs {
		if secretSegment.MatchString(seg) {
			keep := strings.Index(seg, "_") + 1 + 6
			segs[i] = seg[:keep] + "…"
		}
	}
	return strings.Join(segs, "/")
}

var validRID = regexp.MustCompile(`^[A-Za-z0-9._-]{8,64}$`)

func newRID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.status, w.wrote = http.StatusOK, true
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *statusWriter) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// Flush lets SSE handlers flush through the wrapper.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer (deadlines for SSE).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Hijack supports protocol upgrades through the wrapper.
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if h, ok := w.ResponseWriter.(http.Hijacker); ok {
		return h.Hijack()
	}
	return nil, nil, errors.New("hijack not supported")
}
