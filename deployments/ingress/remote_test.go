package ingress_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keelson-dev/keelson/deployments/ingress"
)

// twoHosts are two ingresses of one installation (the same forward key):
// the app "shop" runs behind B; A knows B serves it.
func twoHosts(t *testing.T) (a, b *ingress.Router, sa, sb *httptest.Server) {
	t.Helper()
	key := []byte("the installation's secret")
	a, sa = newRouter(t, ingress.Config{ForwardKey: key})
	b, sb = newRouter(t, ingress.Config{ForwardKey: key})
	require.NoError(t, b.Set("shop", "d1", upstream(app(t, "shop-app"))))
	require.NoError(t, a.SetRemote(map[string]string{"shop": upstream(sb)}))
	return a, b, sa, sb
}

// An app served by another host answers through this ingress too, with the
// public host and the client's address as if it were local, and the mark
// between the ingresses never reaches the app.
func TestRemoteRouteForwardsToTheServingHost(t *testing.T) {
	_, _, sa, sb := twoHosts(t)
	code, body := get(t, sa, "shop.localhost", "/cart?x=1")
	require.Equal(t, http.StatusOK, code, body)
	assert.True(t, strings.HasPrefix(body, "shop-app host=shop.localhost xff=127.0.0.1 xfproto=http xfhost=shop.localhost path=/cart?x=1"), body)

	// Directly at B, the same answer.
	code, direct := get(t, sb, "shop.localhost", "/cart?x=1")
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, direct, body)

	// An unknown slug is still 404 on A, and A serves its own apps first.
	code, _ = get(t, sa, "nope.localhost", "/")
	assert.Equal(t, http.StatusNotFound, code)
}

// A client cannot pass for an ingress: a made-up mark is not trusted, so
// its X-Forwarded-For is replaced by its own address.
func TestRemoteMarkCannotBeForged(t *testing.T) {
	_, _, _, sb := twoHosts(t)
	code, body := get(t, sb, "shop.localhost", "/", "Keelson-Ingress-Forward", "00ff", "X-Forwarded-For", "6.6.6.6")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "xff=127.0.0.1 ")
	assert.NotContains(t, body, "6.6.6.6")
}

// Two ingresses that each think the other serves a slug forward once, not
// for ever: the second answers 404.
func TestRemoteForwardsOneHopOnly(t *testing.T) {
	key := []byte("k")
	a, sa := newRouter(t, ingress.Config{ForwardKey: key})
	b, sb := newRouter(t, ingress.Config{ForwardKey: key})
	require.NoError(t, a.SetRemote(map[string]string{"ghost": upstream(sb)}))
	require.NoError(t, b.SetRemote(map[string]string{"ghost": upstream(sa)}))
	code, body := get(t, sa, "ghost.localhost", "/")
	assert.Equal(t, http.StatusNotFound, code, body)
}

// Without the installation's key nothing is forwarded; a route to the
// ingress's own address is ignored; a removed remote route is gone.
func TestRemoteTableRules(t *testing.T) {
	plain, _ := newRouter(t, ingress.Config{})
	assert.Error(t, plain.SetRemote(map[string]string{"shop": "10.0.0.1:80"}))
	require.NoError(t, plain.SetRemote(nil))

	self, ss := newRouter(t, ingress.Config{ForwardKey: []byte("k"), Self: "me:8081"})
	require.NoError(t, self.SetRemote(map[string]string{"shop": "me:8081"}))
	code, _ := get(t, ss, "shop.localhost", "/")
	assert.Equal(t, http.StatusNotFound, code, "no route to itself")

	a, _, sa, _ := twoHosts(t)
	require.NoError(t, a.SetRemote(map[string]string{}))
	code, _ = get(t, sa, "shop.localhost", "/")
	assert.Equal(t, http.StatusNotFound, code)
}

// A host that went away answers 502 naming the host, not a hang.
func TestRemoteHostDown(t *testing.T) {
	a, _, sa, sb := twoHosts(t)
	addr := upstream(sb)
	sb.Close()
	require.NoError(t, a.SetRemote(map[string]string{"shop": addr}))
	code, body := get(t, sa, "shop.localhost", "/")
	assert.Equal(t, http.StatusBadGateway, code)
	assert.Contains(t, body, `the host serving "shop.localhost" is not answering`)
}

// Bytes are counted once, by the ingress of the host that serves the app,
// not again by the one that forwarded them.
func TestRemoteBytesCountedOnce(t *testing.T) {
	key := []byte("k")
	ma, mb := ingress.NewMeter(), ingress.NewMeter()
	a, sa := newRouter(t, ingress.Config{ForwardKey: key, Meter: ma})
	b, sb := newRouter(t, ingress.Config{ForwardKey: key, Meter: mb})
	require.NoError(t, b.Set("shop", "d1", upstream(app(t, "shop-app"))))
	require.NoError(t, a.SetRemote(map[string]string{"shop": upstream(sb)}))
	code, body := get(t, sa, "shop.localhost", "/")
	require.Equal(t, http.StatusOK, code)
	assert.Empty(t, ma.Take(), "the forwarding ingress counts nothing")
	got := mb.Take()["shop"]
	assert.Equal(t, int64(len(body)), got.Out, "the serving ingress counts the answer")
}

// Served: a host is served when its slug (apps domain or custom hostname)
// is routed here or on another host; a made-up host is not.
func TestServed(t *testing.T) {
	t.Parallel()
	r, err := ingress.New(ingress.Config{AppsDomain: "apps.test", ForwardKey: []byte("k")})
	require.NoError(t, err)
	require.NoError(t, r.Set("here", "d1", "127.0.0.1:1"))
	require.NoError(t, r.SetRemote(map[string]string{"there": "10.0.0.2:8081"}))
	r.SetHosts("here", []string{"www.example.org"})
	r.SetHosts("gone", []string{"old.example.org"})
	for host, want := range map[string]bool{
		"here.apps.test": true, "HERE.apps.test.:80": true, "www.example.org": true, "there.apps.test": true,
		"made-up.apps.test": false, "old.example.org": false, "example.org": false, "": false,
	} {
		assert.Equal(t, want, r.Served(host), host)
	}
}
