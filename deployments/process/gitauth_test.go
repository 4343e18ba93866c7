package process

import (
	"context"
	"encoding/base64"
	"encoding/pem"
	"io/fs"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/platform"
)

// TestGitAuthReachesTheServerButNeverTheWorkspaceArgvOrLogs clones a private
// repository from a real git smart-HTTP server (git http-backend over CGI,
// behind TLS and basic auth).
func TestGitAuthReachesTheServerButNeverTheWorkspaceArgvOrLogs(t *testing.T) {
	t.Parallel()
	execPath, err := exec.Command("git", "--exec-path").Output()
	require.NoError(t, err)
	backendPath := filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend")
	if _, err := os.Stat(backendPath); err != nil {
		t.Skip("git-http-backend is not installed")
	}

	src, head := newRepo(t, map[string]string{"index.html": "private"})
	root := t.TempDir()
	git(t, root, "clone", "-q", "--bare", src, "app.git")

	const user, pass = "x-access-token", "ghs_Pr1vateT0kenValue9"
	token := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
	backend := &cgi.Handler{Path: backendPath, Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}}
	var mu sync.Mutex
	var authHeaders []string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		authHeaders = append(authHeaders, r.Header.Get("Authorization"))
		mu.Unlock()
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		backend.ServeHTTP(w, r)
	}))
	defer srv.Close()

	tmp := t.TempDir()
	ca := filepath.Join(tmp, "ca.pem")
	require.NoError(t, os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))
	// A git that records its argv, to show the credential is never in it.
	argvLog := filepath.Join(tmp, "argv.log")
	realGit, err := exec.LookPath("git")
	require.NoError(t, err)
	wrapper := filepath.Join(tmp, "git")
	require.NoError(t, os.WriteFile(wrapper,
		[]byte("#!/bin/sh\nprintf '%s\\n' \"$*\" >> '"+argvLog+"'\nexec '"+realGit+"' \"$@\"\n"), 0o700))

	e := newEnv(t, func(c *Config) {
		c.AllowLocalRepos = false
		c.AllowPrivateHosts = true
		c.GitCAFile = ca
		c.GitPath = wrapper
	})
	job := deployments.Job{DeploymentID: platform.NewID(), ProjectSlug: "priv", RepoURL: srv.URL + "/app.git",
		Framework: "static", GitAuth: &deployments.GitAuth{Username: user, Password: pass}}
	logs := &sink{}
	commit, err := e.rt.Build(context.Background(), job, logs)
	require.NoError(t, err, logs.All())
	assert.Equal(t, head, commit)

	mu.Lock()
	assert.Contains(t, authHeaders, "Basic "+token, "the server received the credential")
	mu.Unlock()

	ws := filepath.Join(e.dataDir, "workspaces", job.DeploymentID)
	files := 0
	require.NoError(t, filepath.WalkDir(ws, func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		if !d.Type().IsRegular() {
			return nil
		}
		files++
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		assert.NotContains(t, string(b), pass, p)
		assert.NotContains(t, string(b), token, p)
		return nil
	}))
	assert.Greater(t, files, 5, "the walk saw the checkout and its .git")
	cfg, err := os.ReadFile(filepath.Join(ws, "src", ".git", "config"))
	require.NoError(t, err)
	assert.Contains(t, string(cfg), srv.URL+"/app.git", "the remote is recorded without credentials")

	argv, err := os.ReadFile(argvLog)
	require.NoError(t, err)
	assert.Contains(t, string(argv), "fetch")
	assert.NotContains(t, string(argv), pass)
	assert.NotContains(t, string(argv), token)
	assert.NotContains(t, logs.All(), pass)
	assert.NotContains(t, logs.All(), token)

	// Without the credential the fetch fails at once (no prompt), and says so.
	job.DeploymentID, job.GitAuth = platform.NewID(), nil
	_, err = e.rt.Build(context.Background(), job, logs)
	require.ErrorContains(t, err, "git fetch")
}
