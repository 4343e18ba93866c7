package httpx_test

import (
	"bufio"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform/httpx"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

// Observe reports each request's status (a recovered panic as its 500, no
// write as 200) and keeps a stream's flushes reaching the client.
func TestObserve(t *testing.T) {
	t.Parallel()
	type seen struct {
		path   string
		status int
	}
	var mu sync.Mutex
	var got []seen
	h := httpx.Observe(httpx.Middleware(slog.New(slog.DiscardHandler), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/panic":
			panic("boom")
		case "/teapot":
			w.WriteHeader(http.StatusTeapot)
		case "/stream":
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write([]byte("data: 1\n\n"))
			if err := http.NewResponseController(w).Flush(); err != nil {
				t.Errorf("flush through the observer: %v", err)
			}
			<-r.Context().Done()
		}
	})), func(r *http.Request, status int, took time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		if took < 0 {
			t.Errorf("%s took %s", r.URL.Path, took)
		}
		got = append(got, seen{r.URL.Path, status})
	})
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, p := range []string{"/nothing", "/teapot", "/panic"} {
		res, err := http.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	res, err := http.Get(srv.URL + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(res.Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "data: 1") {
		t.Fatalf("stream: %q %v", line, err)
	}
	res.Body.Close() // the handler's context ends; then it is observed
	want := []seen{{"/nothing", 200}, {"/teapot", 418}, {"/panic", 500}, {"/stream", 200}}
	platformtest.Eventually(t, 10*time.Second, "the closed stream to be observed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == len(want)
	})
	mu.Lock()
	defer mu.Unlock()
	if len(got) != len(want) {
		t.Fatalf("observed %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("request %d: observed %v, want %v", i, got[i], want[i])
		}
	}
}
