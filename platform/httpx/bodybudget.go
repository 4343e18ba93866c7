package httpx

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
)

// BodyBudget bounds the memory request bodies hold across the whole server,
// not only per request: 16 clients posting 25 MiB each would otherwise hold
// more than a gigabyte while their bodies are buffered, decoded and judged.
// It also bounds what one client address may hold, and how slowly a body
// may arrive, so nobody holds the budget with bodies that do not come.
type BodyBudget struct {
	// Bytes is the memory all bodies being handled may hold together.
	// Default 64 MiB.
	Bytes int64
	// PerAddr is the most of Bytes the bodies of one client address (Addr,
	// keyed by AddrKey: IPv6 by /64) may hold at once; a body costs at most
	// this much. Default Bytes/4.
	PerAddr int64
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
	// MinRate is the slowest a body may arrive, in bytes per second, counted
	// from the end of the headers after a Grace: by Grace + n/MinRate the
	// first n bytes must be in, else 408 and the connection is closed.
	// Default 16 KiB/s.
	MinRate int64
	// Grace is the time a body's first bytes may take. Default 5s.
	Grace time.Duration
	// MaxTime is the longest a whole body may take, however fast it
	// arrives (the server's ReadTimeout, which the rate's read deadlines
	// replace). 0: no bound but MinRate's.
	MaxTime time.Duration
	// Addr names the client of a request for PerAddr (see RequestClient
	// for one behind trusted proxies). Default: the TCP peer.
	Addr func(*http.Request) string
}

// LimitBodies applies b to next, so the budget is held only by bodies that
// arrive:
//
//   - a body's first bytes are awaited without any reservation (Grace);
//   - then it reserves Factor times its Content-Length (or times MaxBytes
//     when the length is not declared), at most PerAddr, from its address'
//     share and from the budget, waiting its turn in arrival order (at most
//     Wait, then 429 when its address' own bodies hold its share, else 503);
//   - next reads the rest, which must keep arriving at MinRate or better:
//     else next's answer is replaced by 408 and the connection closed.
//     While it arrives, its connection counts as waiting for ConnLimit
//     (BodyArriving), evictable like one still sending headers;
//   - the reservation is given back when next returns.
//
// Requests without a body pass at once.
func LimitBodies(b BodyBudget, next http.Handler) http.Handler {
	if b.Bytes <= 0 {
		b.Bytes = 64 << 20
	}
	if b.PerAddr <= 0 || b.PerAddr > b.Bytes {
		b.PerAddr = max(1, b.Bytes/4)
	}
	if b.Factor <= 0 {
		b.Factor = 3
	}
	if b.Wait <= 0 {
		b.Wait = 30 * time.Second
	}
	if b.MinRate <= 0 {
		b.MinRate = 16 << 10
	}
	if b.Grace <= 0 {
		b.Grace = 5 * time.Second
	}
	if b.MaxBytes == nil {
		b.MaxBytes = func(*http.Request) int64 { return 2 << 20 }
	}
	if b.Addr == nil {
		b.Addr = func(r *http.Request) string { return AddrKey(PeerAddr(r.RemoteAddr)) }
	}
	l := &bodyLimiter{BodyBudget: b, sem: semaphore.NewWeighted(b.Bytes), addrs: map[string]*addrShare{}}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			next.ServeHTTP(w, r)
			return
		}
		l.serve(w, r, next)
	})
}

type bodyLimiter struct {
	BodyBudget
	sem *semaphore.Weighted

	mu    sync.Mutex
	addrs map[string]*addrShare
}

// addrShare is one address' part of the budget; users counts the requests
// holding or awaiting it, so it is dropped when none does.
type addrShare struct {
	sem   *semaphore.Weighted
	users int
}

func (l *bodyLimiter) share(key string) (*addrShare, func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.addrs[key]
	if s == nil {
		s = &addrShare{sem: semaphore.NewWeighted(l.PerAddr)}
		l.addrs[key] = s
	}
	s.users++
	return s, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if s.users--; s.users == 0 {
			delete(l.addrs, key)
		}
	}
}

// errSlow is a body that fell below MinRate.
var errSlow = errors.New("body arrived too slowly")

// serve serves r within the budget (see LimitBodies).
func (l *bodyLimiter) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	maxBytes := l.MaxBytes(r)
	size := r.ContentLength
	if size > maxBytes {
		w.Header().Set("Connection", "close")
		writeError(w, http.StatusRequestEntityTooLarge,
			"body: "+strconv.FormatInt(size, 10)+" bytes is more than this route accepts ("+strconv.FormatInt(maxBytes, 10)+" bytes)")
		return
	}
	reserve := size
	if size < 0 { // not declared (chunked): at most maxBytes is read
		reserve = maxBytes
		r.Body = http.MaxBytesReader(w, r.Body, maxBytes)
	}
	// The connection counts as waiting until the body ended. A body next
	// left unread keeps it so, and keeps the rate's deadline, while the
	// server drains it.
	progress, arrived := BodyArriving(r.Context())
	rd := &rateReader{r: r.Body, rc: http.NewResponseController(w), rate: l.MinRate, grace: l.Grace, progress: progress, end: arrived}
	if l.MaxTime > 0 {
		rd.last = time.Now().Add(l.MaxTime)
	}

	// The first bytes, before any reservation: a body that does not come
	// holds nothing.
	rd.start()
	first := make([]byte, min(4096, max(size, 1)))
	n, err := io.ReadAtLeast(rd, first, 1)
	first = first[:n]
	if err != nil && !(errors.Is(err, io.EOF) && n > 0) {
		l.failed(w, err)
		return
	}

	cost := min(reserve*l.Factor, l.PerAddr)
	share, drop := l.share(l.Addr(r))
	defer drop()
	ctx, cancel := context.WithTimeout(r.Context(), l.Wait)
	ownErr := share.sem.Acquire(ctx, cost)
	err = ownErr
	if err == nil {
		if err = l.sem.Acquire(ctx, cost); err != nil {
			share.sem.Release(cost)
		}
	}
	cancel()
	if err != nil {
		if r.Context().Err() != nil {
			return // the client left
		}
		w.Header().Set("Retry-After", "5")
		w.Header().Set("Connection", "close")
		if ownErr != nil { // the address' own bodies hold its share
			writeError(w, http.StatusTooManyRequests, "too many large request bodies from your address in progress; send fewer at once and retry")
			return
		}
		writeError(w, http.StatusServiceUnavailable, "server busy: too many large request bodies in progress; retry shortly")
		return
	}
	defer func() {
		l.sem.Release(cost)
		share.sem.Release(cost)
	}()

	// The rest, read by next at MinRate at least; its clock starts again
	// now (waiting for the reservation was not the client's doing).
	rd.start()
	body := r.Body
	r.Body = readCloser{io.MultiReader(bytes.NewReader(first), rd), body}
	sw := &slowWriter{ResponseWriter: w, rd: rd}
	next.ServeHTTP(sw, r)
	if rd.slow && !sw.passed {
		l.failed(w, errSlow)
	}
}

// slowWriter drops next's answer once its body fell below the minimum rate
// (next answers a read error its own way; the client is told 408).
type slowWriter struct {
	http.ResponseWriter
	rd     *rateReader
	passed bool // something of next's answer went out
}

func (w *slowWriter) WriteHeader(code int) {
	if w.rd.slow && !w.passed {
		return
	}
	w.passed = true
	w.ResponseWriter.WriteHeader(code)
}

func (w *slowWriter) Write(b []byte) (int, error) {
	if w.rd.slow && !w.passed {
		return len(b), nil
	}
	w.passed = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *slowWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush lets a streaming answer (SSE) flush through the wrapper.
func (w *slowWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok && w.passed {
		f.Flush()
	}
}

// failed answers a body that could not be read: 408 when it fell below the
// minimum rate; nothing when the client left or broke the framing (the
// server closes the connection).
func (l *bodyLimiter) failed(w http.ResponseWriter, err error) {
	var tooBig *http.MaxBytesError
	switch {
	case errors.Is(err, errSlow):
		w.Header().Set("Connection", "close")
		writeError(w, http.StatusRequestTimeout, "body: arrived slower than "+strconv.FormatInt(l.MinRate>>10, 10)+
			" KiB/s (after "+l.Grace.String()+" for the first bytes); send it faster or retry")
	case errors.As(err, &tooBig):
		w.Header().Set("Connection", "close")
		writeError(w, http.StatusRequestEntityTooLarge, "body: more than this route accepts")
	}
}

// rateReader reads a body with a read deadline that keeps it at rate bytes
// per second or better since start, after grace.
type rateReader struct {
	r             io.Reader
	rc            *http.ResponseController
	rate          int64
	grace         time.Duration
	progress, end func() // some bytes arrived; the body ended (or failed)

	last  time.Time // MaxTime's deadline; zero: none
	t0    time.Time
	read  int64 // since t0
	ended bool
	slow  bool // fell below the rate
}

func (rd *rateReader) start() { rd.t0, rd.read = time.Now(), 0 }

func (rd *rateReader) Read(p []byte) (int, error) {
	deadline := rd.t0.Add(rd.grace + time.Duration(float64(rd.read)/float64(rd.rate)*float64(time.Second)))
	if !rd.last.IsZero() && rd.last.Before(deadline) {
		deadline = rd.last
	}
	_ = rd.rc.SetReadDeadline(deadline)
	n, err := rd.r.Read(p)
	rd.read += int64(n)
	if n > 0 {
		rd.progress()
	}
	if err != nil && !rd.ended {
		rd.ended = true
		rd.end()
		if err == io.EOF {
			// Whole: the server sets its own deadlines for the next request.
			_ = rd.rc.SetReadDeadline(time.Time{})
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			rd.slow = true
			err = errSlow
		}
	}
	return n, err
}
