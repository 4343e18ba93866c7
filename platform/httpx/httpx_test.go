package httpx_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/httpx"
)

func TestMiddleware(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	h := httpx.Middleware(log, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/panic" {
			panic("boom: secret internals")
		}
		platform.Logger(r.Context()).Info("inside")
		w.WriteHeader(http.StatusTeapot)
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()

	req, _ := http.NewRequest("GET", srv.URL+"/ok?token=abc123", nil)
	req.Header.Set("X-Request-Id", "client-chosen-id-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTeapot || resp.Header.Get("X-Request-Id") != "client-chosen-id-1" {
		t.Fatalf("status %d, request id %q", resp.StatusCode, resp.Header.Get("X-Request-Id"))
	}
	if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Error("missing security headers")
	}
	if !strings.Contains(logs.String(), `"request_id":"client-chosen-id-1"`) || strings.Contains(logs.String(), "abc123") {
		t.Errorf("log lines should carry the request id and never the query: %s", logs.String())
	}

	resp, err = http.Get(srv.URL + "/panic")
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	body.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 500 || strings.Contains(body.String(), "secret internals") {
		t.Fatalf("panic: %d %s", resp.StatusCode, body.String())
	}
	if !strings.Contains(logs.String(), "secret internals") {
		t.Error("panic was not logged")
	}
	// A malformed client request id is replaced.
	req, _ = http.NewRequest("GET", srv.URL+"/ok", nil)
	req.Header.Set("X-Request-Id", "bad id\twith junk")
	resp, _ = http.DefaultClient.Do(req)
	resp.Body.Close()
	if got := resp.Header.Get("X-Request-Id"); got == "" || strings.Contains(got, " ") {
		t.Fatalf("request id %q", got)
	}
}
