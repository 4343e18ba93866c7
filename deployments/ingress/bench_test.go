package ingress_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"

	"github.com/keelson-dev/keelson/deployments/ingress"
)

// BenchmarkProxy is the ingress hot path on loopback: a 1 KiB POST answered
// with 4 KiB, through a Router without a meter (the path before metering)
// and with one (counting both bodies, the blocked-slug check), and a GET
// answered with 5 bytes (what examples/bench's ingress rows send), metered.
// Compare them in one run:
//
//	go test -run '^$' -bench BenchmarkProxy -benchtime=20000x ./deployments/ingress/
func BenchmarkProxy(b *testing.B) {
	reply := bytes.Repeat([]byte("x"), 4096)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/small" {
			_, _ = io.WriteString(w, "hello")
			return
		}
		_, _ = w.Write(reply)
	}))
	defer up.Close()
	body := bytes.Repeat([]byte("y"), 1024)
	for _, bc := range []struct {
		name  string
		meter *ingress.Meter
		get   bool
	}{{"plain", nil, false}, {"metered", ingress.NewMeter(), false}, {"get", ingress.NewMeter(), true}} {
		b.Run(bc.name, func(b *testing.B) {
			r, err := ingress.New(ingress.Config{Meter: bc.meter})
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			if err := r.Set("site", "d1", upstream(up)); err != nil {
				b.Fatal(err)
			}
			srv := httptest.NewServer(r)
			defer srv.Close()
			client := srv.Client()
			if !bc.get {
				b.SetBytes(int64(len(body) + len(reply)))
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/", bytes.NewReader(body))
				if bc.get {
					req, _ = http.NewRequest(http.MethodGet, srv.URL+"/small", nil)
				}
				req.Host = "site.localhost"
				res, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusOK {
					b.Fatalf("status %d", res.StatusCode)
				}
			}
			b.StopTimer()
			if bc.meter != nil {
				if got := bc.meter.Take()["site"]; (got.In == 0 && !bc.get) || got.Out == 0 {
					b.Fatalf("nothing counted: %+v", got)
				}
			}
		})
	}
}

// BenchmarkRemoteTable is the cost of the remote route table at 10,000
// routes (the apps other hosts run): replacing it (what each ingress does
// every second, after its query) and the memory the table holds.
//
//	go test -run '^$' -bench BenchmarkRemoteTable -benchmem ./deployments/ingress/
func BenchmarkRemoteTable(b *testing.B) {
	const n = 10000
	routes := make(map[string]string, n)
	for i := range n {
		routes[fmt.Sprintf("app-%05d", i)] = fmt.Sprintf("10.0.%d.%d:8081", i/250, i%250)
	}
	r, err := ingress.New(ingress.Config{ForwardKey: []byte("k")})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	b.Run("replace", func(b *testing.B) {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for b.Loop() {
			if err := r.SetRemote(routes); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/1024, "KiB-held")
	})
}
