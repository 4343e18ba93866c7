package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
)

// KEELSON_PPROF_ADDR is off by default, only a loopback address is taken,
// and profiles are served there (never on the API) until stopped.
func TestPprofSetting(t *testing.T) {
	t.Parallel()
	cfg, err := LoadConfig(func(string) string { return "" })
	if err != nil || cfg.PprofAddr != "" {
		t.Fatalf("default: %q %v", cfg.PprofAddr, err)
	}
	for _, bad := range []string{":6060", "0.0.0.0:6060", "10.1.2.3:6060", "example.com:6060", "127.0.0.1", "127.0.0.1:99999"} {
		_, err := LoadConfig(func(k string) string {
			if k == "KEELSON_PPROF_ADDR" {
				return bad
			}
			return ""
		})
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Var != "KEELSON_PPROF_ADDR" || !strings.Contains(ce.Error(), "loopback") {
			t.Errorf("%q: got %v, want an error naming KEELSON_PPROF_ADDR", bad, err)
		}
	}
	for _, good := range []string{"127.0.0.1:0", "[::1]:6060", "localhost:6060"} {
		if cfg, err := LoadConfig(func(k string) string {
			if k == "KEELSON_PPROF_ADDR" {
				return good
			}
			return ""
		}); err != nil || cfg.PprofAddr != good {
			t.Errorf("%q: %q %v", good, cfg.PprofAddr, err)
		}
	}
	l, err := listenPprof("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop := servePprof(context.Background(), l, slog.New(slog.DiscardHandler))
	res, err := http.Get("http://" + l.Addr().String() + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(body), "goroutine profile:") {
		t.Fatalf("pprof: %d %.200s", res.StatusCode, body)
	}
	stop()
	// The listener is closed: closing it again says so. (Dialing the port
	// proves nothing: other parallel tests listen on 127.0.0.1:0 and the
	// kernel may hand them the port just freed.)
	if err := l.Close(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("pprof listener still open after stop: Close() = %v", err)
	}
	// And whatever answers on that address now is not pprof.
	if res, err := http.Get("http://" + l.Addr().String() + "/debug/pprof/goroutine?debug=1"); err == nil {
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if strings.Contains(string(body), "goroutine profile:") {
			t.Fatal("pprof still serving after stop")
		}
	}
}
