package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
)

// The full service serves the routes of modules built late in the list,
// on SQLite: a project is created (projects, on plans and teams), a
// deployment of it is queued and listed (deployments, reading the project
// through glue), and its deletion is answered (the Deleted event's subscribers).
func TestFullServiceServesLaterModules(t *testing.T) {
	dir := t.TempDir()
	full, err := newFullService(context.Background(), FullOptions{
		Options: Options{DataDir: dir, JWTSecret: "test-secret-test-secret-test-secret-00",
			SealKey: "test-seal-test-seal-test-seal-test-00", Log: slog.New(slog.DiscardHandler)},
		AppsDomain: "apps.localhost", PublicURL: "http://localhost:8090", FrontendURL: "http://localhost:3000", AllowLocalRepos: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer full.Close()
	srv := httptest.NewServer(full.API)
	defer srv.Close()
	c := client{t: t, url: srv.URL}

	c.want(201, "POST", "/auth/register", map[string]string{"email": "host@example.com", "password": "secret-pw", "confirmPassword": "secret-pw"}, nil)
	var tok struct{ AccessToken string }
	c.want(200, "POST", "/auth/login", map[string]string{"email": "host@example.com", "password": "secret-pw"}, &tok)
	c.token = tok.AccessToken

	var p struct{ ID string }
	c.want(201, "POST", "/projects", map[string]any{"name": "site", "repoUrl": filepath.Join(dir, "no-repo"), "framework": "node", "port": 3000}, &p)
	var d struct{ DeploymentID string }
	c.want(201, "POST", "/deployments", map[string]string{"projectId": p.ID}, &d)
	var list []struct{ ID, ProjectID string }
	c.want(200, "GET", "/deployments", nil, &list)
	if len(list) != 1 || list[0].ID != d.DeploymentID || list[0].ProjectID != p.ID {
		t.Fatalf("deployments: %+v, want the one of project %s", list, p.ID)
	}
	c.want(202, "DELETE", "/projects/"+p.ID, nil, nil)
}

type client struct {
	t     *testing.T
	url   string
	token string
}

// want calls the API and fails unless it answers status; out, when set,
// receives the JSON body.
func (c client) want(status int, method, path string, body, out any) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, c.url+path, rd)
	req.Header.Set("Content-Type", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		c.t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, b, status)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			c.t.Fatalf("%s %s: %v in %s", method, path, err, b)
		}
	}
}
