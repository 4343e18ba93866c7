package ingress_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keelson-dev/keelson/deployments/ingress"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := platformtest.FindLeaks(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// app is a real upstream HTTP server answering its name and the headers it got.
func app(t *testing.T, name string) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s host=%s xff=%s xfproto=%s xfhost=%s path=%s",
			name, r.Host, r.Header.Get("X-Forwarded-For"), r.Header.Get("X-Forwarded-Proto"),
			r.Header.Get("X-Forwarded-Host"), r.URL.RequestURI())
	}))
	t.Cleanup(s.Close)
	return s
}

func upstream(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }

// newRouter serves a Router on a real loopback server.
func newRouter(t *testing.T, cfg ingress.Config) (*ingress.Router, *httptest.Server) {
	t.Helper()
	r, err := ingress.New(cfg)
	require.NoError(t, err)
	s := httptest.NewServer(r)
	t.Cleanup(func() { s.Close(); r.Close() })
	return r, s
}

func get(t *testing.T, srv *httptest.Server, host, path string, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	require.NoError(t, err)
	req.Host = host
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(b)
}

func TestRoutesByHostCaseInsensitiveIgnoringPort(t *testing.T) {
	t.Parallel()
	r, srv := newRouter(t, ingress.Config{AppsDomain: "apps.test"})
	a, b := app(t, "A"), app(t, "B")
	require.NoError(t, r.Set("alpha", "d1", upstream(a)))
	require.NoError(t, r.Set("Beta", "d2", upstream(b)))

	for _, host := range []string{"alpha.apps.test", "ALPHA.Apps.Test:8081", "alpha.apps.test."} {
		code, body := get(t, srv, host, "/x?q=1")
		assert.Equal(t, http.StatusOK, code, host)
		assert.True(t, strings.HasPrefix(body, "A "), "%s: %s", host, body)
		assert.Contains(t, body, "path=/x?q=1")
	}
	code, body := get(t, srv, "beta.apps.test", "/")
	assert.Equal(t, http.StatusOK, code)
	assert.True(t, strings.HasPrefix(body, "B "), body)

	rt, ok := r.Lookup("BETA")
	require.True(t, ok)
	assert.Equal(t, ingress.Route{Slug: "beta", DeploymentID: "d2", Upstream: upstream(b)}, rt)
}

func TestUnknownHostIs404NamingTheHost(t *testing.T) {
	t.Parallel()
	r, srv := newRouter(t, ingress.Config{AppsDomain: "apps.test"})
	require.NoError(t, r.Set("alpha", "d1", upstream(app(t, "A"))))
	for _, host := range []string{"gamma.apps.test", "alpha.other.test", "apps.test", "alpha.apps.test.evil"} {
		code, body := get(t, srv, host, "/")
		assert.Equal(t, http.StatusNotFound, code, host)
		assert.Contains(t, body, host, host)
	}
}

func TestForwardedHeadersAreRebuilt(t *testing.T) {
	t.Parallel()
	r, srv := newRouter(t, ingress.Config{})
	require.NoError(t, r.Set("site", "d1", upstream(app(t, "A"))))
	// A client cannot forge X-Forwarded-For: the proxy rebuilds it from the connection.
	_, body := get(t, srv, "site.localhost:9999", "/", "X-Forwarded-For", "6.6.6.6", "X-Forwarded-Host", "evil")
	assert.Contains(t, body, "xff=127.0.0.1 ")
	assert.Contains(t, body, "xfproto=http ")
	assert.Contains(t, body, "xfhost=site.localhost:9999 ")
	assert.Contains(t, body, "host=site.localhost:9999 ", "the app sees the public host")
	assert.NotContains(t, body, "6.6.6.6")
}

func TestUpstreamDownIs502(t *testing.T) {
	t.Parallel()
	r, srv := newRouter(t, ingress.Config{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := l.Addr().String()
	require.NoError(t, l.Close())
	require.NoError(t, r.Set("gone", "d1", dead))
	code, body := get(t, srv, "gone.localhost", "/")
	assert.Equal(t, http.StatusBadGateway, code)
	assert.Contains(t, body, "gone")
}

func TestRemoveAndUpdateOnlyTouchTheirDeployment(t *testing.T) {
	t.Parallel()
	r, srv := newRouter(t, ingress.Config{})
	a, b := app(t, "A"), app(t, "B")
	require.NoError(t, r.Set("site", "old", upstream(a)))
	require.NoError(t, r.Set("site", "new", upstream(b)))

	assert.False(t, r.Remove("site", "old"), "a stale deployment must not remove the live route")
	ok, err := r.Update("site", "old", upstream(a))
	require.NoError(t, err)
	assert.False(t, ok, "a stale deployment must not redirect the live route")
	_, body := get(t, srv, "site.localhost", "/")
	assert.True(t, strings.HasPrefix(body, "B "), body)

	ok, err = r.Update("site", "new", upstream(a))
	require.NoError(t, err)
	assert.True(t, ok)
	_, body = get(t, srv, "site.localhost", "/")
	assert.True(t, strings.HasPrefix(body, "A "), body)

	assert.True(t, r.Remove("site", "new"))
	code, _ := get(t, srv, "site.localhost", "/")
	assert.Equal(t, http.StatusNotFound, code)
	assert.False(t, r.Remove("site", "new"), "idempotent")
}

// A route marked down (its app exited) answers 503 without a dial, only
// for its own deployment, until Update routes it again.
func TestDownRouteAnswers503UntilUpdated(t *testing.T) {
	t.Parallel()
	r, srv := newRouter(t, ingress.Config{})
	a := app(t, "A")
	require.NoError(t, r.Set("site", "d1", upstream(a)))
	assert.False(t, r.Down("site", "d0"), "another deployment must not mark the live route down")
	assert.False(t, r.Down("nothing", "d1"))
	assert.True(t, r.Down("site", "d1"))
	assert.False(t, r.Down("site", "d1"), "down already")
	route, ok := r.Lookup("site")
	require.True(t, ok)
	assert.True(t, route.Down)

	a.Close() // nothing must dial it: a down route is not its upstream's
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
	require.NoError(t, err)
	req.Host = "site.localhost"
	res, err := srv.Client().Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, res.StatusCode)
	assert.Equal(t, "1", res.Header.Get("Retry-After"))
	assert.Equal(t, "the app \"site\" is restarting\n", string(body))

	b := app(t, "B")
	ok, err = r.Update("site", "d1", upstream(b))
	require.NoError(t, err)
	require.True(t, ok)
	code, got := get(t, srv, "site.localhost", "/")
	assert.Equal(t, http.StatusOK, code)
	assert.True(t, strings.HasPrefix(got, "B "), got)
}

func TestSetRejectsBadInput(t *testing.T) {
	t.Parallel()
	r, err := ingress.New(ingress.Config{})
	require.NoError(t, err)
	assert.Error(t, r.Set("", "d", "127.0.0.1:1"))
	assert.Error(t, r.Set("a.b", "d", "127.0.0.1:1"))
	assert.Error(t, r.Set("a", "", "127.0.0.1:1"))
	assert.Error(t, r.Set("a", "d", "127.0.0.1"))
	_, err = ingress.New(ingress.Config{PublicPort: 70000})
	assert.Error(t, err)
}

func TestURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  ingress.Config
		want string
	}{
		{ingress.Config{}, "http://my-app.localhost"},
		{ingress.Config{PublicPort: 80, AppsDomain: "Apps.Example.com"}, "http://my-app.apps.example.com"},
		{ingress.Config{PublicPort: 8081}, "http://my-app.localhost:8081"},
	} {
		r, err := ingress.New(tc.cfg)
		require.NoError(t, err)
		assert.Equal(t, tc.want, r.URL("My-App"))
	}
}

func TestStreamingResponsesFlush(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		<-release // the client must see the first event before the handler goes on
		fmt.Fprint(w, "data: second\n\n")
	}))
	defer up.Close()
	defer close(release)
	r, srv := newRouter(t, ingress.Config{})
	require.NoError(t, r.Set("sse", "d1", upstream(up)))

	req, err := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
	require.NoError(t, err)
	req.Host = "sse.localhost"
	res, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	line, err := bufio.NewReader(res.Body).ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "data: first\n", line)
}

// TestSwapUnderLoadLosesNoRequest swaps a slug between two upstreams while
// clients hammer it, drains the old deployment and shuts its server down: no
// request may fail.
func TestSwapUnderLoadLosesNoRequest(t *testing.T) {
	t.Parallel()
	r, srv := newRouter(t, ingress.Config{})
	a := app(t, "A")
	require.NoError(t, r.Set("site", "dA", upstream(a)))

	var failed, ok atomic.Int64
	var sawB atomic.Bool
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
				req.Host = "site.localhost"
				res, err := srv.Client().Do(req)
				if err != nil {
					failed.Add(1)
					continue
				}
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusOK {
					failed.Add(1)
					continue
				}
				ok.Add(1)
				if strings.HasPrefix(string(b), "B ") {
					sawB.Store(true)
				}
			}
		}()
	}
	// Let some traffic reach A first (bounded by count, not time).
	platformtest.Eventually(t, 30*time.Second, "50 requests through the router", func() bool { return ok.Load() >= 50 || failed.Load() > 0 })
	b := app(t, "B")
	require.NoError(t, r.Set("site", "dB", upstream(b)))
	require.NoError(t, r.Drain(context.Background(), "dA"))
	a.Close() // the old app is gone; nothing may still be sent to it
	before := ok.Load()
	platformtest.Eventually(t, 30*time.Second, "50 more requests through the router", func() bool { return ok.Load() >= before+50 || failed.Load() > 0 })
	close(stop)
	wg.Wait()
	assert.Zero(t, failed.Load())
	assert.True(t, sawB.Load())
}

func TestDrainWaitsForInFlightRequests(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		fmt.Fprint(w, "slow done")
	}))
	defer slow.Close()
	r, srv := newRouter(t, ingress.Config{})
	require.NoError(t, r.Set("site", "old", upstream(slow)))

	got := make(chan string, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
		req.Host = "site.localhost"
		res, err := srv.Client().Do(req)
		if err != nil {
			got <- err.Error()
			return
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		got <- string(b)
	}()
	platformtest.Receive(t, entered, time.Minute, "the slow request to reach the old app")
	require.NoError(t, r.Set("site", "new", upstream(app(t, "B"))))
	drained := make(chan error, 1)
	go func() { drained <- r.Drain(context.Background(), "old") }()
	select {
	case err := <-drained:
		t.Fatalf("Drain returned (%v) while a request to the old deployment was in flight", err)
	case <-entered: // closed: does not block; Drain cannot finish while the handler waits
	}
	close(release)
	require.NoError(t, platformtest.Receive(t, drained, time.Minute, "the drain to end"))
	assert.Equal(t, "slow done", platformtest.Receive(t, got, time.Minute, "the slow request's answer"))

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.NoError(t, r.Drain(ctx, "never-routed"))
}

func TestCustomHostsFollowTheSlugsRoute(t *testing.T) {
	t.Parallel()
	r, srv := newRouter(t, ingress.Config{AppsDomain: "apps.test"})
	a, b := app(t, "A"), app(t, "B")
	require.NoError(t, r.Set("alpha", "d1", upstream(a)))
	r.SetHosts("alpha", []string{"www.example.com", "Shop.Example.COM."})
	assert.Equal(t, []string{"shop.example.com", "www.example.com"}, r.Hosts("alpha"))

	for _, host := range []string{"www.example.com", "SHOP.example.com:8443", "www.example.com."} {
		code, body := get(t, srv, host, "/")
		assert.Equal(t, http.StatusOK, code, host)
		assert.True(t, strings.HasPrefix(body, "A host="+host), "%s: %s", host, body)
	}
	// One route switch moves every hostname of the slug.
	require.NoError(t, r.Set("alpha", "d2", upstream(b)))
	for _, host := range []string{"alpha.apps.test", "www.example.com", "shop.example.com"} {
		_, body := get(t, srv, host, "/")
		assert.True(t, strings.HasPrefix(body, "B "), "%s: %s", host, body)
	}
	rt, ok := r.Resolve("WWW.example.com:443")
	assert.True(t, ok)
	assert.Equal(t, "d2", rt.DeploymentID)

	// A name dropped from the set is not served any more, at once.
	r.SetHosts("alpha", []string{"shop.example.com"})
	code, body := get(t, srv, "www.example.com", "/")
	assert.Equal(t, http.StatusNotFound, code)
	assert.Contains(t, body, `no app is served at host "www.example.com"`)
	_, ok = r.Resolve("www.example.com")
	assert.False(t, ok)

	// A hostname given to another slug moves there; the first slug keeps the rest.
	c := app(t, "C")
	require.NoError(t, r.Set("gamma", "d3", upstream(c)))
	r.SetHosts("gamma", []string{"shop.example.com"})
	_, body = get(t, srv, "shop.example.com", "/")
	assert.True(t, strings.HasPrefix(body, "C "), body)
	assert.Empty(t, r.Hosts("alpha"))

	// A name of a slug with no route answers 404, like the slug's own host.
	r.SetHosts("idle", []string{"idle.example.org"})
	code, _ = get(t, srv, "idle.example.org", "/")
	assert.Equal(t, http.StatusNotFound, code)
	_, ok = r.Resolve("idle.example.org")
	assert.False(t, ok)
	// Slug names the slug whether or not it is routed.
	for host, want := range map[string]string{"IDLE.example.org.": "idle", "idle.apps.test:80": "idle",
		"shop.example.com": "gamma", "stranger.example.org": "", "apps.test": ""} {
		assert.Equal(t, want, r.Slug(host), host)
	}

	// A resync replaces every slug's names.
	r.ReplaceHosts(map[string]string{"new.example.net": "alpha"})
	assert.Empty(t, r.Hosts("gamma"))
	assert.Equal(t, []string{"new.example.net"}, r.Hosts("alpha"))
	code, _ = get(t, srv, "shop.example.com", "/")
	assert.Equal(t, http.StatusNotFound, code)
	_, body = get(t, srv, "new.example.net", "/")
	assert.True(t, strings.HasPrefix(body, "B "), body)
}
