package httpx_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform/httpx"
)

// TestLimitBodies: a declared length over the route's maximum is 413 before
// a byte is read; bodies share the budget, so while one holds it all another
// waits, and is answered 503 + Retry-After past Wait; a chunked body is cut
// at the maximum; requests without a body never wait.
func TestLimitBodies(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	var inside atomic.Int32
	h := httpx.LimitBodies(httpx.BodyBudget{Bytes: 1000, Factor: 2, Wait: 300 * time.Millisecond,
		MaxBytes: func(r *http.Request) int64 { return 600 }},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			inside.Add(1)
			defer inside.Add(-1)
			if r.URL.Path == "/hold" {
				<-hold
			}
			b, err := io.ReadAll(r.Body)
			if err != nil {
				w.WriteHeader(http.StatusRequestEntityTooLarge)
				return
			}
			_ = b
		}))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	post := func(path string, body io.Reader, n int64) (*http.Response, string) {
		req, _ := http.NewRequest("POST", srv.URL+path, body)
		req.ContentLength = n
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	if resp, body := post("/", strings.NewReader(strings.Repeat("x", 700)), 700); resp.StatusCode != 413 || !strings.Contains(body, "more than this route accepts (600 bytes)") {
		t.Fatalf("over the maximum: %d %s", resp.StatusCode, body)
	}
	// 500 bytes cost the whole budget (2 x 500 = 1000): the next body waits.
	done := make(chan int)
	go func() {
		resp, _ := post("/hold", strings.NewReader(strings.Repeat("x", 500)), 500)
		done <- resp.StatusCode
	}()
	deadline := time.Now().Add(10 * time.Second)
	for inside.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	resp, body := post("/", strings.NewReader("x"), 1)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "too many large request bodies") {
		t.Fatalf("while the budget is held: %d %s", resp.StatusCode, body)
	}
	// A GET passes at once.
	if r, err := http.Get(srv.URL + "/"); err != nil || r.StatusCode != 200 {
		t.Fatalf("GET while the budget is held: %v %v", err, r)
	}
	close(hold)
	if st := <-done; st != 200 {
		t.Fatalf("the holder: %d", st)
	}
	if resp, _ := post("/", strings.NewReader("x"), 1); resp.StatusCode != 200 {
		t.Fatalf("after release: %d", resp.StatusCode)
	}
	// A chunked body is cut at the maximum.
	if resp, _ := post("/", io.LimitReader(strings.NewReader(strings.Repeat("x", 2000)), 2000), -1); resp.StatusCode != 413 {
		t.Fatalf("chunked over the maximum: %d", resp.StatusCode)
	}
}
