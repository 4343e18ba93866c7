package ingress

import (
	"bufio"
	"errors"
	"html"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Meter counts the bytes the Router carries for each slug (request bodies
// in, response bodies out, and both directions of an upgraded connection
// such as a WebSocket), and refuses the slugs it is told to (Block) with a
// 429; their traffic under way (an upgraded connection, a streaming answer,
// an upload) ends at its next bytes. Headers are not counted. It only counts in memory: its owner takes the
// counts (Take) every so often and stores them in a batch, so a request never
// waits on a database. Set Config.Meter to use one; safe for concurrent use.
type Meter struct {
	counts sync.Map                         // slug -> *slugBytes; entries are never removed
	blocks atomic.Pointer[map[string]Block] // slug -> refusal; replaced, never mutated
}

// Bytes is what one slug carried.
type Bytes struct{ In, Out int64 }

// Block is a refused slug's answer: a 429 with a short page saying Message,
// and Retry-After Until (zero: none).
type Block struct {
	Message string
	Until   time.Time
}

// slugBytes is one slug's counts, and how to tell whether it is refused
// now: traffic under way (an upgraded connection, a streaming answer, an
// upload) ends at its next bytes once it is.
type slugBytes struct {
	in, out byteCount
	slug    string
	m       *Meter
}

// errBlocked ends the traffic of a slug refused while it was under way.
var errBlocked = errors.New("ingress: the project is over its bandwidth limit")

// blocked reports whether the slug is refused now.
func (c *slugBytes) blocked() bool {
	_, ok := (*c.m.blocks.Load())[c.slug]
	return ok
}

// byteCount is a count of bytes read or written.
type byteCount struct{ atomic.Int64 }

// count adds the n of a Read or Write to c and passes its results on.
func (c *byteCount) count(n int, err error) (int, error) {
	c.Add(int64(n))
	return n, err
}

// NewMeter returns a meter with nothing counted or blocked.
func NewMeter() *Meter {
	m := &Meter{}
	m.blocks.Store(&map[string]Block{})
	return m
}

// Take returns the bytes counted per slug since the last Take and resets
// them. Slugs that carried nothing are left out.
func (m *Meter) Take() map[string]Bytes {
	out := map[string]Bytes{}
	m.counts.Range(func(k, v any) bool {
		c := v.(*slugBytes)
		b := Bytes{In: c.in.Swap(0), Out: c.out.Swap(0)}
		if b != (Bytes{}) {
			out[k.(string)] = b
		}
		return true
	})
	return out
}

// Add counts b for slug again: what a Take returned that could not be stored.
func (m *Meter) Add(slug string, b Bytes) {
	c := m.counter(slug)
	c.in.Add(b.In)
	c.out.Add(b.Out)
}

// Block replaces the set of refused slugs.
func (m *Meter) Block(blocks map[string]Block) {
	next := make(map[string]Block, len(blocks))
	for slug, b := range blocks {
		next[strings.ToLower(slug)] = b
	}
	m.blocks.Store(&next)
}

// Blocked returns the refusal of slug, if it is refused.
func (m *Meter) Blocked(slug string) (Block, bool) {
	b, ok := (*m.blocks.Load())[slug]
	return b, ok
}

func (m *Meter) counter(slug string) *slugBytes {
	if c, ok := m.counts.Load(slug); ok {
		return c.(*slugBytes)
	}
	c, _ := m.counts.LoadOrStore(slug, &slugBytes{slug: slug, m: m})
	return c.(*slugBytes)
}

// serve answers a refused slug with its page, or passes the request on to
// next counting its bytes.
func (m *Meter) serve(w http.ResponseWriter, req *http.Request, slug string, next http.Handler) {
	if b, ok := m.Blocked(slug); ok {
		refuse(w, b)
		return
	}
	c := m.counter(slug)
	if req.Body != nil && req.Body != http.NoBody {
		req.Body = &countingBody{ReadCloser: req.Body, c: c}
	}
	next.ServeHTTP(&countingWriter{ResponseWriter: w, c: c}, req)
}

// refuse writes a 429 with a short page naming why.
func refuse(w http.ResponseWriter, b Block) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	if !b.Until.IsZero() {
		h.Set("Retry-After", b.Until.UTC().Format(http.TimeFormat))
	}
	w.WriteHeader(http.StatusTooManyRequests)
	msg := html.EscapeString(b.Message)
	_, _ = io.WriteString(w, "<!doctype html>\n<title>Bandwidth limit reached</title>\n<h1>Bandwidth limit reached</h1>\n<p>"+msg+"</p>\n")
}

type countingBody struct {
	io.ReadCloser
	c *slugBytes
}

func (b *countingBody) Read(p []byte) (int, error) {
	if b.c.blocked() {
		return 0, errBlocked
	}
	return b.c.in.count(b.ReadCloser.Read(p))
}

// countingWriter counts the response body. Flush reaches the server's writer
// through Unwrap (http.ResponseController); Hijack is its own so an upgraded
// connection is counted too.
type countingWriter struct {
	http.ResponseWriter
	c *slugBytes
}

func (w *countingWriter) Write(p []byte) (int, error) {
	if w.c.blocked() {
		return 0, errBlocked // ReverseProxy aborts the answer: the client never takes it as whole
	}
	return w.c.out.count(w.ResponseWriter.Write(p))
}

func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *countingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	return &countingConn{Conn: conn, c: w.c}, brw, nil
}

// countingConn counts an upgraded connection: what the client sends is in,
// what it receives is out.
type countingConn struct {
	net.Conn
	c *slugBytes
}

func (c *countingConn) Read(p []byte) (int, error) {
	if c.c.blocked() {
		c.Conn.Close()
		return 0, errBlocked
	}
	return c.c.in.count(c.Conn.Read(p))
}

func (c *countingConn) Write(p []byte) (int, error) {
	if c.c.blocked() {
		c.Conn.Close()
		return 0, errBlocked
	}
	return c.c.out.count(c.Conn.Write(p))
}
