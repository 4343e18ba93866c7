package main

import (
	"net/http"
	"strings"
	"testing"
)

// TestDeployHookTokenNotLogged: a deploy hook's URL is its only credential,
// shown once and stored hashed; the server's request log must not write it
// down either (whoever reads the log, or the service it is shipped to, could
// deploy the project). The log keeps the hook's listed prefix, to tell
// requests apart.
func TestDeployHookTokenNotLogged(t *testing.T) {
	ts := startServer(t, "", nil)
	alice := ts.signup(t, "alice@example.com")
	_, bare := newRepo(t, map[string]string{"index.html": "<h1>hooked</h1>\n"})
	var p struct{ ID string }
	ts.doJSON(t, http.StatusCreated, "POST", "/projects", alice, map[string]any{
		"name": "hooked", "repoUrl": "file://" + bare, "framework": "static", "port": 8080,
	}, &p)
	var hook struct{ ID, Prefix, URL string }
	ts.doJSON(t, http.StatusCreated, "POST", "/projects/"+p.ID+"/deploy-hooks", alice, map[string]any{"name": "ci"}, &hook)
	token := strings.TrimPrefix(hook.URL, ts.App.Cfg.PublicURL+"/deploy-hooks/")
	// Revoked first, so that firing it starts nothing: the request is logged all the same.
	ts.doJSON(t, http.StatusNoContent, "DELETE", "/projects/"+p.ID+"/deploy-hooks/"+hook.ID, alice, nil, nil)
	if s, body, _ := ts.do(t, "POST", "/deploy-hooks/"+token, "", nil); s != http.StatusNotFound {
		t.Fatalf("revoked hook: %d %s", s, body)
	}
	logs := ts.Logs.String()
	if i := strings.Index(logs, token); i >= 0 {
		start := strings.LastIndex(logs[:i], "\n") + 1
		end := i + strings.Index(logs[i:], "\n")
		t.Fatalf("the server log holds the deploy hook's token: %s", logs[start:end])
	}
	if !strings.Contains(logs, "/deploy-hooks/"+hook.Prefix) {
		t.Fatalf("the request log lost the hook's prefix %s", hook.Prefix)
	}
}
