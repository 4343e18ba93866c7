package logstream

import (
	"net"
	"net/http"
	"strconv"
	"sync"

	"github.com/danielgtaylor/huma/v2"
)

// Taken-over log streams. An HTTP/1.1 stream, once its headers are written,
// leaves net/http: the handler takes the connection (Hijack), sends ready
// and the backlog, and returns, so the request's goroutine (deep, with
// net/http's 4 KiB read and write buffers and its background reader) ends.
// What is left per stream is one shallow goroutine that waits for live
// lines and heartbeats and writes them as chunks, one write per batch of
// pending lines, and one that reads the connection to see the client hang
// up at once. The write deadline is moved once every few seconds, not per
// write. Streams.Close ends every taken-over stream (the Hub closes their
// subscriptions; their connections are closed and their goroutines waited
// for).

// chunkHead is the room kept at the front of a stream's out buffer for the
// chunk-size line ("%x\r\n", up to 8 hex digits).
const chunkHead = 10

// outPool holds the streams' write buffers: an idle stream holds none.
var outPool = sync.Pool{New: func() any { b := make([]byte, chunkHead, 4<<10); return &b }}

// grow makes sure s.out is a buffer with the chunk head reserved.
func (s *stream) grow() {
	if s.out == nil {
		s.out = (*outPool.Get().(*[]byte))[:chunkHead]
	}
}

// release gives s.out back to the pool.
func (s *stream) release() {
	if s.out == nil {
		return
	}
	if cap(s.out) <= maxPending*2 {
		b := s.out[:chunkHead]
		outPool.Put(&b)
	}
	s.out = nil
}

// lastChunk ends a chunked body.
const lastChunk = "0\r\n\r\n"

// flushConn writes the pending frames as one chunk (and, when last, the
// terminal chunk with them).
func (s *stream) flushConn(last bool) error {
	if s.failed {
		s.release()
		return net.ErrClosed
	}
	var b []byte
	start := chunkHead
	if n := len(s.out) - chunkHead; n > 0 {
		size := strconv.AppendInt(make([]byte, 0, 8), int64(n), 16)
		start = chunkHead - len(size) - 2
		copy(s.out[start:], size)
		s.out[chunkHead-2], s.out[chunkHead-1] = '\r', '\n'
		s.out = append(s.out, '\r', '\n')
		b = s.out[start:]
	}
	if last {
		s.grow()
		s.out = append(s.out, lastChunk...)
		b = s.out[start:]
	}
	if len(s.rest) > 0 { // what a direct write left goes first (direct.go)
		b = append(s.rest, b...)
		s.rest = nil
	}
	if len(b) == 0 {
		return nil
	}
	s.extendDeadline(s.conn.SetWriteDeadline)
	_, err := s.conn.Write(b)
	s.release()
	if err != nil {
		s.failed = true
	}
	return err
}

// takeOver writes the headers and takes the connection of an HTTP/1.1 GET
// from net/http. If it can, the stream (ready, backlog, live lines) is served
// on it and release is called when it ends; takeOver returns true once the
// backlog was sent and the live part runs in its own goroutine. It returns
// false, having written nothing, when the connection cannot be taken (HTTP/2,
// HTTP/1.0, a HEAD, a writer without Hijack).
func (sv *Streams) takeOver(hctx huma.Context, s *stream, release func()) bool {
	rw, ok := hctx.BodyWriter().(http.ResponseWriter)
	if v := hctx.Version(); !ok || hctx.Method() != http.MethodGet || v.ProtoMajor != 1 || v.ProtoMinor < 1 {
		return false
	}
	rc := http.NewResponseController(rw)
	// The connection is not handed back to net/http: the client must not
	// reuse it after the stream.
	hctx.SetHeader("Connection", "close")
	hctx.SetStatus(http.StatusOK)
	// Hijack sends the headers; a body without Content-Length on HTTP/1.1
	// is chunked (net/http chose it with the headers), so chunks follow.
	conn, brw, err := rc.Hijack()
	if err != nil {
		return false // the headers are written (buffered): the caller streams through rw
	}
	_ = brw // net/http's buffers: empty (the headers were flushed), dropped
	s.conn = conn
	s.raw = rawConn(conn)
	s.gone = make(chan struct{})
	if !sv.conns.Add(conn) { // the service is closing
		_ = conn.Close()
		release()
		return true
	}
	setUserTimeout(conn, max(sv.heartbeat, writeTimeout))
	go s.read()
	ctx := sv.conns.Ctx
	sub, ok := s.begin(ctx)
	if !ok {
		s.end(sub, release)
		sv.conns.WG.Done() // no live goroutine
		return true
	}
	go func() {
		defer sv.conns.WG.Done()
		s.end(s.loop(ctx, sub, s.gone), release)
	}()
	return true
}

// read waits for the client to hang up (a client sends nothing after its
// request; whatever it sends is discarded) and closes gone.
func (s *stream) read() {
	defer s.sv.conns.WG.Done()
	buf := make([]byte, 16)
	for {
		if _, err := s.conn.Read(buf); err != nil {
			close(s.gone)
			return
		}
	}
}

// end closes the subscription, runs release (the stream's slot and its
// metric: before the client can see the body end, so a client that read it
// never finds its stream still counted) and closes the connection, ending the
// chunked body first unless a write failed or the client went.
func (s *stream) end(sub *Subscription, release func()) {
	sub.Close()
	release()
	select {
	case <-s.gone:
		s.failed = true
	default:
	}
	_ = s.flushConn(true)
	_ = s.conn.Close()
	s.sv.conns.Remove(s.conn)
}
