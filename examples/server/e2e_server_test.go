package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
)

func TestHealthAndOpenAPI(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, dbURL string) {
		ts := startServer(t, dbURL, nil)
		var h struct{ Status string }
		ts.doJSON(t, http.StatusOK, "GET", "/healthz", "", nil, &h)
		if h.Status != "ok" {
			t.Fatalf("healthz: %+v", h)
		}
		ts.doJSON(t, http.StatusOK, "GET", "/readyz", "", nil, &h)

		var doc struct {
			OpenAPI string                    `json:"openapi"`
			Paths   map[string]map[string]any `json:"paths"`
		}
		ts.doJSON(t, http.StatusOK, "GET", "/openapi.json", "", nil, &doc)
		if !strings.HasPrefix(doc.OpenAPI, "3.1") {
			t.Fatalf("openapi.json version %q", doc.OpenAPI)
		}
		if _, ok := doc.Paths["/readyz"]["get"]; !ok {
			t.Fatalf("openapi.json lacks GET /readyz: %v", keys(doc.Paths))
		}
		// Every registered operation documents its responses.
		for path, ops := range doc.Paths {
			for method, op := range ops {
				m, _ := op.(map[string]any)
				if _, ok := m["responses"]; !ok {
					t.Errorf("%s %s has no responses in the OpenAPI document", method, path)
				}
			}
		}
		var doc30 struct {
			OpenAPI string `json:"openapi"`
		}
		ts.doJSON(t, http.StatusOK, "GET", "/openapi-3.0.json", "", nil, &doc30)
		if !strings.HasPrefix(doc30.OpenAPI, "3.0") {
			t.Fatalf("openapi-3.0.json version %q", doc30.OpenAPI)
		}
		status, body, _ := ts.do(t, "GET", "/docs", "", nil)
		if status != http.StatusOK || !strings.Contains(string(body), "<html") {
			t.Fatalf("docs: %d", status)
		}
		// Unknown routes answer 404 and every response carries a request id.
		status, _, hdr := ts.do(t, "GET", "/no-such-route", "", nil)
		if status != http.StatusNotFound || hdr.Get("X-Request-Id") == "" {
			t.Fatalf("unknown route: %d, request id %q", status, hdr.Get("X-Request-Id"))
		}
	})
}

func keys[M ~map[string]V, V any](m M) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestConfigErrorsNameTheVariable(t *testing.T) {
	t.Parallel()
	cases := map[string]map[string]string{
		"KEELSON_ADDR":               {"KEELSON_ADDR": "not-an-addr"},
		"KEELSON_INGRESS_ADDR":       {"KEELSON_INGRESS_ADDR": ":99999"},
		"KEELSON_DATABASE_URL":       {"KEELSON_DATABASE_URL": "mysql://x"},
		"KEELSON_ALLOW_LOCAL_REPOS":  {"KEELSON_ALLOW_LOCAL_REPOS": "maybe"},
		"KEELSON_ENGINE":             {"KEELSON_ENGINE": "cron"},
		"KEELSON_TEMPORAL_ADDRESS":   {"KEELSON_ENGINE": "temporal"},
		"KEELSON_JWT_SECRET":         {"KEELSON_JWT_SECRET": "short"},
		"KEELSON_FRONTEND_URL":       {"KEELSON_FRONTEND_URL": "ftp://x"},
		"KEELSON_SMTP_URL":           {"KEELSON_SMTP_URL": "http://mail"},
		"KEELSON_ADMIN_EMAILS":       {"KEELSON_ADMIN_EMAILS": "root"},
		"KEELSON_APPS_DOMAIN":        {"KEELSON_APPS_DOMAIN": "bad domain"},
		"KEELSON_TRUSTED_PROXIES":    {"KEELSON_TRUSTED_PROXIES": "10.0.0.0/8, proxy.internal"},
		"KEELSON_EGRESS":             {"KEELSON_EGRESS": "closed"},
		"KEELSON_EGRESS_ALLOW_CIDRS": {"KEELSON_EGRESS_ALLOW_CIDRS": "10.1.2.0/24, db.lan"},
		"KEELSON_REGISTRY":           {"KEELSON_REGISTRY": "keelson/images"}, // no registry host
	}
	for _, env := range []map[string]string{
		{"KEELSON_REGISTRY": "127.0.0.1:5000/Keelson"},
		{"KEELSON_REGISTRY": "127.0.0.1:5000/keelson", "KEELSON_RUNTIME": "process"},
	} {
		_, err := LoadConfig(func(k string) string { return env[k] })
		if ce := (*ConfigError)(nil); !errors.As(err, &ce) || ce.Var != "KEELSON_REGISTRY" {
			t.Errorf("%v: got %v, want an error naming KEELSON_REGISTRY", env, err)
		}
	}
	for want, env := range cases {
		_, err := LoadConfig(func(k string) string { return env[k] })
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Var != want {
			t.Errorf("%v: got %v, want an error naming %s", env, err, want)
		}
	}
	cfg, err := LoadConfig(func(string) string { return "" })
	if err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if cfg.Addr != ":8080" || cfg.IngressAddr != ":8081" || cfg.AppsDomain != "localhost" || cfg.Regions[0] != "local" || cfg.Egress != "fenced" {
		t.Fatalf("defaults: %+v", cfg)
	}
	cfg, err = LoadConfig(func(k string) string {
		return map[string]string{"KEELSON_EGRESS": "Open", "KEELSON_EGRESS_ALLOW_CIDRS": "10.1.2.0/24, 192.168.5.7"}[k]
	})
	if err != nil || cfg.Egress != "open" || len(cfg.EgressAllowCIDRs) != 2 || cfg.EgressAllowCIDRs[1].String() != "192.168.5.7/32" {
		t.Fatalf("egress settings: %v %q %v", err, cfg.Egress, cfg.EgressAllowCIDRs)
	}
}

func TestErrorModel(t *testing.T) {
	t.Parallel()
	ts := startServer(t, "", nil)
	// A route that exists with a malformed body answers the NestJS-style error body.
	status, body, hdr := ts.do(t, "GET", "/readyz", "", nil)
	if status != 200 {
		t.Fatalf("readyz %d", status)
	}
	_ = hdr
	status, body, _ = ts.do(t, "POST", "/healthz", "", "{")
	if status != http.StatusMethodNotAllowed && status != http.StatusNotFound {
		t.Fatalf("POST /healthz: %d %s", status, body)
	}
	var e map[string]any
	_ = json.Unmarshal(body, &e)
}
