package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkInstrument is the cost request metrics add to one request: the
// route lookup, the status capture and a counter and histogram update, over
// a handler that does nothing (compare the two sub-benchmarks).
func BenchmarkInstrument(b *testing.B) {
	mux := http.NewServeMux()
	for _, p := range []string{"GET /projects", "GET /projects/{id}", "PATCH /projects/{id}/settings",
		"GET /deployments/{id}", "GET /deployments/{id}/logs", "POST /deployments", "GET /healthz"} {
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	}
	m, err := newServerMetrics()
	if err != nil {
		b.Fatal(err)
	}
	req := httptest.NewRequest("GET", "/deployments/0b7f2a8e-5d4c-4c1e-9a77-1f1f6e0c2d3b/logs", nil)
	for _, c := range []struct {
		name string
		h    http.Handler
	}{{"bare", mux}, {"instrumented", m.instrument(mux, mux)}} {
		b.Run(c.name, func(b *testing.B) {
			w := httptest.NewRecorder()
			b.ReportAllocs()
			for b.Loop() {
				c.h.ServeHTTP(w, req)
			}
		})
	}
}
