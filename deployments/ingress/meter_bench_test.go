package ingress

import (
	"bytes"
	"io"
	"net/http"
	"testing"
)

// discardWriter is a ResponseWriter that keeps nothing.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardWriter) WriteHeader(int)             {}

// BenchmarkMeterServe is what metering adds to one request, without the
// network: the blocked-slug check, the counter lookup and the counting
// wrappers around a handler that reads a 1 KiB body and writes 4 KiB.
// BenchmarkProxy measures whole requests through a Router.
//
//	go test -run '^$' -bench BenchmarkMeterServe ./deployments/ingress/
func BenchmarkMeterServe(b *testing.B) {
	reply := bytes.Repeat([]byte("x"), 4096)
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = w.Write(reply)
	})
	body := bytes.Repeat([]byte("y"), 1024)
	m := NewMeter()
	m.Block(map[string]Block{"other": {Message: "over"}})
	for _, bc := range []struct {
		name string
		h    func(w http.ResponseWriter, r *http.Request)
	}{
		{"direct", app},
		{"metered", func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, "site", app) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			w := &discardWriter{h: http.Header{}}
			rd := bytes.NewReader(body)
			req, _ := http.NewRequest(http.MethodPost, "http://site.localhost/", nil)
			b.ReportAllocs()
			for b.Loop() {
				rd.Reset(body)
				r := *req
				r.Body = io.NopCloser(rd)
				bc.h(w, &r)
			}
		})
	}
	if m.Take()["site"].Out == 0 {
		b.Fatal("nothing counted")
	}
}
