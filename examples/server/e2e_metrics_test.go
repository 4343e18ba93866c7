package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/deployments/fleet"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

// TestMetricsE2E: with KEELSON_METRICS_ADDR set, /metrics is served on its
// own listener (never on the API's) and shows what an operator would look
// for: requests by route pattern (not by a tenant's id), an open log stream
// as 1 then 0, a waiting deployment in the queue, deployments by status,
// build durations by outcome and stored log lines growing.
func TestMetricsE2E(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, dbURL string) {
		ts := startServer(t, dbURL, func(c *Config) { c.MetricsAddr = "127.0.0.1:0" })
		if ts.MetricsURL == "" {
			t.Fatal("no metrics listener")
		}
		// The API's address does not serve metrics.
		status, body, _ := ts.do(t, "GET", "/metrics", "", nil)
		if status != http.StatusNotFound || strings.Contains(string(body), "keelson_") {
			t.Fatalf("API GET /metrics: %d %.200s", status, body)
		}

		alice := ts.signup(t, "alice@example.com")
		gate := filepath.Join(t.TempDir(), "gate")
		_, bare := newRepo(t, map[string]string{"index.html": "<h1>metered</h1>\n"})
		var p struct{ ID, Slug string }
		ts.doJSON(t, http.StatusCreated, "POST", "/projects", alice, map[string]any{
			"name": "metered", "repoUrl": "file://" + bare, "framework": "static", "port": 8080}, &p)
		ts.doJSON(t, http.StatusOK, "PATCH", "/projects/"+p.ID+"/settings", alice, map[string]any{
			"region": "local", "planName": "free", "envVars": []any{},
			"buildCommand": "echo waiting for the gate; while [ ! -f " + gate + " ]; do sleep 0.1; done"}, nil)
		for range 2 {
			ts.doJSON(t, http.StatusOK, "GET", "/projects/"+p.ID, alice, nil, nil)
		}
		missing := platform.NewID()
		if status, _, _ := ts.do(t, "GET", "/projects/"+missing, alice, nil); status != http.StatusNotFound {
			t.Fatalf("GET a missing project: %d", status)
		}
		if status, _, _ := ts.do(t, "PURGE", "/healthz", "", nil); status < 400 {
			t.Fatalf("PURGE /healthz: %d", status)
		}

		m := scrape(t, ts)
		m.want(t, 2, "keelson_http_requests_total", "route", "/projects/{id}", "method", "GET", "status_class", "2xx")
		m.want(t, 1, "keelson_http_requests_total", "route", "/projects/{id}", "method", "GET", "status_class", "4xx")
		m.want(t, 1, "keelson_http_requests_total", "route", "unmatched", "method", "GET", "status_class", "4xx")
		m.want(t, 1, "keelson_http_requests_total", "route", "unmatched", "method", "OTHER", "status_class", "4xx")
		m.want(t, 3, "keelson_http_request_duration_seconds_count", "route", "/projects/{id}", "method", "GET")
		for _, id := range []string{p.ID, missing} {
			if strings.Contains(m.text, id) {
				t.Fatalf("a label holds the id %s:\n%s", id, m.grep("keelson_http_requests_total"))
			}
		}
		for _, series := range []string{"go_goroutines", "process_resident_memory_bytes", "keelson_log_streams_open",
			"keelson_log_lines_stored_total", "keelson_deployment_queue_depth"} {
			m.want(t, -1, series)
		}
		m.want(t, 0, "keelson_build_duration_seconds_count", "outcome", "succeeded")
		m.want(t, 0, "keelson_deployments", "status", "LIVE")

		// A build waiting at its gate, with its log stream open, and a second
		// deployment of the project waiting its turn.
		var first, second struct{ DeploymentID string }
		ts.doJSON(t, http.StatusCreated, "POST", "/deployments", alice, map[string]any{"projectId": p.ID}, &first)
		stream := openLogStream(t, ts, alice, first.DeploymentID)
		stream.until(t, "ready", func(ev sseEvent) bool { return ev.Type == "ready" })
		platformtest.Eventually(t, time.Minute, "the build to wait at its gate", func() bool {
			return strings.Contains(logText(t, ts, alice, first.DeploymentID), "waiting for the gate")
		})
		ts.doJSON(t, http.StatusCreated, "POST", "/deployments", alice, map[string]any{"projectId": p.ID}, &second)
		var linesBefore float64
		platformtest.Eventually(t, 30*time.Second, "the second deployment to count as queued", func() bool {
			m = scrape(t, ts)
			linesBefore = m.value("keelson_log_lines_stored_total")
			return m.value("keelson_deployment_queue_depth") == 1
		})
		m.want(t, 1, "keelson_log_streams_open")
		m.want(t, 1, "keelson_deployments", "status", "QUEUED")
		m.want(t, 1, "keelson_deployments", "status", "BUILDING")
		if linesBefore < 2 {
			t.Fatalf("keelson_log_lines_stored_total = %v during the build, want the lines stored so far", linesBefore)
		}

		ts.doJSON(t, http.StatusOK, "POST", "/deployments/"+second.DeploymentID+"/cancel", alice, nil, nil)
		if err := os.WriteFile(gate, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if st, _ := waitDeployment(t, ts, alice, first.DeploymentID); st.Status != "LIVE" {
			t.Fatalf("deployment %s: %s", st.Status, st.ErrorMessage)
		}
		stream.until(t, "done", func(ev sseEvent) bool { return ev.Type == "done" })
		for ev := range stream.events { // the end of the body: the handler returned
			t.Fatalf("event %q after done", ev.Type)
		}

		// The queue depth is the engine's last scheduling pass, which the
		// finished run wakes asynchronously: wait for it, then read the rest.
		platformtest.Eventually(t, 30*time.Second, "the queue depth to be 0 after the cancel and the finished run", func() bool {
			m = scrape(t, ts)
			return m.value("keelson_deployment_queue_depth") == 0
		})
		m.want(t, 0, "keelson_log_streams_open")
		m.want(t, 1, "keelson_http_requests_total", "route", "/deployments/{id}/logs", "method", "GET", "status_class", "2xx")
		m.want(t, 1, "keelson_build_duration_seconds_count", "outcome", "succeeded")
		m.want(t, 0, "keelson_build_duration_seconds_count", "outcome", "failed")
		m.want(t, 1, "keelson_deployments", "status", "LIVE")
		m.want(t, 1, "keelson_deployments", "status", "CANCELLED")
		m.want(t, 0, "keelson_deployments", "status", "QUEUED")
		m.want(t, 0, "keelson_deployments", "status", "BUILDING")
		if after := m.value("keelson_log_lines_stored_total"); after <= linesBefore {
			t.Fatalf("keelson_log_lines_stored_total went from %v to %v over the rest of the build", linesBefore, after)
		}
		for _, id := range []string{first.DeploymentID, second.DeploymentID} {
			if strings.Contains(m.text, id) {
				t.Fatalf("a label holds the deployment id %s", id)
			}
		}
	})
}

// KEELSON_METRICS_ADDR is off by default, takes host:port, and is refused on
// the API's or the ingress' address.
func TestMetricsSetting(t *testing.T) {
	t.Parallel()
	cfg, err := LoadConfig(func(string) string { return "" })
	if err != nil || cfg.MetricsAddr != "" {
		t.Fatalf("default: %q %v", cfg.MetricsAddr, err)
	}
	for _, bad := range []string{"9090", "127.0.0.1", "127.0.0.1:99999", ":8080", ":8081"} {
		_, err := LoadConfig(func(k string) string {
			if k == "KEELSON_METRICS_ADDR" {
				return bad
			}
			return ""
		})
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Var != "KEELSON_METRICS_ADDR" {
			t.Errorf("%q: got %v, want an error naming KEELSON_METRICS_ADDR", bad, err)
		}
	}
	for _, good := range []string{"127.0.0.1:9090", ":9090", "10.0.0.5:9100", "[::1]:0"} {
		if cfg, err := LoadConfig(func(k string) string {
			if k == "KEELSON_METRICS_ADDR" {
				return good
			}
			return ""
		}); err != nil || cfg.MetricsAddr != good {
			t.Errorf("%q: %q %v", good, cfg.MetricsAddr, err)
		}
	}
}

// scraped is one scrape of /metrics in the text format.
type scraped struct {
	text   string
	series map[string][]sample // by metric name
}

type sample struct {
	labels map[string]string
	value  float64
}

var labelRE = regexp.MustCompile(`(\w+)="((?:[^"\\]|\\.)*)"`)

func scrape(t *testing.T, ts *testServer) scraped {
	t.Helper()
	res, err := ts.Client.Get(ts.MetricsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %d %v %.300s", res.StatusCode, err, raw)
	}
	s := scraped{text: string(raw), series: map[string][]sample{}}
	for _, line := range strings.Split(s.text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("scrape: bad line %q", line)
		}
		name, labels, _ := strings.Cut(line[:i], "{")
		smp := sample{labels: map[string]string{}, value: v}
		for _, m := range labelRE.FindAllStringSubmatch(labels, -1) {
			smp.labels[m[1]] = m[2]
		}
		s.series[name] = append(s.series[name], smp)
	}
	return s
}

// find sums the samples of name whose labels include kv (pairs); ok is false
// when none matches.
func (s scraped) find(name string, kv ...string) (sum float64, ok bool) {
next:
	for _, smp := range s.series[name] {
		for i := 0; i+1 < len(kv); i += 2 {
			if smp.labels[kv[i]] != kv[i+1] {
				continue next
			}
		}
		sum, ok = sum+smp.value, true
	}
	return sum, ok
}

func (s scraped) value(name string, kv ...string) float64 {
	v, _ := s.find(name, kv...)
	return v
}

// want fails unless a series name with labels kv exists and (want >= 0) the
// matching samples add up to want.
func (s scraped) want(t *testing.T, want float64, name string, kv ...string) {
	t.Helper()
	got, ok := s.find(name, kv...)
	if !ok || (want >= 0 && got != want) {
		t.Fatalf("%s%v = %v (present: %v), want %v; scraped:\n%s", name, kv, got, ok, want, s.grep(name))
	}
}

func (s scraped) grep(prefix string) string {
	var b strings.Builder
	for _, l := range strings.Split(s.text, "\n") {
		if strings.HasPrefix(l, prefix) {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// A scrape while the database is away still answers 200 with every other
// series; the deployments gauge is left out and the failure logged.
func TestMetricsScrapeWithoutDatabase(t *testing.T) {
	t.Parallel()
	bdb, err := db.Open(context.Background(), db.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	bdb.Close()
	m, err := newServerMetrics()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.countDeployments(fleet.Queries{DB: bdb}, nil); err != nil {
		t.Fatal(err)
	}
	logs := &platformtest.SyncBuffer{}
	srv := httptest.NewServer(m.handler(slog.New(slog.NewJSONHandler(logs, nil))))
	defer srv.Close()
	ts := &testServer{Client: srv.Client(), MetricsURL: srv.URL}
	s := scrape(t, ts)
	s.want(t, -1, "go_goroutines")
	s.want(t, 0, "keelson_log_streams_open")
	if _, ok := s.find("keelson_deployments"); ok {
		t.Fatalf("keelson_deployments served without a database:\n%s", s.grep("keelson_deployments"))
	}
	if !strings.Contains(logs.String(), "count deployments") {
		t.Fatalf("the failed count was not logged: %s", logs.String())
	}
}
