package ingress

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The direct path: most requests (no upgrade, no Expect, no trailers, a
// body of at most directBodyMax bytes) are written to a pooled upstream
// connection and answered from it on the handler's own goroutine, instead
// of going through httputil.ReverseProxy and http.Transport, whose request
// clone, header copies, per-request 32 KiB buffer and three goroutines per
// round trip cost more than the rest of the proxy together. The others keep
// the ReverseProxy (Router.proxy). Both send the same request: the public
// Host, the client's headers minus the hop-by-hop ones, X-Forwarded-*
// rebuilt (remote.go), and relay the same answer.

// directBodyMax is the largest request body sent on the direct path. The
// body is written before the answer is read, so a larger one could stall
// against an app that answers before reading it; those go through the
// Transport, which writes and reads at once.
const directBodyMax = 64 << 10

// idleTimeout closes upstream connections idle this long.
const idleTimeout = 60 * time.Second

// probeAfter is how long a connection may sit idle before it is checked
// for a close by the app (Node closes idle ones after 5 s) before reuse.
const probeAfter = time.Second

// upConn is one connection to an app.
type upConn struct {
	conn      net.Conn
	br        *bufio.Reader
	bw        *bufio.Writer
	idleSince time.Time
	// probe: the last answer had no body (HEAD, 204, 304, length 0), after
	// which an app that wrongly wrote one anyway may still send it; the
	// next reuse checks for stray bytes however briefly it was idle.
	probe bool
}

// pool keeps the idle connections to one upstream, most recently used on
// top; at most idlePerApp, each for at most idleTimeout.
type pool struct {
	addr   string
	dialer *net.Dialer

	mu     sync.Mutex
	idle   []*upConn // oldest first
	closed bool
	reaper *time.Timer // armed while idle is not empty
}

func newPool(addr string, d *net.Dialer) *pool { return &pool{addr: addr, dialer: d} }

// get answers an idle connection (reused true) or a new one.
func (p *pool) get(ctx context.Context) (*upConn, bool, error) {
	for {
		p.mu.Lock()
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			break
		}
		uc := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		if (!uc.probe && time.Since(uc.idleSince) < probeAfter) || alive(uc) {
			return uc, true, nil
		}
		uc.conn.Close()
	}
	uc, err := p.dial(ctx)
	return uc, false, err
}

func (p *pool) dial(ctx context.Context) (*upConn, error) {
	c, err := p.dialer.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, err
	}
	return &upConn{conn: c, br: bufio.NewReaderSize(c, 4096), bw: bufio.NewWriterSize(c, 4096)}, nil
}

// alive reports whether an idle connection is still open: nothing to read
// yet, not an end of stream (the app closed it) or stray bytes. It peeks at
// the socket without blocking (a read deadline in the past would answer
// before asking the socket).
func alive(uc *upConn) bool {
	if uc.br.Buffered() > 0 {
		return false
	}
	sc, ok := uc.conn.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var b [1]byte
	var n int
	var perr error
	if err := raw.Read(func(fd uintptr) bool {
		n, _, perr = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true // never wait: an answer either way
	}); err != nil {
		return false
	}
	return errors.Is(perr, syscall.EAGAIN) || (perr == nil && n < 0)
}

// put keeps uc for reuse, or closes it when the pool is full or closed.
func (p *pool) put(uc *upConn) {
	uc.idleSince = time.Now()
	p.mu.Lock()
	if p.closed || len(p.idle) >= idlePerApp {
		p.mu.Unlock()
		uc.conn.Close()
		return
	}
	p.idle = append(p.idle, uc)
	if p.reaper == nil {
		p.reaper = time.AfterFunc(idleTimeout, p.reap)
	}
	p.mu.Unlock()
}

// reap closes the connections idle for idleTimeout and arms itself for the
// next oldest.
func (p *pool) reap() {
	p.mu.Lock()
	now := time.Now()
	n := 0
	for n < len(p.idle) && now.Sub(p.idle[n].idleSince) >= idleTimeout {
		p.idle[n].conn.Close()
		n++
	}
	p.idle = append(p.idle[:0], p.idle[n:]...)
	if len(p.idle) > 0 && !p.closed {
		p.reaper.Reset(idleTimeout - now.Sub(p.idle[0].idleSince))
	} else {
		p.reaper = nil
	}
	p.mu.Unlock()
}

// close closes the idle connections; those in use are closed when put back.
func (p *pool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, uc := range p.idle {
		uc.conn.Close()
	}
	p.idle = nil
	if p.reaper != nil {
		p.reaper.Stop()
		p.reaper = nil
	}
}

// direct reports whether req can take the direct path.
func direct(req *http.Request) bool {
	return req.ContentLength >= 0 && req.ContentLength <= directBodyMax && len(req.TransferEncoding) == 0 &&
		req.Trailer == nil && req.Method != http.MethodConnect && req.Header["Upgrade"] == nil &&
		req.Header["Expect"] == nil && len(req.RequestURI) > 0 && req.RequestURI[0] == '/'
}

// hopHeaders are dropped between client and app in both directions (RFC
// 9110 7.6.1), as httputil.ReverseProxy drops them.
var hopHeaders = map[string]bool{
	"Connection": true, "Proxy-Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

// dropped reports whether header k is not passed on: a hop-by-hop header
// or one the Connection header names (named, from connNamed).
func dropped(k string, named []string) bool {
	if hopHeaders[k] {
		return true
	}
	for _, n := range named {
		if n == k {
			return true
		}
	}
	return false
}

// connNamed answers the headers a Connection header's values name.
func connNamed(conn []string) []string {
	var named []string
	for _, v := range conn {
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				named = append(named, http.CanonicalHeaderKey(f))
			}
		}
	}
	return named
}

// forwardedHeaders are the request headers the ingress sets itself.
var forwardedHeaders = map[string]bool{
	"Forwarded": true, "X-Forwarded-For": true, "X-Forwarded-Host": true, "X-Forwarded-Proto": true,
	http.CanonicalHeaderKey(forwardHeader): true, "Content-Length": true,
}

// underscored reports whether header k is one the ingress sets itself
// spelt with '_' for '-' (X_Forwarded_For), which servers that name headers
// CGI-style (HTTP_X_FORWARDED_FOR) read as the real one: never passed on.
func underscored(k string) bool {
	return strings.IndexByte(k, '_') >= 0 && forwardedHeaders[http.CanonicalHeaderKey(strings.ReplaceAll(k, "_", "-"))]
}

// writeHead writes req's request line and headers to bw as the app gets
// them (see the direct path's comment).
func (r *Router) writeHead(bw *bufio.Writer, req *http.Request) {
	bw.WriteString(req.Method)
	bw.WriteByte(' ')
	bw.WriteString(req.RequestURI)
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(req.Host)
	bw.WriteString("\r\n")
	conn := connNamed(req.Header["Connection"])
	for k, vv := range req.Header {
		if forwardedHeaders[k] || dropped(k, conn) || underscored(k) {
			if k == "Te" && slicesContain(vv, "trailers") {
				bw.WriteString("Te: trailers\r\n")
			}
			continue
		}
		for _, v := range vv {
			bw.WriteString(k)
			bw.WriteString(": ")
			bw.WriteString(v)
			bw.WriteString("\r\n")
		}
	}
	if r.forwarded(req) {
		for _, k := range []string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
			for _, v := range req.Header[k] {
				bw.WriteString(k + ": " + v + "\r\n")
			}
		}
	} else {
		if ip, _, err := net.SplitHostPort(req.RemoteAddr); err == nil {
			bw.WriteString("X-Forwarded-For: ")
			bw.WriteString(ip)
			bw.WriteString("\r\n")
		}
		bw.WriteString("X-Forwarded-Host: ")
		bw.WriteString(req.Host)
		if req.TLS != nil {
			bw.WriteString("\r\nX-Forwarded-Proto: https\r\n")
		} else {
			bw.WriteString("\r\nX-Forwarded-Proto: http\r\n")
		}
	}
	if req.ContentLength > 0 || req.Header["Content-Length"] != nil {
		bw.WriteString("Content-Length: ")
		bw.WriteString(strconv.FormatInt(req.ContentLength, 10))
		bw.WriteString("\r\n")
	}
	bw.WriteString("\r\n")
}

func slicesContain(vv []string, s string) bool {
	for _, v := range vv {
		if strings.EqualFold(strings.TrimSpace(v), s) {
			return true
		}
	}
	return false
}

// replayable reports whether req may be sent again after its connection
// failed before any answer: no body and a method without side effects.
func replayable(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return req.ContentLength == 0
	}
	return false
}

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// serveDirect proxies req to rt's app on a pooled connection, counting the
// bodies in c (nil: not counted). A reused connection found closed before
// any answer is replaced once when req can be sent again.
func (r *Router) serveDirect(w http.ResponseWriter, req *http.Request, rt *route, c *slugBytes) {
	ctx := req.Context()
	for attempt := 0; ; attempt++ {
		var uc *upConn
		var reused bool
		var err error
		if attempt == 0 {
			uc, reused, err = rt.pool.get(ctx)
		} else {
			uc, err = rt.pool.dial(ctx)
		}
		if err != nil {
			r.upstreamFailed(w, req, rt, err)
			return
		}
		// The connection is the request's until the answer is read: a
		// client that goes away unblocks it.
		stop := context.AfterFunc(ctx, func() { _ = uc.conn.SetDeadline(time.Unix(1, 0)) })
		res, sent, err := r.send(uc, req, c)
		if err != nil {
			stop()
			uc.conn.Close()
			if reused && !sent && replayable(req) && ctx.Err() == nil {
				continue
			}
			r.upstreamFailed(w, req, rt, err)
			return
		}
		uc.probe = res.Body == http.NoBody
		done, err := r.relay(w, res, uc.br, c)
		// Bytes buffered past the answer are no answer to anything: an
		// app that wrote a body to a HEAD or a 204. Reused, they would be
		// read as the next request's answer, another client's.
		if stop() && done && err == nil && !res.Close && uc.br.Buffered() == 0 {
			rt.pool.put(uc)
		} else {
			uc.conn.Close()
		}
		if err != nil && ctx.Err() == nil {
			panic(http.ErrAbortHandler) // the app failed mid-answer: the client must not take it as whole
		}
		return
	}
}

// send writes req on uc and reads the answer's head (skipping 1xx
// answers). sent reports whether any of the answer arrived.
func (r *Router) send(uc *upConn, req *http.Request, c *slugBytes) (res *http.Response, sent bool, err error) {
	r.writeHead(uc.bw, req)
	if req.ContentLength > 0 {
		var body io.Reader = io.LimitReader(req.Body, req.ContentLength)
		n, err := uc.bw.ReadFrom(body)
		if c != nil {
			c.in.Add(n)
		}
		if err == nil && n < req.ContentLength {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return nil, true, err // the client's body failed: not the app's fault, never replayed
		}
	}
	if err := uc.bw.Flush(); err != nil {
		return nil, false, err
	}
	if _, err := uc.br.Peek(1); err != nil {
		return nil, false, err
	}
	for {
		res, err := http.ReadResponse(uc.br, req)
		if err != nil {
			return nil, true, err
		}
		if res.StatusCode == http.StatusSwitchingProtocols {
			return nil, true, errors.New("the app switched protocols unasked")
		}
		if res.StatusCode >= 200 {
			return res, true, nil
		}
	}
}

// relay writes res to w: status, headers minus the hop-by-hop ones, body
// (flushed whenever the app has sent nothing more yet, or after every read
// when its length is unknown, like an event stream), trailers. It reports
// whether the app's connection is at the end of the answer (false when the
// client went away first), or the app's error.
func (r *Router) relay(w http.ResponseWriter, res *http.Response, br *bufio.Reader, c *slugBytes) (bool, error) {
	dst := w.Header()
	r.scopeCookies(res.Header)
	conn := connNamed(res.Header["Connection"])
	for k, vv := range res.Header {
		if !dropped(k, conn) {
			dst[k] = vv
		}
	}
	if len(res.Trailer) > 0 {
		keys := make([]string, 0, len(res.Trailer))
		for k := range res.Trailer {
			keys = append(keys, k)
		}
		dst["Trailer"] = []string{strings.Join(keys, ", ")}
	}
	w.WriteHeader(res.StatusCode)
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	eachRead := res.ContentLength < 0
	var copied int64
	for {
		n, rerr := res.Body.Read(buf)
		if n > 0 {
			if c != nil && c.blocked() {
				return false, errBlocked // refused meanwhile: the answer ends here, aborted
			}
			m, werr := w.Write(buf[:n])
			copied += int64(m)
			if c != nil {
				c.out.Add(int64(m))
			}
			if werr != nil {
				return false, nil // the client went away
			}
			if eachRead || (rerr == nil && copied < res.ContentLength && br.Buffered() == 0) {
				flush(w)
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return false, rerr
		}
	}
	_ = res.Body.Close()
	for k, vv := range res.Trailer {
		dst[http.TrailerPrefix+k] = vv
	}
	return true, nil
}

// flush sends what w buffered to the client.
func flush(w http.ResponseWriter) {
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
		return
	}
	_ = http.NewResponseController(w).Flush()
}
