package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"syscall"
	"time"
)

// The fan-out's subscribers. The bench shares the machine's 2 cores with the
// server it measures, so its subscribers must cost little per delivered
// line: a stream is opened (request written, response head read) by a
// goroutine of its own, then its socket is handed to one of a few epoll
// loops, which read every ready socket once per wake-up and parse the
// chunked SSE body in place. No goroutine wakes per line, no second read
// per line (Go's netpoller reads again until EAGAIN), no allocation per
// line. What is measured is unchanged: each line carries the time it was
// written, and a line's delay is the time of the read that returned it
// minus that.

// subscriber is one stream's reader state, owned by its opener until it is
// added to a loop, then by the loop.
type subscriber struct {
	fd    int
	lines int // lines to receive before the stream is done
	res   *fanoutResult
	ready func() // called once, at the ready event (or at the end)

	// Chunked-body decoding: size is the data left in the current chunk;
	// in a size line (head) or the CRLF after a chunk's data (crlf) it is 0.
	size int
	head []byte // the chunk-size line read so far
	crlf int    // bytes of the CRLF after chunk data still to skip
	line []byte // the SSE line read so far (decoded body)
	got  int
	err  error
	end  bool
}

// fanoutResult is what one subscriber saw.
type fanoutResult struct {
	delays []time.Duration
	last   time.Time
	err    error
}

var (
	readyEvent = []byte(`"type":"ready"`)
	doneEvent  = []byte(`"type":"done"`)
	errorEvent = []byte(`"type":"error"`)
	benchLine  = []byte("bench-line ")
)

// feed decodes raw bytes of the chunked body read at now.
func (s *subscriber) feed(b []byte, now time.Time) {
	for len(b) > 0 && !s.end {
		switch {
		case s.crlf > 0:
			n := min(s.crlf, len(b))
			s.crlf -= n
			b = b[n:]
		case s.size > 0:
			n := min(s.size, len(b))
			s.body(b[:n], now)
			s.size -= n
			if s.size == 0 {
				s.crlf = 2
			}
			b = b[n:]
		default:
			i := bytes.IndexByte(b, '\n')
			if i < 0 {
				s.head = append(s.head, b...)
				return
			}
			s.head = append(s.head, b[:i]...)
			b = b[i+1:]
			s.chunkSize()
		}
	}
}

// chunkSize parses a chunk-size line ("1a3\r", extensions ignored).
func (s *subscriber) chunkSize() {
	h := bytes.TrimSpace(s.head)
	s.head = s.head[:0]
	if i := bytes.IndexByte(h, ';'); i >= 0 {
		h = h[:i]
	}
	n := 0
	for _, c := range h {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			s.fail(fmt.Errorf("bad chunk size %q", h))
			return
		}
		n = n<<4 | int(d)
	}
	if len(h) == 0 || n == 0 {
		s.fail(io.ErrUnexpectedEOF) // the body ended before every line came
		return
	}
	s.size = n
}

// body splits decoded body bytes into SSE lines.
func (s *subscriber) body(b []byte, now time.Time) {
	for len(b) > 0 && !s.end {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			s.line = append(s.line, b...)
			return
		}
		ln := b[:i]
		if len(s.line) > 0 {
			s.line = append(s.line, ln...)
			ln = s.line
		}
		s.event(ln, now)
		s.line = s.line[:0]
		b = b[i+1:]
	}
}

// event handles one SSE line: a bench line's delay is recorded.
func (s *subscriber) event(ln []byte, now time.Time) {
	if !bytes.HasPrefix(ln, []byte("data: ")) {
		return
	}
	i := bytes.Index(ln, benchLine)
	if i < 0 {
		switch {
		case bytes.Contains(ln, readyEvent):
			s.ready()
		case bytes.Contains(ln, doneEvent), bytes.Contains(ln, errorEvent):
			s.fail(fmt.Errorf("stream ended after %d of %d lines: %s", s.got, s.lines, ln))
		}
		return
	}
	// ...bench-line <n> <unix ns>","stream":...
	f := ln[i+len(benchLine):]
	sp := bytes.IndexByte(f, ' ')
	if sp < 0 {
		s.fail(fmt.Errorf("bad line %q", ln))
		return
	}
	var ns int64
	digits := 0
	for _, c := range f[sp+1:] {
		if c < '0' || c > '9' {
			break
		}
		ns = ns*10 + int64(c-'0')
		digits++
	}
	if digits == 0 {
		s.fail(fmt.Errorf("bad line %q", ln))
		return
	}
	s.res.delays = append(s.res.delays, now.Sub(time.Unix(0, ns)))
	s.res.last = now
	if s.got++; s.got == s.lines {
		s.end = true
	}
}

func (s *subscriber) fail(err error) {
	if !s.end {
		s.err, s.end = err, true
	}
}

// epollLoop reads the sockets of the subscribers added to it. It waits for
// its epoll descriptor to be readable in Go's netpoller and then collects
// ready sockets with a non-blocking epoll_wait: a blocking one would hold
// a thread in a system call, which the runtime's monitor keeps waking for.
type epollLoop struct {
	ep   *os.File // the epoll descriptor, non-blocking, in Go's netpoller
	epfd int
	buf  []byte

	mu   sync.Mutex
	subs map[int32]*subscriber // by the id given to add
	wg   *sync.WaitGroup       // Done once per finished subscriber
}

func newEpollLoop(wg *sync.WaitGroup) (*epollLoop, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	if err := syscall.SetNonblock(epfd, true); err != nil {
		syscall.Close(epfd)
		return nil, err
	}
	return &epollLoop{ep: os.NewFile(uintptr(epfd), "epoll"), epfd: epfd, buf: make([]byte, 64<<10),
		subs: map[int32]*subscriber{}, wg: wg}, nil
}

// add starts reading s's socket (level-triggered); id names s in l.
func (l *epollLoop) add(id int32, s *subscriber) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.subs[id] = s
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP, Fd: id}
	if err := syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_ADD, s.fd, &ev); err != nil {
		delete(l.subs, id)
		return err
	}
	return nil
}

// watch hands s, opened, to l. A subscriber that ended with its response
// head (its whole body came with it) is finished at once.
func (l *epollLoop) watch(id int32, s *subscriber) error {
	if !s.end {
		err := l.add(id, s)
		if err != nil {
			syscall.Close(s.fd)
		}
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.finish(id, s)
	return nil
}

// run reads ready sockets until ctx is done; then it ends the subscribers
// left with ctx's error.
func (l *epollLoop) run(ctx context.Context) {
	defer l.ep.Close()
	raw, err := l.ep.SyscallConn()
	if err != nil {
		panic(err) // an epoll descriptor is pollable
	}
	stop := context.AfterFunc(ctx, func() { _ = l.ep.SetReadDeadline(time.Now()) })
	defer stop()
	events := make([]syscall.EpollEvent, 256)
	for ctx.Err() == nil {
		n := 0
		err = raw.Read(func(fd uintptr) bool {
			var err error
			n, err = syscall.EpollWait(int(fd), events, 0)
			return n > 0 || (err != nil && !errors.Is(err, syscall.EINTR))
		})
		if err != nil {
			break
		}
		l.mu.Lock()
		for _, ev := range events[:n] {
			if s := l.subs[ev.Fd]; s != nil {
				l.read(ev.Fd, s)
			}
		}
		l.mu.Unlock()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, s := range l.subs {
		s.fail(cmp.Or(ctx.Err(), err, io.ErrUnexpectedEOF))
		l.finish(id, s)
	}
}

// read reads what s's socket holds, once.
func (l *epollLoop) read(id int32, s *subscriber) {
	n, err := syscall.Read(s.fd, l.buf)
	now := time.Now()
	switch {
	case errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINTR):
		return
	case err != nil:
		s.fail(err)
	case n == 0:
		s.fail(io.ErrUnexpectedEOF)
	default:
		s.feed(l.buf[:n], now)
	}
	if s.end {
		l.finish(id, s)
	}
}

// finish closes s's socket and records how it ended. l.mu is held.
func (l *epollLoop) finish(id int32, s *subscriber) {
	delete(l.subs, id)
	_ = syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_DEL, s.fd, nil)
	_ = syscall.Close(s.fd)
	s.res.err = s.err
	s.ready()
	l.wg.Done()
}

// openSubscriber opens a log stream on a connection of its own, reads the
// response head and returns the stream's subscriber, its socket taken from
// Go's netpoller (a duplicate descriptor; the net.Conn is closed) for an
// epoll loop. Connections are spread over 16 loopback source addresses so
// 10,000 streams do not run out of ephemeral ports.
func openSubscriber(ctx context.Context, i int, rawURL, tok string, s *subscriber) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return err
	}
	d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(fmt.Sprintf("127.0.200.%d", 1+i%16))}}
	conn, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	req, _ := http.NewRequestWithContext(ctx, "GET", rawURL, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	if err := req.Write(conn); err != nil {
		return err
	}
	br := bufio.NewReaderSize(conn, 4<<10)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	if len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" {
		return fmt.Errorf("body not chunked (%v)", resp.TransferEncoding)
	}
	raw, err := conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		return err
	}
	var derr error
	if err := raw.Control(func(fd uintptr) { s.fd, derr = syscall.Dup(int(fd)) }); err != nil {
		return err
	}
	if derr != nil {
		return derr
	}
	if err := syscall.SetNonblock(s.fd, true); err != nil {
		syscall.Close(s.fd)
		return err
	}
	rest, _ := br.Peek(br.Buffered()) // body bytes read with the head
	s.feed(rest, time.Now())
	return nil
}
