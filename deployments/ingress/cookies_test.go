package ingress_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keelson-dev/keelson/deployments/ingress"
)

// An app cannot set a cookie for every other tenant's app: a Domain of the
// apps domain or above is removed (the cookie stays, host-only), on the
// direct path and on the proxy's (an upgrade-capable request takes the
// latter); its own host's, or another zone's, stays as written.
func TestAppCookiesStayWithTheApp(t *testing.T) {
	t.Parallel()
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, c := range []string{
			"sid=1; Path=/; Domain=apps.example.net; HttpOnly",
			"all=2; domain=.APPS.example.net.",
			"parent=3; Secure; Domain=example.net",
			"own=4; Domain=shop.apps.example.net",
			"zone=5; Domain=shop.example.org; SameSite=Lax",
			"plain=6; Path=/",
		} {
			w.Header().Add("Set-Cookie", c)
		}
	}))
	t.Cleanup(app.Close)
	r, srv := newRouter(t, ingress.Config{AppsDomain: "apps.example.net"})
	require.NoError(t, r.Set("shop", "d1", upstream(app)))
	want := []string{
		"sid=1; Path=/; HttpOnly",
		"all=2",
		"parent=3; Secure",
		"own=4; Domain=shop.apps.example.net",
		"zone=5; Domain=shop.example.org; SameSite=Lax",
		"plain=6; Path=/",
	}
	for _, upgrade := range []bool{false, true} {
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
		require.NoError(t, err)
		req.Host = "shop.apps.example.net"
		if upgrade {
			req.Header.Set("Upgrade", "websocket")
			req.Header.Set("Connection", "Upgrade")
		}
		res, err := srv.Client().Do(req)
		require.NoError(t, err)
		res.Body.Close()
		assert.Equal(t, want, res.Header.Values("Set-Cookie"), "upgrade=%v", upgrade)
	}
}
