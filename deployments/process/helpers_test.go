package process

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/ingress"
	"github.com/keelson-dev/keelson/deployments/internal/runtimetest"
	"github.com/keelson-dev/keelson/deployments/rt"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

// testCacheDir is shared by every test's runtime so the Go build cache is warm:
// its go-build points at the go command's own cache when there is one.
var testCacheDir string

// serverOnlySecret is in the test process's environment; no build or app may see it.
const serverOnlySecret = "KEELSON_TEST_SERVER_ONLY_SECRET"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperVar); mode != "" {
		runHelper(mode) // a "server" for the kill -9 tests; never returns
	}
	enterOwnNetNS()
	os.Setenv(serverOnlySecret, "server-only-value")
	dir, err := os.MkdirTemp("", "keelson-process-cache-")
	if err != nil {
		panic(err)
	}
	testCacheDir = dir
	if out, err := exec.Command("go", "env", "GOCACHE").Output(); err == nil {
		if gocache := strings.TrimSpace(string(out)); gocache != "" && gocache != "off" {
			_ = os.Symlink(gocache, filepath.Join(dir, "go-build"))
		}
	}
	code := m.Run()
	if code == 0 {
		if err := platformtest.FindLeaks(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	_ = removeAll(dir)
	os.Exit(code)
}

// sink records every log line as "stream: line".
type sink = runtimetest.Sink

// env is one test's runtime, with its ingress served on a loopback server.
type env struct {
	rt      *Runtime
	router  *ingress.Router
	ingress *httptest.Server
	dataDir string
}

func newEnv(t *testing.T, mutate func(*Config)) *env {
	t.Helper()
	router, err := ingress.New(ingress.Config{PublicPort: 8081})
	require.NoError(t, err)
	cfg := Config{
		DataDir: t.TempDir(), CacheDir: testCacheDir, AllowLocalRepos: true, Ingress: router,
		Supervision: rt.Supervision{HealthTimeout: 60 * time.Second, StopGrace: 5 * time.Second, RestartBackoff: 10 * time.Millisecond},
	}
	if mutate != nil {
		mutate(&cfg)
	}
	rt, err := New(cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(router)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, rt.Close(ctx))
		srv.Close()
		router.Close()
	})
	return &env{rt: rt, router: router, ingress: srv, dataDir: cfg.DataDir}
}

// get requests path from host through the ingress; err is a transport error.
func (e *env) get(host, path string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, e.ingress.URL+path, nil)
	if err != nil {
		return 0, "", err
	}
	req.Host = host
	res, err := e.ingress.Client().Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, string(b), err
}

// mustGet requests path and expects 200.
func (e *env) mustGet(t *testing.T, host, path string) string {
	t.Helper()
	code, body, err := e.get(host, path)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, body)
	return body
}

// git runs git in dir with a fixed identity.
func git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "git %v: %s", args, out)
	return strings.TrimSpace(string(out))
}

// writeFiles writes files (path -> content) under dir.
func writeFiles(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
}

// commit writes files into repo, commits them and returns the commit.
func commit(t testing.TB, repo string, files map[string]string) string {
	t.Helper()
	writeFiles(t, repo, files)
	git(t, repo, "add", "-A")
	git(t, repo, "commit", "-q", "-m", "change")
	return git(t, repo, "rev-parse", "HEAD")
}

// newRepo creates a git repository in a temp dir holding files.
func newRepo(t testing.TB, files map[string]string) (dir, head string) {
	t.Helper()
	dir = t.TempDir()
	git(t, dir, "init", "-q")
	return dir, commit(t, dir, files)
}

const appMain = `package main

import (
	"fmt"
	"net/http"
	"os"
)

func main() {
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello "+version) })
	http.HandleFunc("/pid", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, os.Getpid()) })
	http.HandleFunc("/env", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, os.Getenv(r.URL.Query().Get("k"))) })
	http.HandleFunc("/crash", func(w http.ResponseWriter, r *http.Request) { os.Exit(3) })
	fmt.Println("app starting with token=" + os.Getenv("API_TOKEN"))
	if err := http.ListenAndServe("127.0.0.1:"+os.Getenv("PORT"), nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
`

// goApp is the files of a tiny Go web app answering "hello <version>".
func goApp(version string) map[string]string {
	return map[string]string{
		"go.mod":     "module example.com/hello\n\ngo 1.21\n",
		"main.go":    appMain,
		"version.go": fmt.Sprintf("package main\n\nconst version = %q\n", version),
	}
}

// goJob is a job deploying the Go app of repo with the go preset.
func goJob(repo, slug string) deployments.Job {
	return deployments.Job{
		DeploymentID: platform.NewID(), ProjectID: platform.NewID(), ProjectSlug: slug,
		RepoURL: repo, Framework: "go",
		Env: []deployments.EnvVar{
			{Key: "API_TOKEN", Value: "tok-s3cret-value-42", Secret: true},
			{Key: "GREETING", Value: "hi"},
			{Key: "GOPROXY", Value: "off"},
			{Key: "GOTOOLCHAIN", Value: "local"},
		},
	}
}
