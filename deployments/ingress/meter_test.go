package ingress_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keelson-dev/keelson/deployments/ingress"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

// sink is an upstream that reads the request body and answers n bytes, n
// from the path (/n).
func sink(t *testing.T) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		var n int
		_, _ = fmt.Sscanf(r.URL.Path, "/%d", &n)
		_, _ = w.Write(bytes.Repeat([]byte("x"), n))
	}))
	t.Cleanup(s.Close)
	return s
}

func send(t *testing.T, srv *httptest.Server, host, path string, body []byte) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+path, bytes.NewReader(body))
	require.NoError(t, err)
	req.Host = host
	res, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, res.Header, string(b)
}

func TestMeterCountsBodiesPerSlug(t *testing.T) {
	t.Parallel()
	m := ingress.NewMeter()
	r, srv := newRouter(t, ingress.Config{Meter: m})
	up := upstream(sink(t))
	require.NoError(t, r.Set("alpha", "d1", up))
	require.NoError(t, r.Set("beta", "d2", up))

	for range 3 {
		code, _, body := send(t, srv, "alpha.localhost", "/5000", make([]byte, 1000))
		require.Equal(t, http.StatusOK, code)
		require.Len(t, body, 5000)
	}
	send(t, srv, "beta.localhost", "/7", nil)
	send(t, srv, "nobody.localhost", "/100", make([]byte, 100)) // 404: no slug, nothing counted

	takeUntil(t, m, map[string]ingress.Bytes{"alpha": {In: 3000, Out: 15000}, "beta": {Out: 7}})
	assert.Empty(t, m.Take(), "Take resets the counts")

	m.Add("alpha", ingress.Bytes{In: 1, Out: 2}) // a failed store puts its batch back
	send(t, srv, "alpha.localhost", "/10", nil)
	takeUntil(t, m, map[string]ingress.Bytes{"alpha": {In: 1, Out: 12}})
}

func TestMeterBlockedSlugIs429WithThePage(t *testing.T) {
	t.Parallel()
	m := ingress.NewMeter()
	r, srv := newRouter(t, ingress.Config{Meter: m})
	up := upstream(sink(t))
	require.NoError(t, r.Set("alpha", "d1", up))
	require.NoError(t, r.Set("beta", "d2", up))
	until := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	m.Block(map[string]ingress.Block{"Alpha": {Message: "used 10 GB of <plan>", Until: until}})

	code, hdr, body := send(t, srv, "ALPHA.localhost:1234", "/5000", make([]byte, 1000))
	assert.Equal(t, http.StatusTooManyRequests, code)
	assert.Contains(t, body, "used 10 GB of &lt;plan&gt;", "the message, HTML-escaped")
	assert.Equal(t, "text/html; charset=utf-8", hdr.Get("Content-Type"))
	assert.Equal(t, "Tue, 01 Dec 2026 00:00:00 GMT", hdr.Get("Retry-After"))
	code, _, _ = send(t, srv, "beta.localhost", "/1", nil)
	assert.Equal(t, http.StatusOK, code, "other slugs are served")
	takeUntil(t, m, map[string]ingress.Bytes{"beta": {Out: 1}}) // a refused request counts nothing

	// A custom hostname of the slug is the slug's: refused the same way,
	// and counted to it once served.
	r.SetHosts("alpha", []string{"www.example.com"})
	code, _, body = send(t, srv, "www.example.com", "/1", nil)
	assert.Equal(t, http.StatusTooManyRequests, code)
	assert.Contains(t, body, "used 10 GB")

	m.Block(nil)
	code, _, _ = send(t, srv, "alpha.localhost", "/1", nil)
	assert.Equal(t, http.StatusOK, code, "unblocked")
	code, _, _ = send(t, srv, "www.example.com", "/2", make([]byte, 3))
	assert.Equal(t, http.StatusOK, code)
	takeUntil(t, m, map[string]ingress.Bytes{"alpha": {In: 3, Out: 3}})
}

// TestMeterCountsUpgradedConnections: a WebSocket-style upgrade carries bytes
// outside any body; they are counted both ways.
func TestMeterCountsUpgradedConnections(t *testing.T) {
	t.Parallel()
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		_ = brw.Flush()
		buf := make([]byte, 4096)
		for {
			n, err := brw.Read(buf)
			if err != nil {
				return
			}
			_, _ = conn.Write(bytes.Repeat(buf[:n], 2)) // answer twice what came
		}
	}))
	defer echo.Close()
	m := ingress.NewMeter()
	r, srv := newRouter(t, ingress.Config{Meter: m})
	require.NoError(t, r.Set("ws", "d1", upstream(echo)))

	conn, br := upgraded(t, strings.TrimPrefix(srv.URL, "http://"))
	_, err := conn.Write(make([]byte, 3000))
	require.NoError(t, err)
	_, err = io.ReadFull(br, make([]byte, 6000))
	require.NoError(t, err)
	conn.Close()
	takeUntil(t, m, map[string]ingress.Bytes{"ws": {In: 3000, Out: 6000}})
}

// takeUntil sums the meter's Takes until they are want: a response's last
// bytes may reach the client a moment before the proxy counts them. More
// than want, or want not reached in time, fails.
func takeUntil(t *testing.T, m *ingress.Meter, want map[string]ingress.Bytes) {
	t.Helper()
	got := map[string]ingress.Bytes{}
	platformtest.Eventually(t, 10*time.Second, fmt.Sprintf("counts %v", want), func() bool {
		for slug, b := range m.Take() {
			g := got[slug]
			got[slug] = ingress.Bytes{In: g.In + b.In, Out: g.Out + b.Out}
		}
		return assert.ObjectsAreEqual(want, got)
	})
	require.Equal(t, want, got)
}

// TestMeterBlockEndsTrafficUnderWay: a project refused while a WebSocket
// or a streaming answer of it is open carries no more through it: the
// ingress ends them at their next bytes instead of serving them past the
// limit for as long as they stay open.
func TestMeterBlockEndsTrafficUnderWay(t *testing.T) {
	t.Parallel()
	stream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "echo" {
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
			_ = brw.Flush()
			_, _ = io.Copy(conn, brw)
			return
		}
		for r.Context().Err() == nil { // an endless event stream
			if _, err := io.WriteString(w, "tick\n"); err != nil {
				return
			}
			http.NewResponseController(w).Flush() //nolint:errcheck
			time.Sleep(5 * time.Millisecond)
		}
	}))
	defer stream.Close()
	m := ingress.NewMeter()
	r, srv := newRouter(t, ingress.Config{Meter: m})
	require.NoError(t, r.Set("ws", "d1", upstream(stream)))
	addr := strings.TrimPrefix(srv.URL, "http://")

	ws, wsr := upgraded(t, addr)

	ev, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer ev.Close()
	_, err = io.WriteString(ev, "GET /events HTTP/1.1\r\nHost: ws.localhost\r\n\r\n")
	require.NoError(t, err)
	evr := bufio.NewReader(ev)
	res, err := http.ReadResponse(evr, nil)
	require.NoError(t, err)
	line, err := bufio.NewReader(res.Body).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "tick\n", line)

	m.Block(map[string]ingress.Block{"ws": {Message: "over"}})
	deadline := time.Now().Add(5 * time.Second)
	require.NoError(t, ws.SetDeadline(deadline))
	require.NoError(t, ev.SetDeadline(deadline))
	for i := 0; ; i++ { // the echo ends: what it still sends back is bounded
		if _, err := ws.Write([]byte("ping")); err != nil {
			break
		}
		if _, err := io.ReadFull(wsr, make([]byte, 4)); err != nil {
			require.False(t, isTimeout(err), "the upgraded connection of a refused project still open: %v", err)
			break
		}
		require.Less(t, i, 100, "the upgraded connection of a refused project still carries bytes")
	}
	n, err := io.Copy(io.Discard, res.Body)
	require.False(t, isTimeout(err), "the stream of a refused project still running after %d more bytes: %v", n, err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return err != nil && errors.As(err, &ne) && ne.Timeout()
}

// upgraded opens a connection to the ingress at addr and upgrades it (the
// "echo" protocol) for ws.localhost; it is closed when t ends.
func upgraded(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	_, err = io.WriteString(conn, "GET / HTTP/1.1\r\nHost: ws.localhost\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	require.NoError(t, err)
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, res.StatusCode)
	return conn, br
}
