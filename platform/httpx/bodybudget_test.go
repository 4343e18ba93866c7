package httpx_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform/httpx"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

// TestLimitBodies: a declared length over the route's maximum is 413 before
// a byte is read; bodies share the budget, so while one holds it all another
// waits, and is answered 503 + Retry-After past Wait; a chunked body is cut
// at the maximum; requests without a body never wait.
func TestLimitBodies(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	var inside atomic.Int32
	// Each path is its own client here, so the whole budget is what fills.
	h := httpx.LimitBodies(httpx.BodyBudget{Bytes: 1000, PerAddr: 1000, Factor: 2, Wait: 300 * time.Millisecond,
		Addr:     func(r *http.Request) string { return r.URL.Path },
		MaxBytes: func(r *http.Request) int64 { return 600 }},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			inside.Add(1)
			defer inside.Add(-1)
			if r.URL.Path == "/hold" {
				<-hold
			}
			b, err := io.ReadAll(r.Body)
			if err != nil {
				w.WriteHeader(http.StatusRequestEntityTooLarge)
				return
			}
			_ = b
		}))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	post := func(path string, body io.Reader, n int64) (*http.Response, string) {
		req, _ := http.NewRequest("POST", srv.URL+path, body)
		req.ContentLength = n
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	if resp, body := post("/", strings.NewReader(strings.Repeat("x", 700)), 700); resp.StatusCode != 413 || !strings.Contains(body, "more than this route accepts (600 bytes)") {
		t.Fatalf("over the maximum: %d %s", resp.StatusCode, body)
	}
	// 500 bytes cost the whole budget (2 x 500 = 1000): the next body waits.
	done := make(chan int)
	go func() {
		resp, _ := post("/hold", strings.NewReader(strings.Repeat("x", 500)), 500)
		done <- resp.StatusCode
	}()
	deadline := time.Now().Add(10 * time.Second)
	for inside.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	resp, body := post("/", strings.NewReader("x"), 1)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "too many large request bodies") {
		t.Fatalf("while the budget is held: %d %s", resp.StatusCode, body)
	}
	// A GET passes at once.
	if r, err := http.Get(srv.URL + "/"); err != nil || r.StatusCode != 200 {
		t.Fatalf("GET while the budget is held: %v %v", err, r)
	}
	close(hold)
	if st := platformtest.Receive(t, done, time.Minute, "the holder's answer"); st != 200 {
		t.Fatalf("the holder: %d", st)
	}
	if resp, _ := post("/", strings.NewReader("x"), 1); resp.StatusCode != 200 {
		t.Fatalf("after release: %d", resp.StatusCode)
	}
	// A chunked body is cut at the maximum.
	if resp, _ := post("/", io.LimitReader(strings.NewReader(strings.Repeat("x", 2000)), 2000), -1); resp.StatusCode != 413 {
		t.Fatalf("chunked over the maximum: %d", resp.StatusCode)
	}
}

// dialFrom connects to addr from the loopback address from (127.0.0.2 and up
// are other clients to a per-address limit).
func dialFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// postFrom sends a whole POST with body from the address from and reads the answer.
func postFrom(t *testing.T, from, addr, path, body string) (int, string) {
	t.Helper()
	c := dialFrom(t, from, addr)
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body)
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("POST %s from %s: %v", path, from, err)
	}
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestBodyBudgetPerAddress: one address holds at most its share of the
// budget; another address' body is served while the first waits for its own
// share (and is answered 429 past Wait).
func TestBodyBudgetPerAddress(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	var inside atomic.Int32
	srv := httptest.NewServer(httpx.LimitBodies(httpx.BodyBudget{Bytes: 1000, PerAddr: 500, Factor: 1, Wait: 500 * time.Millisecond,
		MaxBytes: func(*http.Request) int64 { return 1000 }},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			inside.Add(1)
			if r.URL.Path == "/hold" {
				<-hold
			}
			io.WriteString(w, "ok")
		})))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(hold) })
	addr := srv.Listener.Addr().String()
	holder := dialFrom(t, "127.0.0.2", addr)
	io.WriteString(holder, "POST /hold HTTP/1.1\r\nHost: x\r\nContent-Length: 400\r\n\r\n"+strings.Repeat("x", 400))
	platformtest.Eventually(t, 10*time.Second, "the first body inside", func() bool { return inside.Load() == 1 })
	if st, body := postFrom(t, "127.0.0.2", addr, "/", strings.Repeat("x", 200)); st != 429 || !strings.Contains(body, "too many large request bodies from your address") {
		t.Fatalf("past the address' share: %d %s", st, body)
	}
	if st, body := postFrom(t, "127.0.0.3", addr, "/", strings.Repeat("x", 400)); st != 200 || body != "ok" {
		t.Fatalf("another address: %d %s", st, body)
	}
}

// TestStalledBodiesHoldNothing: bodies whose bytes do not come reserve
// nothing (a whole body from the same address is served at once), and past
// the grace they are answered 408 and closed; one that stalls after its
// first bytes loses its reservation at the minimum rate the same way.
func TestStalledBodiesHoldNothing(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(httpx.LimitBodies(httpx.BodyBudget{Bytes: 1000, PerAddr: 1000, Factor: 1, MinRate: 1000, Grace: 2 * time.Second,
		MaxBytes: func(*http.Request) int64 { return 1000 }},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "got %d", len(b))
		})))
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()
	var stalled []net.Conn
	for i := 0; i < 10; i++ {
		c := dialFrom(t, "127.0.0.2", addr)
		io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
		stalled = append(stalled, c)
	}
	if st, body := postFrom(t, "127.0.0.2", addr, "/", strings.Repeat("x", 900)); st != 200 || body != "got 900" {
		t.Fatalf("while 10 bodies of 1000 bytes stall: %d %s", st, body)
	}
	// One more sends its first bytes, then stalls: it reserves, then loses
	// it within grace + 10/1000 s.
	late := dialFrom(t, "127.0.0.2", addr)
	io.WriteString(late, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n0123456789")
	for _, c := range append(stalled, late) {
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("stalled body: %v", err)
		}
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), "arrived slower than") {
			t.Fatalf("stalled body: %d %s", res.StatusCode, b)
		}
	}
	if st, body := postFrom(t, "127.0.0.2", addr, "/", strings.Repeat("x", 1000)); st != 200 || body != "got 1000" {
		t.Fatalf("after the stalled bodies: %d %s", st, body)
	}
}

// TestAddrKey: IPv4 addresses are themselves, IPv6 ones their /64.
func TestAddrKey(t *testing.T) {
	for in, want := range map[string]string{
		"203.0.113.9":          "203.0.113.9",
		"::ffff:203.0.113.9":   "203.0.113.9",
		"2001:db8:1:2:3:4:5:6": "2001:db8:1:2::/64",
		"2001:db8:1:2:ffff::1": "2001:db8:1:2::/64",
		"2001:db8:1:3::1":      "2001:db8:1:3::/64",
	} {
		if got := httpx.AddrKey(netip.MustParseAddr(in)); got != want {
			t.Errorf("AddrKey(%s) = %s, want %s", in, got, want)
		}
	}
}
