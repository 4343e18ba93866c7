package httpx_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform/httpx"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

// serveLimited serves h on a loopback listener holding at most max connections.
func serveLimited(t *testing.T, max int, h http.Handler) (string, *httpx.ConnLimit) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: time.Minute}
	lim := httpx.NewConnLimit(max)
	go srv.Serve(lim.Apply(srv, l)) //nolint:errcheck
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String(), lim
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// get sends a whole GET on a fresh connection and returns the status line and body.
func get(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	c := dial(t, addr)
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestConnLimitEvictsSlowHeadersFirst: at the cap, clients trickling their
// headers make room for a client with a whole request; when every held
// connection is busy with a request, a new one is refused 503 in the error
// model, and served again once a slot frees.
func TestConnLimitEvictsSlowHeadersFirst(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	addr, lim := serveLimited(t, 4, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			<-release
		}
		io.WriteString(w, "ok")
	}))
	// Two slowloris clients and two requests in progress fill the cap.
	var slow []net.Conn
	for i := 0; i < 2; i++ {
		c := dial(t, addr)
		io.WriteString(c, "GET / HTTP/1.1\r\nHo")
		slow = append(slow, c)
	}
	platformtest.Eventually(t, 10*time.Second, "two slow connections held", func() bool { return lim.Stats().Waiting == 2 })
	busy := make(chan int, 2)
	for i := 0; i < 2; i++ {
		go func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				busy <- 0
				return
			}
			defer c.Close()
			io.WriteString(c, "GET /block HTTP/1.1\r\nHost: x\r\n\r\n")
			res, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				busy <- 0
				return
			}
			busy <- res.StatusCode
		}()
	}
	platformtest.Eventually(t, 10*time.Second, "two busy connections", func() bool { st := lim.Stats(); return st.Open == 4 && st.Waiting == 2 })

	// A whole request still gets in: the oldest slow client is evicted.
	if st, body := get(t, addr, "/"); st != 200 || body != "ok" {
		t.Fatalf("at the cap: %d %q", st, body)
	}
	_ = slow[0].SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := slow[0].Read(make([]byte, 1)); err == nil {
		t.Fatal("the oldest slow client was not closed")
	}
	// The other slow client leaves by itself.
	slow[1].Close()

	// Now fill every slot with requests in progress: the next is refused.
	platformtest.Eventually(t, 10*time.Second, "the requests' connections closed", func() bool { return lim.Stats().Open == 2 })
	for i := 0; i < 2; i++ {
		go func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				return
			}
			defer c.Close()
			io.WriteString(c, "GET /block HTTP/1.1\r\nHost: x\r\n\r\n")
			http.ReadResponse(bufio.NewReader(c), nil) //nolint:errcheck
		}()
		platformtest.Eventually(t, 10*time.Second, "one more busy connection", func() bool { st := lim.Stats(); return st.Open == 3+i && st.Waiting == 0 })
	}
	platformtest.Eventually(t, 10*time.Second, "four busy connections", func() bool { st := lim.Stats(); return st.Open == 4 && st.Waiting == 0 })
	c := dial(t, addr)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("refused connection: %v (%+v)", err, lim.Stats())
	}
	raw, _ := io.ReadAll(res.Body)
	var e struct {
		StatusCode int    `json:"statusCode"`
		Message    string `json:"message"`
	}
	if res.StatusCode != 503 || res.Header.Get("Retry-After") == "" || json.Unmarshal(raw, &e) != nil ||
		e.StatusCode != 503 || !strings.Contains(e.Message, "too many open connections") {
		t.Fatalf("past the cap: %d %v %s", res.StatusCode, res.Header, raw)
	}
	if st := lim.Stats(); st.Refused != 1 || st.Evicted != 1 {
		t.Fatalf("%+v, want 1 evicted and 1 refused", st)
	}
	close(release)
	for i := 0; i < 2; i++ {
		if st := platformtest.Receive(t, busy, time.Minute, "a request in progress to be answered"); st != 200 {
			t.Fatalf("a request in progress was cut: %d", st)
		}
	}
	platformtest.Eventually(t, 10*time.Second, "slots freed", func() bool { return lim.Stats().Open < 4 })
	if st, _ := get(t, addr, "/"); st != 200 {
		t.Fatalf("after release: %d", st)
	}
}

// TestConnLimitCountsHijackedConnections: a connection a handler took over
// (a log stream after its headers) stays counted, as busy, until its new
// owner closes it; it is never evicted.
func TestConnLimitCountsHijackedConnections(t *testing.T) {
	t.Parallel()
	taken := make(chan net.Conn, 1)
	addr, lim := serveLimited(t, 2, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		taken <- conn
	}))
	c := dial(t, addr)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	conn := platformtest.Receive(t, taken, time.Minute, "the handler to take the connection over")
	defer conn.Close()
	platformtest.Eventually(t, 10*time.Second, "the hijacked connection counted as busy", func() bool { st := lim.Stats(); return st.Open == 1 && st.Waiting == 0 })
	// A slow client fills the cap; a whole request evicts it, not the hijacked one.
	slow := dial(t, addr)
	io.WriteString(slow, "GET / HTTP/1.1\r\nHo")
	platformtest.Eventually(t, 10*time.Second, "the cap full", func() bool { return lim.Stats().Open == 2 })
	whole := dial(t, addr)
	io.WriteString(whole, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	second := platformtest.Receive(t, taken, time.Minute, "the handler to take the second connection over")
	defer second.Close()
	if st := lim.Stats(); st.Evicted != 1 || st.Open != 2 {
		t.Fatalf("after the eviction: %+v", st)
	}
	conn.Close()
	second.Close()
	platformtest.Eventually(t, 10*time.Second, "closing frees the places", func() bool { return lim.Stats().Open == 0 })
}

// TestConnLimitPerAddress: an address at its cap evicts its own oldest
// waiting connection (slow headers, or a body still arriving) to serve a
// whole request, is answered 429 when all of its connections are busy, and
// never takes another address' place.
func TestConnLimitPerAddress(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := httpx.LimitBodies(httpx.BodyBudget{MinRate: 1, Grace: time.Minute}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			<-release
		}
		io.WriteString(w, "ok")
	}))
	srv := &http.Server{Handler: h, ReadHeaderTimeout: time.Minute}
	lim := httpx.NewConnLimitWith(httpx.ConnLimitConfig{Max: 100, PerAddr: 3})
	go srv.Serve(lim.Apply(srv, l)) //nolint:errcheck
	t.Cleanup(func() { srv.Close() })
	t.Cleanup(func() { close(release) })
	addr := l.Addr().String()
	a := netip.MustParseAddr("127.0.0.2")

	// Two slow-header and two slow-body connections from one address: it
	// holds 3, the oldest were evicted.
	var slow []net.Conn
	for i := 0; i < 4; i++ {
		c := dialFrom(t, "127.0.0.2", addr)
		if i%2 == 0 {
			io.WriteString(c, "GET / HTTP/1.1\r\nHo")
		} else {
			io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc")
		}
		slow = append(slow, c)
		platformtest.Eventually(t, 10*time.Second, "the connection accepted", func() bool {
			return lim.Stats().Evicted+lim.AddrStats(a) == i+1
		})
	}
	if st := lim.Stats(); st.Evicted != 1 || lim.AddrStats(a) != 3 {
		t.Fatalf("%+v, %d held by the address: want 1 evicted, 3 held", st, lim.AddrStats(a))
	}
	// A whole request from the address evicts its oldest waiting one (a slow body among them).
	if st, _ := postFrom(t, "127.0.0.2", addr, "/", "hello"); st != 200 {
		t.Fatalf("whole request at the address' cap: %d", st)
	}
	for _, c := range slow[:2] {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("an old slow connection of the address was not closed: %v", err)
		}
	}
	if st := lim.Stats(); st.Evicted != 2 {
		t.Fatalf("%+v: want the slow header and the slow body evicted", st)
	}
	// Another address is not touched by any of it.
	if st, _ := postFrom(t, "127.0.0.3", addr, "/", "hello"); st != 200 {
		t.Fatalf("another address: %d", st)
	}
	// The whole request's connection is forgotten when the server closes it,
	// which can come after the client read the answer: until then it holds a
	// busy place, and a third blocker would evict the first one instead.
	platformtest.Eventually(t, 10*time.Second, "the whole request's connection closed", func() bool {
		return lim.AddrStats(a) == 2
	})
	// Three busy requests: the address' fourth connection is answered 429.
	for i := 0; i < 3; i++ {
		c := dialFrom(t, "127.0.0.2", addr)
		io.WriteString(c, "GET /block HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	platformtest.Eventually(t, 10*time.Second, "three busy connections", func() bool {
		return lim.AddrStats(a) == 3 && lim.Stats().Waiting == 0
	})
	st, body := postFrom(t, "127.0.0.2", addr, "/", "hello")
	if st != http.StatusTooManyRequests || !strings.Contains(body, "too many open connections from your address") {
		t.Fatalf("past the address' cap, all busy: %d %s", st, body)
	}
	if st, _ := postFrom(t, "127.0.0.3", addr, "/", "hello"); st != 200 {
		t.Fatalf("another address while the first is at its cap: %d", st)
	}
}

// TestTrackBodiesEvictsSlowUploads: behind TrackBodies (the ingress), a
// request whose body is still arriving counts as waiting: at the cap, a
// whole request evicts it instead of being refused.
func TestTrackBodiesEvictsSlowUploads(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var inside atomic.Int32
	h := httpx.TrackBodies(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inside.Add(1)
		io.Copy(io.Discard, r.Body) //nolint:errcheck // a proxy streaming the upload on
		io.WriteString(w, "ok")
	}))
	srv := &http.Server{Handler: h, ReadHeaderTimeout: time.Minute}
	lim := httpx.NewConnLimit(2)
	go srv.Serve(lim.Apply(srv, l)) //nolint:errcheck
	t.Cleanup(func() { srv.Close() })
	addr := l.Addr().String()
	for i := 0; i < 2; i++ {
		c := dialFrom(t, "127.0.0.2", addr)
		io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nabc")
	}
	platformtest.Eventually(t, 10*time.Second, "two uploads arriving, counted as waiting", func() bool {
		st := lim.Stats()
		return inside.Load() == 2 && st.Open == 2 && st.Waiting == 2
	})
	if st, body := postFrom(t, "127.0.0.3", addr, "/", "hello"); st != 200 || body != "ok" {
		t.Fatalf("whole request at the cap of slow uploads: %d %s", st, body)
	}
	if st := lim.Stats(); st.Evicted != 1 || st.Refused != 0 {
		t.Fatalf("%+v: want one slow upload evicted, nothing refused", st)
	}
}
