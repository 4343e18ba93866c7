package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/fleet"
	"github.com/keelson-dev/keelson/deployments/ingress/certs"
	"github.com/keelson-dev/keelson/platform/httpx"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// serverMetrics is the reference server's Prometheus instrumentation
// (KEELSON_METRICS_ADDR; README "Metrics"). It owns its registry (never
// Prometheus' global default one) and implements deployments.Metrics: the
// modules import no metrics library, they report through that interface.
//
// Labels are bounded: a request is labelled with its route's pattern
// ("/projects/{id}", never the path a tenant chose), its method (unknown
// methods are OTHER) and its status class (2xx).
type serverMetrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	builds   *prometheus.HistogramVec
	lines    prometheus.Counter
	streams  prometheus.Gauge
	// The ingress' bandwidth (deployments/bandwidth).
	bwBytes   *prometheus.CounterVec
	bwRefused prometheus.Gauge
	bwFailed  prometheus.Counter
}

var _ deployments.Metrics = (*serverMetrics)(nil)

func newServerMetrics() (*serverMetrics, error) {
	m := &serverMetrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "keelson_http_requests_total",
			Help: "API requests answered, by route pattern, method and status class.",
		}, []string{"route", "method", "status_class"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "keelson_http_request_duration_seconds",
			Help:    "Time to answer an API request (a log stream counts until it ends), by route pattern, method and status class.",
			Buckets: prometheus.DefBuckets,
		}, []string{"route", "method", "status_class"}),
		builds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "keelson_build_duration_seconds",
			Help:    "Time a deployment's build (clone and build) took, by outcome: succeeded, failed or cancelled.",
			Buckets: []float64{1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600},
		}, []string{"outcome"}),
		lines: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "keelson_log_lines_stored_total",
			Help: "Deployment log lines this process stored.",
		}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "keelson_log_streams_open",
			Help: "Deployment log streams (SSE) this process is serving now.",
		}),
		bwBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "keelson_ingress_bytes_total",
			Help: "Bytes this process's ingress carried for projects and stored in their monthly bandwidth, by direction (in: requests, out: responses).",
		}, []string{"direction"}),
		bwRefused: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "keelson_bandwidth_refused_projects",
			Help: "Projects this process's ingress answers 429 for, past their plan's monthly bandwidth.",
		}),
		bwFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "keelson_bandwidth_flush_failures_total",
			Help: "Flushes of the ingress' byte counts that stored nothing (the counts are kept for the next one).",
		}),
	}
	m.bwBytes.WithLabelValues("in")
	m.bwBytes.WithLabelValues("out")
	// Every outcome is present from the start, so a rate() over a
	// never-failed build is 0, not absent.
	for _, o := range []deployments.BuildOutcome{deployments.BuildSucceeded, deployments.BuildFailed, deployments.BuildCancelled} {
		m.builds.WithLabelValues(string(o))
	}
	err := m.register(m.requests, m.duration, m.builds, m.lines, m.streams, m.bwBytes, m.bwRefused, m.bwFailed,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m, err
}

func (m *serverMetrics) register(cs ...prometheus.Collector) error {
	var errs []error
	for _, c := range cs {
		if err := m.reg.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (m *serverMetrics) BuildFinished(outcome deployments.BuildOutcome, took time.Duration) {
	m.builds.WithLabelValues(string(outcome)).Observe(took.Seconds())
}

func (m *serverMetrics) LogLinesStored(n int) { m.lines.Add(float64(n)) }

// BandwidthFlushed, BandwidthRefused and BandwidthFlushFailed implement bandwidth.Metrics.
func (m *serverMetrics) BandwidthFlushed(in, out int64) {
	m.bwBytes.WithLabelValues("in").Add(float64(in))
	m.bwBytes.WithLabelValues("out").Add(float64(out))
}
func (m *serverMetrics) BandwidthRefused(projects int) { m.bwRefused.Set(float64(projects)) }
func (m *serverMetrics) BandwidthFlushFailed()         { m.bwFailed.Inc() }
func (m *serverMetrics) LogStreamOpened()              { m.streams.Inc() }
func (m *serverMetrics) LogStreamClosed()              { m.streams.Dec() }

// instrument counts and times every request h answers, labelled with the
// pattern of mux's route for it ("unmatched" when none: a 404, a 405).
func (m *serverMetrics) instrument(mux *http.ServeMux, h http.Handler) http.Handler {
	return httpx.Observe(h, func(r *http.Request, status int, took time.Duration) {
		route := "unmatched"
		if _, pattern := mux.Handler(r); pattern != "" {
			// "GET /projects/{id}": the method is a label of its own.
			if _, path, ok := strings.Cut(pattern, " "); ok {
				pattern = path
			}
			route = pattern
		}
		labels := []string{route, methodLabel(r.Method), strconv.Itoa(status/100) + "xx"}
		m.requests.WithLabelValues(labels...).Inc()
		m.duration.WithLabelValues(labels...).Observe(took.Seconds())
	})
}

// methodLabel bounds the method label: a client may send any token as a
// method.
func methodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions:
		return method
	}
	return "OTHER"
}

// countDeployments adds keelson_deployments, read from the database at each
// scrape (one grouped query), and, with the local engine, its queue depth.
func (m *serverMetrics) countDeployments(store fleet.Queries, queue interface{ QueueDepth() int }) error {
	err := m.reg.Register(&deploymentsCollector{store: store, desc: prometheus.NewDesc("keelson_deployments",
		"Deployments in each status (all of the database's, the same on every process: aggregate with max, not sum).",
		[]string{"status"}, nil)})
	if err != nil || queue == nil {
		return err
	}
	return m.reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "keelson_deployment_queue_depth",
		Help: "QUEUED deployments waiting in the local engine for their turn (their project's, their owner's share or a free build slot).",
	}, func() float64 { return float64(queue.QueueDepth()) }))
}

// countCertificates exposes the ingress's certificate figures (HTTPS on).
func (m *serverMetrics) countCertificates(stats func() certs.Stats, held func() (int, time.Time)) error {
	return m.register(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "keelson_tls_certificates_held",
			Help: "Valid certificates this ingress serves from memory (those of the hosts it served over HTTPS, and the static one).",
		}, func() float64 { n, _ := held(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "keelson_tls_certificate_earliest_expiry_timestamp_seconds",
			Help: "When the first of those expires (Unix time; NaN when none): alert when it comes within days, a renewal keeps failing.",
		}, func() float64 {
			if _, t := held(); !t.IsZero() {
				return float64(t.Unix())
			}
			return math.NaN()
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "keelson_tls_certificates_obtained_total",
			Help: "Certificates (and renewals) this ingress obtained from the ACME CA.",
		}, func() float64 { return float64(stats().Obtained) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "keelson_tls_certificate_failures_total",
			Help: "Certificate orders (and renewals) this ingress gave up on.",
		}, func() float64 { return float64(stats().Failed) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "keelson_tls_handshakes_refused_total",
			Help: "TLS handshakes for a host that is not served (or past the rate limits): no certificate was sought.",
		}, func() float64 { return float64(stats().Refused) }))
}

// deploymentsCollector counts deployments by status when scraped, so the
// figure is exact whichever process changed a deployment.
type deploymentsCollector struct {
	store fleet.Queries
	desc  *prometheus.Desc
}

func (c *deploymentsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *deploymentsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	counts, err := c.store.CountByStatus(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, fmt.Errorf("count deployments: %w", err))
		return
	}
	for _, s := range deployments.Statuses() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(counts[s]), string(s))
	}
}

// handler serves the registry in Prometheus' text (or protobuf) format. A
// collector that fails (the database is away) is logged and left out; the
// rest is served.
func (m *serverMetrics) handler(log *slog.Logger) http.Handler {
	return promhttp.InstrumentMetricHandler(m.reg, promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog:            promLog{log},
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		Timeout:             20 * time.Second,
	}))
}

type promLog struct{ log *slog.Logger }

func (l promLog) Println(v ...any) { l.log.Warn("metrics", "err", fmt.Sprint(v...)) }

// listenMetrics listens on addr (KEELSON_METRICS_ADDR).
func listenMetrics(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, &ConfigError{"KEELSON_METRICS_ADDR", err.Error()}
	}
	return l, nil
}

// serveMetrics serves the app's /metrics on l, apart from the API, until stop.
func serveMetrics(ctx context.Context, l net.Listener, h http.Handler, log *slog.Logger) (stop func()) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	return serveAside(ctx, l, mux, "metrics", log)
}
