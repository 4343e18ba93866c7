package ingress_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keelson-dev/keelson/deployments/ingress"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

// The direct path passes what an app needs and drops the hop-by-hop
// headers both ways, including those a Connection header names.
func TestDirectPathHeaders(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "X-Private")
		w.Header().Set("X-Private", "hop")
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("X-App", "kept")
		_, _ = io.WriteString(w, strings.Join([]string{r.Method, r.Host, r.RequestURI,
			r.Header.Get("X-Client"), r.Header.Get("X-Secret"), r.Header.Get("Proxy-Authorization"),
			r.Header.Get("X-Forwarded-For"), r.Header.Get("X-Forwarded-Proto"), r.Header.Get("Forwarded")}, "|"))
	}))
	defer up.Close()
	r, srv := newRouter(t, ingress.Config{})
	require.NoError(t, r.Set("site", "d1", upstream(up)))
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/a%2Fb?q=1&r=%20", nil)
	req.Host = "Site.localhost"
	req.Header.Set("X-Client", "yes")
	req.Header.Set("Connection", "X-Secret")
	req.Header.Set("X-Secret", "hop")
	req.Header.Set("Proxy-Authorization", "Basic eA==")
	req.Header.Set("X-Forwarded-For", "6.6.6.6")
	req.Header.Set("Forwarded", "for=6.6.6.6")
	res, err := srv.Client().Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	assert.Equal(t, "GET|Site.localhost|/a%2Fb?q=1&r=%20|yes|||127.0.0.1|http|", string(body))
	assert.Equal(t, "kept", res.Header.Get("X-App"))
	assert.Empty(t, res.Header.Get("X-Private"))
	assert.Empty(t, res.Header.Get("Keep-Alive"))
}

// Bodies, HEAD, chunked answers and trailers go through as sent.
func TestDirectPathBodiesAndTrailers(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/echo":
			b, _ := io.ReadAll(r.Body)
			w.Header().Set("Content-Length", "5")
			_, _ = w.Write(b[:5])
		case "/chunked":
			w.Header().Set("Trailer", "X-Sum")
			_, _ = io.WriteString(w, "part1 ")
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, "part2")
			w.Header().Set("X-Sum", "42")
		default:
			w.Header().Set("Content-Length", "11")
			if r.Method != http.MethodHead {
				_, _ = io.WriteString(w, "hello world")
			}
		}
	}))
	defer up.Close()
	m := ingress.NewMeter()
	r, srv := newRouter(t, ingress.Config{Meter: m})
	require.NoError(t, r.Set("site", "d1", upstream(up)))
	do := func(method, path string, body []byte) *http.Response {
		req, _ := http.NewRequest(method, srv.URL+path, bytes.NewReader(body))
		if body == nil {
			req.Body = nil
		}
		req.Host = "site.localhost"
		res, err := srv.Client().Do(req)
		require.NoError(t, err)
		return res
	}
	res := do(http.MethodPost, "/echo", []byte("abcdefgh"))
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	assert.Equal(t, "abcde", string(b))
	res = do(http.MethodHead, "/", nil)
	b, _ = io.ReadAll(res.Body)
	res.Body.Close()
	assert.Empty(t, b)
	assert.Equal(t, int64(11), res.ContentLength)
	res = do(http.MethodGet, "/chunked", nil)
	b, _ = io.ReadAll(res.Body)
	res.Body.Close()
	assert.Equal(t, "part1 part2", string(b))
	assert.Equal(t, "42", res.Trailer.Get("X-Sum"))
	// A body over the direct path's bound goes through the transport, counted too.
	big := bytes.Repeat([]byte("z"), 100<<10)
	res = do(http.MethodPost, "/echo", big)
	b, _ = io.ReadAll(res.Body)
	res.Body.Close()
	assert.Equal(t, "zzzzz", string(b))
	got := m.Take()["site"]
	assert.Equal(t, int64(8+len(big)), got.In)
	assert.Equal(t, int64(5+11+5), got.Out)
}

// A pooled connection the app closed while idle is replaced: a GET sent on
// it is sent again on a new connection, and the client never sees the close.
func TestDirectPathReplacesConnectionsTheAppClosed(t *testing.T) {
	var conns atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	up.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	up.Start()
	defer up.Close()
	r, srv := newRouter(t, ingress.Config{})
	require.NoError(t, r.Set("site", "d1", upstream(up)))
	for i := range 3 {
		code, body := get(t, srv, "site.localhost", "/")
		require.Equal(t, http.StatusOK, code, "request %d", i)
		require.Equal(t, "ok", body)
		up.CloseClientConnections() // the app drops its idle connections
	}
	assert.Equal(t, int64(3), conns.Load())
}

// A client that goes away while its app has not answered frees the
// connection to the app (the app sees it closed); goleak checks the rest.
func TestDirectPathClientGoneClosesTheAppConnection(t *testing.T) {
	arrived, closed := make(chan struct{}), make(chan struct{})
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		select {
		case <-r.Context().Done():
			close(closed)
		case <-release:
		}
	}))
	defer up.Close()
	defer close(release)
	r, srv := newRouter(t, ingress.Config{})
	require.NoError(t, r.Set("site", "d1", upstream(up)))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/", nil)
	req.Host = "site.localhost"
	done := make(chan error, 1)
	go func() {
		res, err := srv.Client().Do(req)
		if err == nil {
			res.Body.Close()
		}
		done <- err
	}()
	platformtest.Receive(t, arrived, time.Minute, "the request to reach the app")
	cancel()
	platformtest.Receive(t, done, time.Minute, "the client to give up")
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the app's connection stayed open after the client went away")
	}
}

// Removing a route closes its idle connections to the app.
func TestRemovedRouteClosesIdleConnections(t *testing.T) {
	var open atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	up.Config.ConnState = func(c net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed:
			open.Add(-1)
		}
	}
	up.Start()
	defer up.Close()
	r, srv := newRouter(t, ingress.Config{})
	require.NoError(t, r.Set("site", "d1", upstream(up)))
	code, _ := get(t, srv, "site.localhost", "/")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, int64(1), open.Load())
	require.True(t, r.Remove("site", "d1"))
	deadline := time.Now().Add(10 * time.Second)
	for open.Load() != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	assert.Zero(t, open.Load())
}
