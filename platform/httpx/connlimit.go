package httpx

import (
	"container/list"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// ConnLimit caps the connections one http.Server holds open on a listener,
// so a flood of slow clients cannot use up the process's file descriptors,
// and caps those of each client address (AddrKey: IPv6 by /64), so one
// client cannot take them all.
//
// At the cap, a new connection first evicts the connection that has waited
// longest without making progress: one still sending its request headers (a
// slowloris client), one whose request body is still arriving (a slow
// upload; see BodyArriving), or an idle keep-alive. A client that sends a
// whole request (a health check) therefore always gets in, however many
// clients trickle their headers or bodies. Only when every held connection
// is serving a request is the new one refused: it is answered 503 with
// Retry-After and closed, without reading its request. An address at its
// own cap evicts its own oldest waiting connection the same way, and is
// answered 429 when all of its connections are busy. A connection a handler
// took over (Hijack: a log stream, a websocket) stays counted, as busy,
// until its new owner closes it.
type ConnLimit struct {
	max, perAddr int
	exempt       []netip.Prefix

	mu sync.Mutex
	// conns holds every connection served.
	conns   map[net.Conn]*connEntry
	waiting *list.List // of *connEntry without a request in progress (or with a body arriving), least recent progress first
	addrs   map[string]*addrConns

	refusing                      int // refusals being written now
	evicted, refused, addrRefused int
}

// connEntry is one held connection.
type connEntry struct {
	conn net.Conn
	key  string        // AddrKey of the peer; "" when not capped per address
	wait *list.Element // in ConnLimit.waiting; nil while busy
	aw   *list.Element // in its addrConns.waiting; nil while busy
}

// addrConns are the connections of one client address.
type addrConns struct {
	n       int
	waiting *list.List // of *connEntry, as ConnLimit.waiting
}

// maxRefusing bounds the goroutines writing refusals at once; past it a
// refused connection is simply closed.
const maxRefusing = 64

// ConnLimitConfig configures NewConnLimitWith.
type ConnLimitConfig struct {
	// Max is the connections held at once (at least 1).
	Max int
	// PerAddr is the connections one client address (AddrKey) may hold;
	// 0 or less: no cap per address.
	PerAddr int
	// Exempt are peers not capped per address: the trusted reverse proxies,
	// whose one address carries every client (they cap their own clients).
	Exempt []netip.Prefix
}

// NewConnLimit returns a limit of max connections (at least 1), with no cap
// per address.
func NewConnLimit(n int) *ConnLimit { return NewConnLimitWith(ConnLimitConfig{Max: n}) }

// NewConnLimitWith returns the limit cfg describes.
func NewConnLimitWith(cfg ConnLimitConfig) *ConnLimit {
	return &ConnLimit{max: max(1, cfg.Max), perAddr: cfg.PerAddr, exempt: cfg.Exempt,
		conns: map[net.Conn]*connEntry{}, waiting: list.New(), addrs: map[string]*addrConns{}}
}

type heldConnKey struct{}

// Apply makes srv hold at most the limit's connections on l and returns the
// listener to serve. srv's ConnState and ConnContext hooks are chained, not
// replaced.
func (c *ConnLimit) Apply(srv *http.Server, l net.Listener) net.Listener {
	prev := srv.ConnState
	srv.ConnState = func(conn net.Conn, st http.ConnState) {
		c.state(conn, st)
		if prev != nil {
			prev(conn, st)
		}
	}
	prevCtx := srv.ConnContext
	srv.ConnContext = func(ctx context.Context, conn net.Conn) context.Context {
		if prevCtx != nil {
			ctx = prevCtx(ctx, conn)
		}
		if h, ok := conn.(*heldConn); ok && h.c == c {
			ctx = context.WithValue(ctx, heldConnKey{}, h)
		}
		return ctx
	}
	return &limitListener{Listener: l, c: c}
}

// ConnStats is a snapshot of a ConnLimit.
type ConnStats struct {
	Open    int // connections held now
	Waiting int // of which without a request in progress, or with a body arriving (evictable)
	Evicted int // since the start: waiting connections closed to make room
	Refused int // since the start: connections answered 503 (every held one busy)
	// AddrRefused counts connections answered 429 since the start: their
	// address was at its cap with every one of its connections busy.
	AddrRefused int
	// Addrs is how many client addresses hold connections now.
	Addrs int
}

// Stats reports the connections held now and what the limit did so far.
func (c *ConnLimit) Stats() ConnStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return ConnStats{Open: len(c.conns), Waiting: c.waiting.Len(), Evicted: c.evicted, Refused: c.refused,
		AddrRefused: c.addrRefused, Addrs: len(c.addrs)}
}

// AddrStats reports how many connections the client address a (by its
// AddrKey) holds now.
func (c *ConnLimit) AddrStats(a netip.Addr) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ac := c.addrs[AddrKey(a)]; ac != nil {
		return ac.n
	}
	return 0
}

func (c *ConnLimit) state(conn net.Conn, st http.ConnState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.conns[conn]
	if !ok {
		return // evicted already, or not ours
	}
	switch st {
	case http.StateActive, http.StateHijacked:
		// Hijacked: still held (a taken-over log stream, a websocket),
		// counted as busy until its new owner closes it (heldConn.Close).
		c.busyLocked(e)
	case http.StateIdle:
		c.waitLocked(e)
	case http.StateClosed:
		c.forgetLocked(conn)
	}
}

// waitLocked puts e last in the waiting lists: evictable, and the last to go.
func (c *ConnLimit) waitLocked(e *connEntry) {
	if e.wait != nil {
		c.waiting.MoveToBack(e.wait)
	} else {
		e.wait = c.waiting.PushBack(e)
	}
	if ac := c.addrs[e.key]; ac != nil {
		if e.aw != nil {
			ac.waiting.MoveToBack(e.aw)
		} else {
			e.aw = ac.waiting.PushBack(e)
		}
	}
}

func (c *ConnLimit) busyLocked(e *connEntry) {
	if e.wait != nil {
		c.waiting.Remove(e.wait)
		e.wait = nil
	}
	if e.aw != nil {
		if ac := c.addrs[e.key]; ac != nil {
			ac.waiting.Remove(e.aw)
		}
		e.aw = nil
	}
}

func (c *ConnLimit) forgetLocked(conn net.Conn) {
	e, ok := c.conns[conn]
	if !ok {
		return
	}
	c.busyLocked(e)
	delete(c.conns, conn)
	if ac := c.addrs[e.key]; ac != nil {
		if ac.n--; ac.n <= 0 {
			delete(c.addrs, e.key)
		}
	}
}

// heldConn is a served connection: closing it, whoever owns it by then (the
// server, or a handler that hijacked it), frees its place.
type heldConn struct {
	net.Conn
	c    *ConnLimit
	once sync.Once
}

// SyscallConn reaches the socket (options such as TCP_USER_TIMEOUT).
func (h *heldConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := h.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}

func (h *heldConn) Close() error {
	h.once.Do(func() {
		h.c.mu.Lock()
		h.c.forgetLocked(h)
		h.c.mu.Unlock()
	})
	return h.Conn.Close()
}

// BodyArriving tells the connection limit of the request whose context is
// ctx that its body is arriving: until done is called the connection counts
// as waiting (evictable at the cap, like one still sending its headers), and
// each progress call (some bytes arrived) makes it the last to be evicted.
// A request not served through a ConnLimit gets functions that do nothing.
func BodyArriving(ctx context.Context) (progress, done func()) {
	h, _ := ctx.Value(heldConnKey{}).(*heldConn)
	if h == nil {
		return func() {}, func() {}
	}
	c := h.c
	mark := func(wait bool) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if e, ok := c.conns[h]; ok {
			if wait {
				c.waitLocked(e)
			} else {
				c.busyLocked(e)
			}
		}
	}
	mark(true)
	return func() { mark(true) }, func() { mark(false) }
}

// TrackBodies marks each request's body as arriving (BodyArriving) until it
// is read to its end, or the handler returns: a proxy streaming bodies
// through (the ingress) gets slow uploads evicted at the cap like slow
// headers.
func TrackBodies(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			next.ServeHTTP(w, r)
			return
		}
		progress, done := BodyArriving(r.Context())
		var once sync.Once
		end := func() { once.Do(done) }
		defer end()
		r.Body = &trackedBody{ReadCloser: r.Body, progress: progress, end: end}
		next.ServeHTTP(w, r)
	})
}

type trackedBody struct {
	io.ReadCloser
	progress, end func()
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.end()
	} else if n > 0 {
		b.progress()
	}
	return n, err
}

// evictLocked forgets the connection that has waited longest in waiting
// and returns it, to be closed; nil when none waits.
func (c *ConnLimit) evictLocked(waiting *list.List) net.Conn {
	front := waiting.Front()
	if front == nil {
		return nil
	}
	victim := front.Value.(*connEntry).conn
	c.forgetLocked(victim)
	c.evicted++
	return victim
}

// admit decides for a newly accepted connection: true to serve it (evicted
// connections, if any, are returned to be closed), false to refuse it (with
// the status to answer).
func (c *ConnLimit) admit(conn net.Conn) (ok bool, status int, victims []net.Conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := ""
	if c.perAddr > 0 {
		if a := PeerAddr(conn.RemoteAddr().String()); a.IsValid() && !Trusted(a, c.exempt) {
			key = AddrKey(a)
		}
	}
	ac := c.addrs[key]
	if key != "" && ac != nil && ac.n >= c.perAddr {
		victim := c.evictLocked(ac.waiting)
		if victim == nil {
			c.addrRefused++
			return false, http.StatusTooManyRequests, nil
		}
		victims = append(victims, victim)
	}
	if len(c.conns) >= c.max {
		victim := c.evictLocked(c.waiting)
		if victim == nil {
			c.refused++
			return false, http.StatusServiceUnavailable, victims
		}
		victims = append(victims, victim)
	}
	if key != "" {
		if ac = c.addrs[key]; ac == nil {
			ac = &addrConns{waiting: list.New()}
			c.addrs[key] = ac
		}
		ac.n++
	}
	// A new connection waits for its request headers.
	e := &connEntry{conn: conn, key: key}
	c.conns[conn] = e
	c.waitLocked(e)
	return true, 0, victims
}

type limitListener struct {
	net.Listener
	c *ConnLimit
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		held := &heldConn{Conn: conn, c: l.c}
		ok, status, victims := l.c.admit(held)
		for _, v := range victims {
			v.Close()
		}
		if ok {
			return held, nil
		}
		l.c.refuse(conn, status)
	}
}

// refusals are the whole responses to a connection past the limit (503) or
// past its address' cap (429), in the error model of DESIGN.md section 4.
var refusals = map[int][]byte{
	http.StatusServiceUnavailable: refusal(503, "Service Unavailable", "server busy: too many open connections; retry shortly"),
	http.StatusTooManyRequests:    refusal(429, "Too Many Requests", "too many open connections from your address; close some and retry"),
}

func refusal(code int, text, msg string) []byte {
	body := `{"statusCode":` + strconv.Itoa(code) + `,"message":"` + msg + `","error":"` + text + `"}`
	return []byte("HTTP/1.1 " + strconv.Itoa(code) + " " + text + "\r\nContent-Type: application/json\r\nRetry-After: 5\r\n" +
		"Connection: close\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}

// refuse answers status (refusals) and closes conn. The client's request is drained for a
// moment after the answer, so closing does not reset the connection before
// the client read it.
func (c *ConnLimit) refuse(conn net.Conn, status int) {
	c.mu.Lock()
	if c.refusing >= maxRefusing {
		c.mu.Unlock()
		conn.Close()
		return
	}
	c.refusing++
	c.mu.Unlock()
	go func() {
		defer func() {
			conn.Close()
			c.mu.Lock()
			c.refusing--
			c.mu.Unlock()
		}()
		_ = conn.SetDeadline(time.Now().Add(time.Second))
		if _, err := conn.Write(refusals[status]); err != nil {
			return
		}
		if cw, ok := conn.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		buf := make([]byte, 4096)
		for n := 0; n < 64<<10; {
			m, err := conn.Read(buf)
			if err != nil {
				return
			}
			n += m
		}
	}()
}
