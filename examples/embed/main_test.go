package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
)

// The embedding example really serves: a user registers and logs in through
// the embedded auth module, reads the seeded plans, and calls the host's own
// route with the token.
func TestEmbeddedModules(t *testing.T) {
	h, done, err := newServer(context.Background(), Options{
		DataDir:   t.TempDir(),
		JWTSecret: "test-secret-test-secret-test-secret-00",
		SealKey:   "test-seal-test-seal-test-seal-test-00",
		Log:       slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	srv := httptest.NewServer(h)
	defer srv.Close()

	call := func(method, path, token string, body any) (int, []byte) {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, srv.URL+path, rd)
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, out
	}
	if st, body := call("POST", "/auth/register", "", map[string]string{
		"email": "host@example.com", "password": "secret-pw", "confirmPassword": "secret-pw",
	}); st != 201 {
		t.Fatalf("register: %d %s", st, body)
	}
	st, body := call("POST", "/auth/login", "", map[string]string{"email": "host@example.com", "password": "secret-pw"})
	var tok struct{ AccessToken string }
	if st != 200 || json.Unmarshal(body, &tok) != nil || tok.AccessToken == "" {
		t.Fatalf("login: %d %s", st, body)
	}
	if st, body := call("GET", "/hello", "", nil); st != 401 {
		t.Fatalf("own route without token: %d %s", st, body)
	}
	st, body = call("GET", "/hello", tok.AccessToken, nil)
	if st != 200 || !bytes.Contains(body, []byte("hello, host@example.com")) {
		t.Fatalf("own route: %d %s", st, body)
	}
	st, body = call("GET", "/plans", "", nil)
	var plans []map[string]any
	if st != 200 || json.Unmarshal(body, &plans) != nil || len(plans) < 4 {
		t.Fatalf("plans: %d %s", st, body)
	}
}
