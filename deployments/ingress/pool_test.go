package ingress_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keelson-dev/keelson/deployments/ingress"
)

// Many clients at once on one app reuse the ingress's connections to it:
// 512 keep-alive clients sending 10 requests each open at most about one
// upstream connection per client, not one per request (the pool kept 64
// idle connections per app, so past 64 clients it closed and opened them
// all the time).
func TestUpstreamConnectionsAreReused(t *testing.T) {
	const clients, each = 512, 10
	var opened atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	up.Start()
	defer up.Close()
	r, srv := newRouter(t, ingress.Config{})
	require.NoError(t, r.Set("busy", "d1", upstream(up)))
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients}}
	defer client.CloseIdleConnections()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range clients {
		wg.Go(func() {
			for range each {
				req, _ := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
				req.Host = "busy.localhost"
				res, err := client.Do(req)
				if err != nil {
					failed.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusOK {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	assert.Zero(t, failed.Load())
	assert.LessOrEqual(t, opened.Load(), int64(2*clients), "upstream connections opened for %d requests", clients*each)
	t.Logf("%d upstream connections for %d requests from %d clients", opened.Load(), clients*each, clients)
}
