package httpx

import (
	"container/list"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// ConnLimit caps the connections one http.Server holds open on a listener,
// so a flood of slow clients cannot use up the process's file descriptors.
//
// At the cap, a new connection first evicts the connection that has waited
// longest without a request in progress: one still sending its request
// headers (a slowloris client) or an idle keep-alive. A client that is
// sending a request now (a health check) therefore always gets in, however
// many clients trickle their headers. Only when every held connection is
// serving a request is the new one refused: it is answered 503 with
// Retry-After and closed, without reading its request. A connection a
// handler took over (Hijack: a log stream, a websocket) stays counted, as
// busy, until its new owner closes it.
type ConnLimit struct {
	max int

	mu sync.Mutex
	// conns holds every connection served: its element in waiting, or nil
	// while a request is in progress.
	conns            map[net.Conn]*list.Element
	waiting          *list.List // of net.Conn without a request in progress, oldest first
	refusing         int        // refusals being written now
	evicted, refused int
}

// maxRefusing bounds the goroutines writing 503s at once; past it a refused
// connection is simply closed.
const maxRefusing = 64

// NewConnLimit returns a limit of max connections (at least 1).
func NewConnLimit(n int) *ConnLimit {
	return &ConnLimit{max: max(1, n), conns: map[net.Conn]*list.Element{}, waiting: list.New()}
}

// Apply makes srv hold at most the limit's connections on l and returns the
// listener to serve. srv's ConnState hook is chained, not replaced.
func (c *ConnLimit) Apply(srv *http.Server, l net.Listener) net.Listener {
	prev := srv.ConnState
	srv.ConnState = func(conn net.Conn, st http.ConnState) {
		c.state(conn, st)
		if prev != nil {
			prev(conn, st)
		}
	}
	return &limitListener{Listener: l, c: c}
}

// ConnStats is a snapshot of a ConnLimit.
type ConnStats struct {
	Open    int // connections held now
	Waiting int // of which without a request in progress (evictable)
	Evicted int // since the start: waiting connections closed to make room
	Refused int // since the start: connections answered 503 (every held one busy)
}

// Stats reports the connections held now and what the limit did so far.
func (c *ConnLimit) Stats() ConnStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return ConnStats{Open: len(c.conns), Waiting: c.waiting.Len(), Evicted: c.evicted, Refused: c.refused}
}

func (c *ConnLimit) state(conn net.Conn, st http.ConnState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.conns[conn]
	if !ok {
		return // evicted already, or not ours
	}
	switch st {
	case http.StateActive:
		if e != nil {
			c.waiting.Remove(e)
			c.conns[conn] = nil
		}
	case http.StateIdle:
		if e == nil {
			c.conns[conn] = c.waiting.PushBack(conn)
		} else {
			c.waiting.MoveToBack(e)
		}
	case http.StateHijacked:
		// Still held (a taken-over log stream, a websocket): counted as
		// busy until its new owner closes it (heldConn.Close).
		if e != nil {
			c.waiting.Remove(e)
			c.conns[conn] = nil
		}
	case http.StateClosed:
		c.forgetLocked(conn)
	}
}

func (c *ConnLimit) forgetLocked(conn net.Conn) {
	if e, ok := c.conns[conn]; ok {
		if e != nil {
			c.waiting.Remove(e)
		}
		delete(c.conns, conn)
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

// admit decides for a newly accepted connection: true to serve it (an
// evicted connection, if any, is returned to be closed), false to refuse it.
func (c *ConnLimit) admit(conn net.Conn) (bool, net.Conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var victim net.Conn
	if len(c.conns) >= c.max {
		front := c.waiting.Front()
		if front == nil {
			c.refused++
			return false, nil
		}
		victim = c.waiting.Remove(front).(net.Conn)
		delete(c.conns, victim)
		c.evicted++
	}
	// A new connection waits for its request headers.
	c.conns[conn] = c.waiting.PushBack(conn)
	return true, victim
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
		ok, victim := l.c.admit(held)
		if victim != nil {
			victim.Close()
		}
		if ok {
			return held, nil
		}
		l.c.refuse(conn)
	}
}

// refusal is the whole response to a connection past the limit, in the
// error model of DESIGN.md section 4.
var refusal = func() []byte {
	body := `{"statusCode":503,"message":"server busy: too many open connections; retry shortly","error":"Service Unavailable"}`
	return []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 5\r\n" +
		"Connection: close\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}()

// refuse answers 503 and closes conn. The client's request is drained for a
// moment after the answer, so closing does not reset the connection before
// the client read it.
func (c *ConnLimit) refuse(conn net.Conn) {
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
		if _, err := conn.Write(refusal); err != nil {
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
