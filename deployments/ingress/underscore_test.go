package ingress_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keelson-dev/keelson/deployments/ingress"
)

// A client's X_Forwarded_For (or X-Forwarded_Proto, ...) never reaches the
// app: servers that name headers CGI-style (HTTP_X_FORWARDED_FOR: WSGI,
// Rack) read it as the X-Forwarded-For the ingress set, so a client could
// pass for any address or for HTTPS. Both paths: the direct one (a GET) and
// the ReverseProxy (a chunked upload).
func TestUnderscoreSpellingsOfForwardedHeadersAreDropped(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		var ks []string
		for k, v := range r.Header {
			if strings.Contains(strings.ToLower(k), "forward") || k == "X_app" {
				ks = append(ks, k+"="+strings.Join(v, ","))
			}
		}
		sort.Strings(ks)
		_, _ = io.WriteString(w, strings.Join(ks, " "))
	}))
	defer up.Close()
	r, srv := newRouter(t, ingress.Config{})
	require.NoError(t, r.Set("site", "d1", upstream(up)))
	want := "X-Forwarded-For=127.0.0.1 X-Forwarded-Host=site.localhost X-Forwarded-Proto=http X_app=kept"
	for _, body := range []io.Reader{nil, io.MultiReader(strings.NewReader("chunked"))} {
		method := http.MethodGet
		if body != nil {
			method = http.MethodPost
		}
		req, err := http.NewRequest(method, srv.URL+"/", body)
		require.NoError(t, err)
		req.Host = "site.localhost"
		req.Header["X_Forwarded_For"] = []string{"6.6.6.6"}
		req.Header["X-Forwarded_Proto"] = []string{"https"}
		req.Header["x_forwarded_host"] = []string{"bank.example"}
		req.Header["X_App"] = []string{"kept"}
		res, err := srv.Client().Do(req)
		require.NoError(t, err)
		got, _ := io.ReadAll(res.Body)
		res.Body.Close()
		assert.Equal(t, want, string(got), method)
	}
}
