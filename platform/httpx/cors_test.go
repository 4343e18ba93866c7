package httpx_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/keelson-dev/keelson/platform/httpx"
)

func TestCORS(t *testing.T) {
	t.Parallel()
	reached := 0
	h := httpx.CORS(httpx.CORSConfig{Origin: "https://App.example.com:443/console"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached++
		w.Header().Set("X-Next-Cursor", "abc")
		w.WriteHeader(http.StatusOK)
	}))
	do := func(method, origin string, hdr map[string]string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, "/projects", nil)
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	const front = "https://app.example.com"

	rec := do("GET", front, nil)
	if rec.Header().Get("Access-Control-Allow-Origin") != front || rec.Header().Get("Access-Control-Allow-Credentials") != "true" ||
		rec.Header().Get("Access-Control-Expose-Headers") == "" || reached != 1 {
		t.Fatalf("allowed origin: %v", rec.Header())
	}
	pre := do("OPTIONS", front, map[string]string{"Access-Control-Request-Method": "PATCH", "Access-Control-Request-Headers": "authorization,content-type"})
	if pre.Code != http.StatusNoContent || pre.Header().Get("Access-Control-Allow-Origin") != front ||
		pre.Header().Get("Access-Control-Allow-Methods") == "" || pre.Header().Get("Access-Control-Allow-Headers") == "" ||
		pre.Header().Get("Access-Control-Allow-Credentials") != "true" || reached != 1 {
		t.Fatalf("preflight: %d %v (handler reached %d times)", pre.Code, pre.Header(), reached)
	}
	for _, origin := range []string{"https://evil.example.com", "http://app.example.com", "https://app.example.com.evil.com", "null"} {
		for _, rec := range []*httptest.ResponseRecorder{
			do("GET", origin, nil),
			do("OPTIONS", origin, map[string]string{"Access-Control-Request-Method": "GET"}),
		} {
			for k := range rec.Header() {
				if len(k) > 15 && k[:15] == "Access-Control-" {
					t.Fatalf("origin %s got CORS header %s: %v", origin, k, rec.Header())
				}
			}
			if rec.Header().Get("Vary") == "" {
				t.Fatalf("origin %s: no Vary", origin)
			}
		}
	}
	// A method the API does not allow cross-origin is not granted.
	if rec := do("OPTIONS", front, map[string]string{"Access-Control-Request-Method": "TRACE"}); rec.Header().Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("TRACE preflight granted: %v", rec.Header())
	}
	// Same-origin and non-browser requests pass untouched.
	if rec := do("GET", "", nil); rec.Header().Get("Access-Control-Allow-Origin") != "" || rec.Code != 200 {
		t.Fatalf("no origin: %v", rec.Header())
	}
}
