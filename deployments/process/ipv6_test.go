package process

import (
	"context"
	"encoding/pem"
	"errors"
	"net"
	"net/http/cgi"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/platform"
)

// TestPublicHostPinning checks the git config a clone gets on a server that
// only clones public hosts, for IPv4 and IPv6 literals and names resolving to
// either (issue 15: an https repository on an IPv6 literal failed with a curl
// error about CURLOPT_RESOLVE, because the pin named the literal as its host).
func TestPublicHostPinning(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.AllowLocalRepos = false })
	dns := map[string][]netip.Addr{
		"v6.example.test":     {netip.MustParseAddr("2001:db8::7")},
		"v4.example.test":     {netip.MustParseAddr("203.0.113.9")},
		"mapped.example.test": {netip.MustParseAddr("::ffff:203.0.113.9")},
		"mixed.example.test":  {netip.MustParseAddr("2001:db8::7"), netip.MustParseAddr("fd00::2")},
		"lan.example.test":    {netip.MustParseAddr("fe80::1")},
	}
	e.rt.lookupIP = func(_ context.Context, host string) ([]netip.Addr, error) {
		if a, ok := dns[host]; ok {
			return a, nil
		}
		return nil, errors.New("no such host")
	}
	noRedirects := [2]string{"http.followRedirects", "false"}
	for _, tc := range []struct {
		url  string
		want [][2]string
		err  string
	}{
		{url: "https://[2001:db8::1]/x.git", want: [][2]string{noRedirects}},
		{url: "https://[2001:db8::1]:8443/x.git", want: [][2]string{noRedirects}},
		{url: "https://203.0.113.7/x.git", want: [][2]string{noRedirects}},
		{url: "https://v6.example.test/x.git", want: [][2]string{{"http.curloptResolve", "v6.example.test:443:[2001:db8::7]"}, noRedirects}},
		{url: "https://v6.example.test:8443/x.git", want: [][2]string{{"http.curloptResolve", "v6.example.test:8443:[2001:db8::7]"}, noRedirects}},
		{url: "https://v4.example.test/x.git", want: [][2]string{{"http.curloptResolve", "v4.example.test:443:203.0.113.9"}, noRedirects}},
		{url: "https://mapped.example.test/x.git", want: [][2]string{{"http.curloptResolve", "mapped.example.test:443:203.0.113.9"}, noRedirects}},
		{url: "https://[::1]/x.git", err: "repository host ::1 is a non-public address"},
		{url: "https://[fd00::2]/x.git", err: "is a non-public address"},
		{url: "https://[fe80::1%25eth0]/x.git", err: "is a non-public address"},
		{url: "https://[::ffff:127.0.0.1]/x.git", err: "is a non-public address"},
		{url: "https://[::]/x.git", err: "is a non-public address"},
		{url: "https://10.1.2.3/x.git", err: "is a non-public address"},
		{url: "https://mixed.example.test/x.git", err: `"mixed.example.test" resolves to a non-public address (fd00::2)`},
		{url: "https://lan.example.test/x.git", err: "non-public address (fe80::1)"},
		{url: "https://nowhere.example.test/x.git", err: `"nowhere.example.test" does not resolve`},
	} {
		// Parsed as with local repositories allowed, which admits private
		// literals (the parser refuses them otherwise): the pin is the
		// second line, where git connects.
		src, err := parseRepo(tc.url, true)
		require.NoError(t, err, tc.url)
		got, err := e.rt.pinPublic(context.Background(), src)
		if tc.err != "" {
			assert.ErrorContains(t, err, tc.err, tc.url)
			continue
		}
		require.NoError(t, err, tc.url)
		assert.Equal(t, tc.want, got, tc.url)
	}

	// The whole environment of the clone of an IPv6 literal: redirects off,
	// no resolve entry.
	src, err := parseRepo("https://[2001:db8::1]/x.git", false)
	require.NoError(t, err)
	pin, err := e.rt.pinPublic(context.Background(), src)
	require.NoError(t, err)
	ws, err := e.rt.workspace(platform.NewID())
	require.NoError(t, err)
	gitEnv := strings.Join(e.rt.gitEnv(ws, src, nil, pin...), "\n")
	assert.NotContains(t, gitEnv, "curloptResolve")
	assert.Contains(t, gitEnv, "=http.followRedirects\n")
	assert.Regexp(t, `GIT_CONFIG_VALUE_\d+=false\n`, gitEnv)
}

// gitServer serves the bare repositories under root over git's smart HTTP
// protocol (git http-backend over CGI), on l, with TLS when tls is set.
func gitServer(t *testing.T, l net.Listener, root string, tls bool) *httptest.Server {
	t.Helper()
	execPath, err := exec.Command("git", "--exec-path").Output()
	require.NoError(t, err)
	backendPath := filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend")
	if _, err := os.Stat(backendPath); err != nil {
		t.Skip("git-http-backend is not installed")
	}
	srv := httptest.NewUnstartedServer(&cgi.Handler{Path: backendPath,
		Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}})
	srv.Listener.Close()
	srv.Listener = l
	if tls {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv
}

// listenIPv6Loopback listens on [::1]:0, or skips when the machine has no IPv6 loopback.
func listenIPv6Loopback(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	return l
}

// caFile writes srv's certificate as a PEM bundle git can trust.
func caFile(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))
	return ca
}

// TestIPv6LiteralRepositoriesClone clones from a real git server on [::1]
// through an IPv6 literal URL, over https (private hosts allowed, as for a
// code host on the LAN) and over http (local repos allowed).
func TestIPv6LiteralRepositoriesClone(t *testing.T) {
	t.Parallel()
	src, head := newRepo(t, map[string]string{"index.html": "over ipv6"})
	root := t.TempDir()
	git(t, root, "clone", "-q", "--bare", src, "app.git")

	for _, tls := range []bool{true, false} {
		srv := gitServer(t, listenIPv6Loopback(t), root, tls)
		require.True(t, strings.Contains(srv.URL, "[::1]"), srv.URL)
		e := newEnv(t, func(c *Config) {
			if tls {
				c.AllowLocalRepos = false
				c.AllowPrivateHosts = true
				c.GitCAFile = caFile(t, srv)
			}
		})
		job := deployments.Job{DeploymentID: platform.NewID(), ProjectSlug: "v6", RepoURL: srv.URL + "/app.git", Framework: "static"}
		logs := &sink{}
		commit, err := e.rt.Build(context.Background(), job, logs)
		require.NoError(t, err, "%s: %s", srv.URL, logs.All())
		assert.Equal(t, head, commit)
		b, err := os.ReadFile(filepath.Join(e.dataDir, "workspaces", job.DeploymentID, "src", "index.html"))
		require.NoError(t, err)
		assert.Equal(t, "over ipv6", string(b))
	}
}

// TestResolvePinToAnIPv6AddressIsWhatCurlAccepts: the pin of a name that
// resolves to an IPv6 address makes a real git (and its curl) connect to that
// address. The name is example.com, which the test server's certificate
// covers, pinned to [::1] where the server listens; no DNS is involved.
func TestResolvePinToAnIPv6AddressIsWhatCurlAccepts(t *testing.T) {
	t.Parallel()
	src, head := newRepo(t, map[string]string{"index.html": "pinned"})
	root := t.TempDir()
	git(t, root, "clone", "-q", "--bare", src, "app.git")
	srv := gitServer(t, listenIPv6Loopback(t), root, true)
	_, port, err := net.SplitHostPort(strings.TrimPrefix(srv.URL, "https://"))
	require.NoError(t, err)

	e := newEnv(t, func(c *Config) {
		c.AllowLocalRepos = false
		c.GitCAFile = caFile(t, srv)
	})
	repo, err := parseRepo("https://example.com:"+port+"/app.git", false)
	require.NoError(t, err)
	ws, err := e.rt.workspace(platform.NewID())
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(ws.home, 0o700))
	require.NoError(t, os.MkdirAll(ws.tmp, 0o700))
	pin := [][2]string{{"http.curloptResolve", resolveEntry(repo.Host, repo.Port, netip.MustParseAddr("::1"))},
		{"http.followRedirects", "false"}}
	cmd := exec.Command(e.rt.cfg.GitPath, "ls-remote", repo.URL, "HEAD")
	cmd.Dir, cmd.Env = ws.root, e.rt.gitEnv(ws, repo, nil, pin...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), head)
}
