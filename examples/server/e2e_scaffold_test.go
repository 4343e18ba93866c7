package main

import (
	"net/http"
	"testing"
)

// The placeholder modules of SPEC 4.7 behind the real bearer authenticator.
func TestPlaceholderModules(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, dbURL string) {
		ts := startServer(t, dbURL, nil)
		tok := ts.signup(t, "placeholder@example.com")
		mods := []struct{ prefix, plural, singular string }{
			{"/env-vars", "envVars", "envVar"},
			{"/logstore", "logstore", "logstore"},
			{"/workflow-engine", "workflowEngine", "workflowEngine"},
			{"/admin", "admin", "admin"},
			{"/users", "users", "user"},
			{"/logs", "logs", "log"},
			{"/cluster", "cluster", "cluster"},
			{"/notification", "notification", "notification"},
		}
		for _, m := range mods {
			calls := []struct {
				method, path string
				body         any
				status       int
				want         string
			}{
				{"GET", m.prefix, nil, 200, "This action returns all " + m.plural},
				{"GET", m.prefix + "/3", nil, 200, "This action returns a #3 " + m.singular},
				{"POST", m.prefix, map[string]any{}, 201, "This action adds a new " + m.singular},
				{"PATCH", m.prefix + "/3", map[string]any{}, 200, "This action updates a #3 " + m.singular},
				{"DELETE", m.prefix + "/3", nil, 200, "This action removes a #3 " + m.singular},
			}
			for _, c := range calls {
				status, body, _ := ts.do(t, c.method, c.path, "", c.body)
				if status != http.StatusUnauthorized {
					t.Errorf("%s %s without token: %d %s", c.method, c.path, status, body)
				}
				status, body, _ = ts.do(t, c.method, c.path, tok+"x", c.body)
				if status != http.StatusUnauthorized {
					t.Errorf("%s %s with a forged token: %d %s", c.method, c.path, status, body)
				}
				status, body, _ = ts.do(t, c.method, c.path, tok, c.body)
				if status != c.status || string(body) != c.want {
					t.Errorf("%s %s: %d %q, want %d %q", c.method, c.path, status, body, c.status, c.want)
				}
			}
		}
	})
}
