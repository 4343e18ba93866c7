package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// listenPprof listens on addr (KEELSON_PPROF_ADDR, a loopback address).
func listenPprof(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, &ConfigError{"KEELSON_PPROF_ADDR", err.Error()}
	}
	return l, nil
}

// servePprof serves net/http/pprof on l with its own mux and server, apart
// from the API, until stop.
func servePprof(ctx context.Context, l net.Listener, log *slog.Logger) (stop func()) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return serveAside(ctx, l, mux, "pprof", log)
}

// serveAside serves h on l with its own server, apart from the API (pprof,
// metrics), until stop.
func serveAside(ctx context.Context, l net.Listener, h http.Handler, name string, log *slog.Logger) (stop func()) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn(name+" server", "err", err)
		}
	}()
	log.Info(name+" listening", "addr", l.Addr().String())
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if srv.Shutdown(sctx) != nil {
			_ = srv.Close() // a long request (a profile) still running
		}
		<-done
	}
}
