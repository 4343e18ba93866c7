package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// chunked frames body as an HTTP/1.1 chunked body, cutting it into chunks
// of at most size bytes (wherever that falls, mid-line included).
func chunked(body string, size int) string {
	var b strings.Builder
	for len(body) > 0 {
		n := min(size, len(body))
		fmt.Fprintf(&b, "%x\r\n%s\r\n", n, body[:n])
		body = body[n:]
	}
	return b.String()
}

// sseBody is a stream's body as the server sends it: ready, lines
// written at sent, a ping between them.
func sseBody(lines int, sent time.Time) string {
	var b strings.Builder
	b.WriteString("data: {\"type\":\"ready\"}\n\n")
	for i := range lines {
		fmt.Fprintf(&b, "id: %d\ndata: {\"type\":\"log\",\"cursor\":%d,\"message\":\"bench-line %d %d\",\"stream\":\"build\"}\n\n",
			i+1, i+1, i, sent.UnixNano())
		if i == 1 {
			b.WriteString(": ping\n\n")
		}
	}
	return b.String()
}

// TestSubscriberFeed decodes a chunked SSE body fed in pieces of every size
// (chunk sizes and read boundaries anywhere): every line is counted once,
// with its delay, and ready is seen.
func TestSubscriberFeed(t *testing.T) {
	sent := time.Now().Add(-time.Second)
	const lines = 3
	body := sseBody(lines, sent)
	for _, chunk := range []int{1, 7, 64, len(body)} {
		raw := chunked(body, chunk)
		for piece := 1; piece <= len(raw); piece++ {
			ready := 0
			s := &subscriber{lines: lines, res: &fanoutResult{}, ready: func() { ready++ }}
			now := sent.Add(time.Second)
			for b := raw; len(b) > 0; {
				n := min(piece, len(b))
				s.feed([]byte(b[:n]), now)
				b = b[n:]
			}
			if s.err != nil || !s.end || s.got != lines || ready != 1 {
				t.Fatalf("chunk %d, piece %d: err %v, end %v, got %d, ready %d", chunk, piece, s.err, s.end, s.got, ready)
			}
			for _, d := range s.res.delays {
				if d != time.Second {
					t.Fatalf("chunk %d, piece %d: delay %v, want 1s", chunk, piece, d)
				}
			}
		}
	}
}

// TestSubscriberEnds: a done event or the body's end before every line
// ends the subscriber with an error.
func TestSubscriberEnds(t *testing.T) {
	for name, tail := range map[string]string{
		"done":       chunked("data: {\"type\":\"done\"}\n\n", 100),
		"last chunk": "0\r\n\r\n",
	} {
		s := &subscriber{lines: 5, res: &fanoutResult{}, ready: func() {}}
		s.feed([]byte(chunked(sseBody(2, time.Now()), 50)+tail), time.Now())
		if !s.end || s.err == nil || s.got != 2 {
			t.Errorf("%s: end %v, err %v, got %d; want an error after 2 lines", name, s.end, s.err, s.got)
		}
	}
}

// TestEpollSubscribers reads real streams through an epoll loop: a
// net/http server writes each line in its own flush (a chunk each) after
// the ready event.
func TestEpollSubscribers(t *testing.T) {
	const lines, subs = 5, 20
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		body := sseBody(lines, time.Now())
		for _, ev := range strings.SplitAfter(body, "\n\n") {
			_, _ = w.Write([]byte(ev))
			w.(http.Flusher).Flush()
		}
	}))
	defer srv.Close()
	var wg sync.WaitGroup
	l, err := newEpollLoop(&wg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	go l.run(ctx)
	results := make([]fanoutResult, subs)
	for i := range subs {
		wg.Add(1)
		s := &subscriber{lines: lines, res: &results[i], ready: func() {}}
		if err := openSubscriber(ctx, i, srv.URL+"/logs", "tok", s); err != nil {
			t.Fatal(err)
		}
		if err := l.watch(int32(i), s); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	for i, r := range results {
		if r.err != nil || len(r.delays) != lines {
			t.Errorf("subscriber %d: err %v, %d lines, want %d", i, r.err, len(r.delays), lines)
		}
	}
}
