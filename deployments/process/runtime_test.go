package process

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

// TestDeployAndSwapWithoutFailedRequests builds, starts and routes a Go app,
// then deploys v2 and swaps to it while clients keep requesting: no request fails.
func TestDeployAndSwapWithoutFailedRequests(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	repo, head1 := newRepo(t, goApp("v1"))
	logs1 := &sink{}
	job1 := goJob(repo, "hello")

	commit1, err := e.rt.Build(ctx, job1, logs1)
	require.NoError(t, err, logs1.All())
	assert.Equal(t, head1, commit1)
	up1, err := e.rt.Start(ctx, job1, logs1)
	require.NoError(t, err, logs1.All())
	url, err := e.rt.Route(ctx, "hello", job1.DeploymentID, up1)
	require.NoError(t, err)
	assert.Equal(t, "http://hello.localhost:8081", url)
	assert.Equal(t, "hello v1", e.mustGet(t, "hello.localhost:8081", "/"))

	// Env: the job's variables (secret ones too) reach the app, the server's do not.
	assert.Equal(t, "tok-s3cret-value-42", e.mustGet(t, "hello.localhost", "/env?k=API_TOKEN"))
	assert.Equal(t, "hi", e.mustGet(t, "hello.localhost", "/env?k=GREETING"))
	assert.Equal(t, strings.TrimPrefix(up1, "127.0.0.1:"), e.mustGet(t, "hello.localhost", "/env?k=PORT"))
	assert.Empty(t, e.mustGet(t, "hello.localhost", "/env?k="+serverOnlySecret))
	assert.Equal(t, filepath.Join(e.dataDir, "workspaces", job1.DeploymentID, "home"),
		e.mustGet(t, "hello.localhost", "/env?k=HOME"))
	// Its output is in the log, the secret masked.
	platformtest.Eventually(t, time.Minute, "the app's first line", func() bool { return logs1.Has("app: app starting with token=***") })
	assert.NotContains(t, logs1.All(), "tok-s3cret-value-42")

	// Second deployment: v2, built and started beside v1.
	head2 := commit(t, repo, goApp("v2"))
	logs2 := &sink{}
	job2 := goJob(repo, "hello")
	commit2, err := e.rt.Build(ctx, job2, logs2)
	require.NoError(t, err, logs2.All())
	assert.Equal(t, head2, commit2)
	up2, err := e.rt.Start(ctx, job2, logs2)
	require.NoError(t, err, logs2.All())
	assert.NotEqual(t, up1, up2)

	var ok, failed atomic.Int64
	var sawV2 atomic.Bool
	var mu sync.Mutex
	var failures []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				code, body, err := e.get("hello.localhost", "/")
				if err != nil || code != http.StatusOK {
					failed.Add(1)
					mu.Lock()
					failures = append(failures, strconv.Itoa(code)+" "+body+" "+errString(err))
					mu.Unlock()
					continue
				}
				ok.Add(1)
				if body == "hello v2" {
					sawV2.Store(true)
				}
			}
		}()
	}
	platformtest.Eventually(t, time.Minute, "traffic on v1", func() bool { return ok.Load() >= 30 })
	// The swap, in the engine's order: new route first, then the old app goes.
	_, err = e.rt.Route(ctx, "hello", job2.DeploymentID, up2)
	require.NoError(t, err)
	require.NoError(t, e.rt.Stop(ctx, job1.DeploymentID))
	require.NoError(t, e.rt.Unroute(ctx, "hello", job1.DeploymentID)) // stale: must not remove v2's route
	require.NoError(t, e.rt.Cleanup(ctx, job1.DeploymentID))
	after := ok.Load()
	platformtest.Eventually(t, time.Minute, "traffic on v2", func() bool { return ok.Load() >= after+30 })
	close(stop)
	wg.Wait()

	assert.Zero(t, failed.Load(), "failed requests: %v", failures)
	assert.True(t, sawV2.Load())
	assert.Equal(t, "hello v2", e.mustGet(t, "hello.localhost", "/"))
	_, err = os.Stat(filepath.Join(e.dataDir, "workspaces", job1.DeploymentID))
	assert.True(t, os.IsNotExist(err), "the old workspace is removed")
	assert.False(t, answers(up1), "the old app still answers on %s", up1)

	// Idempotence; a running deployment is not rebuilt under its app.
	_, err = e.rt.Build(ctx, job2, logs2)
	require.ErrorContains(t, err, "is running")
	require.NoError(t, e.rt.Stop(ctx, job1.DeploymentID))
	require.NoError(t, e.rt.Cleanup(ctx, job1.DeploymentID))
	again, err := e.rt.Start(ctx, job2, logs2)
	require.NoError(t, err)
	assert.Equal(t, up2, again, "starting a running deployment returns its upstream")
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// answers reports whether something answers HTTP at upstream.
func answers(upstream string) bool {
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	res, err := c.Get("http://" + upstream + "/")
	if err != nil {
		return false
	}
	res.Body.Close()
	return true
}

func TestFailingBuildReturnsItsOutput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	files := goApp("broken")
	files["main.go"] = strings.Replace(appMain, "func main() {", "func main() {\n\tundefinedThing()", 1)
	repo, _ := newRepo(t, files)
	logs := &sink{}
	_, err := e.rt.Build(context.Background(), goJob(repo, "broken"), logs)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "build command failed (exit status 1)")
	assert.Contains(t, err.Error(), "undefined: undefinedThing")
	assert.Contains(t, logs.All(), "build: ./main.go")
	assert.Contains(t, logs.All(), "undefined: undefinedThing")
}

func TestSecretsAreMaskedInBuildOutputAndErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	repo, _ := newRepo(t, map[string]string{"README": "x"})
	logs := &sink{}
	job := deployments.Job{
		DeploymentID: platform.NewID(), ProjectSlug: "s", RepoURL: repo,
		BuildCommand: `echo "using $DB_PASSWORD and $PLAIN"; echo "bad $DB_PASSWORD" >&2; exit 4`, StartCommand: "true",
		Env: []deployments.EnvVar{{Key: "DB_PASSWORD", Value: "pw-0f9a8b", Secret: true}, {Key: "PLAIN", Value: "visible"}},
	}
	_, err := e.rt.Build(context.Background(), job, logs)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "bad ***")
	assert.Contains(t, logs.All(), "build: using *** and visible")
	assert.NotContains(t, err.Error()+logs.All(), "pw-0f9a8b")
}

// childGone reports whether pid no longer runs (gone or a zombie).
func childGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) > 0 && (fields[0] == "Z" || fields[0] == "X")
}

// spawningBuild is a build command whose child outlives its shell unless the
// whole process group is killed.
const spawningBuild = `sleep 300 & echo $! > child.pid; echo "spawned child"; wait`

func readPid(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	return pid
}

func TestBuildTimeoutKillsTheWholeProcessGroup(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	repo, _ := newRepo(t, map[string]string{"README": "x"})
	job := deployments.Job{
		DeploymentID: platform.NewID(), ProjectSlug: "slow", RepoURL: repo,
		BuildCommand: spawningBuild, StartCommand: "true",
		Limits: deployments.Limits{BuildTimeout: time.Second},
	}
	logs := &sink{}
	_, err := e.rt.Build(context.Background(), job, logs)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "build timed out after 1s")
	assert.Contains(t, logs.All(), "build: spawned child")
	pid := readPid(t, filepath.Join(e.dataDir, "workspaces", job.DeploymentID, "src", "child.pid"))
	platformtest.Eventually(t, time.Minute, "the build's child to die", func() bool { return childGone(pid) })
}

func TestCancelledBuildKillsTheWholeProcessGroup(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	repo, _ := newRepo(t, map[string]string{"README": "x"})
	job := deployments.Job{
		DeploymentID: platform.NewID(), ProjectSlug: "slow", RepoURL: repo,
		BuildCommand: spawningBuild, StartCommand: "true",
	}
	pidFile := filepath.Join(e.dataDir, "workspaces", job.DeploymentID, "src", "child.pid")
	ctx, cancel := context.WithCancel(context.Background())
	logs := &sink{}
	done := make(chan error, 1)
	go func() {
		_, err := e.rt.Build(ctx, job, logs)
		done <- err
	}()
	platformtest.Eventually(t, time.Minute, "the build to spawn its child", func() bool { return logs.Has("build: spawned child") })
	cancel()
	err := platformtest.Receive(t, done, time.Minute, "the cancelled build to end")
	require.ErrorIs(t, err, context.Canceled)
	pid := readPid(t, pidFile)
	platformtest.Eventually(t, time.Minute, "the build's child to die", func() bool { return childGone(pid) })
}

// TestCleanupCancelsARunningBuild: deleting a deployment mid-build ends the build.
func TestCleanupCancelsARunningBuild(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	repo, _ := newRepo(t, map[string]string{"README": "x"})
	job := deployments.Job{DeploymentID: platform.NewID(), ProjectSlug: "s", RepoURL: repo,
		BuildCommand: spawningBuild, StartCommand: "true"}
	logs := &sink{}
	done := make(chan error, 1)
	go func() {
		_, err := e.rt.Build(context.Background(), job, logs)
		done <- err
	}()
	platformtest.Eventually(t, time.Minute, "the build to spawn its child", func() bool { return logs.Has("build: spawned child") })
	require.NoError(t, e.rt.Cleanup(context.Background(), job.DeploymentID))
	require.Error(t, platformtest.Receive(t, done, time.Minute, "the cleaned-up build to end"))
	_, err := os.Stat(filepath.Join(e.dataDir, "workspaces", job.DeploymentID))
	assert.True(t, os.IsNotExist(err))
}

func TestCrashedAppIsRestartedThenGivenUp(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.MaxRestarts = 1 })
	// Pretend the crashed app's port was taken meanwhile: the restart moves to
	// another port and the ingress must follow.
	e.rt.portFree = func(int) bool { return false }
	ctx := context.Background()
	repo, _ := newRepo(t, goApp("v1"))
	job := goJob(repo, "crashy")
	logs := &sink{}
	_, err := e.rt.Build(ctx, job, logs)
	require.NoError(t, err, logs.All())
	up, err := e.rt.Start(ctx, job, logs)
	require.NoError(t, err, logs.All())
	_, err = e.rt.Route(ctx, "crashy", job.DeploymentID, up)
	require.NoError(t, err)
	pid1 := e.mustGet(t, "crashy.localhost", "/pid")

	_, _, _ = e.get("crashy.localhost", "/crash") // the app dies answering this
	var pid2 string
	platformtest.Eventually(t, time.Minute, "a restarted app", func() bool {
		code, body, err := e.get("crashy.localhost", "/pid")
		pid2 = body
		return err == nil && code == http.StatusOK && body != pid1
	})
	assert.NotEqual(t, pid1, pid2)
	route, ok := e.router.Lookup("crashy")
	require.True(t, ok)
	assert.NotEqual(t, up, route.Upstream, "the restarted app listens elsewhere and the route followed")
	assert.Contains(t, logs.All(), "system: the app now listens on "+route.Upstream)
	assert.Contains(t, logs.All(), "system: the app exited (exit status 3)")
	assert.Contains(t, logs.All(), "system: restarting the app")

	// A second crash within the window exceeds MaxRestarts=1: it stays down.
	_, _, _ = e.get("crashy.localhost", "/crash")
	// Its route goes with it: the host answers 404, not a port it freed.
	platformtest.Eventually(t, time.Minute, "the runtime to give up", func() bool { return logs.Has("not restarting it") })
	platformtest.Eventually(t, time.Minute, "the route to go", func() bool { return logs.Has("its route is removed") })
	_, ok = e.router.Lookup("crashy")
	assert.False(t, ok)
	code, _, err := e.get("crashy.localhost", "/")
	require.NoError(t, err)
	assert.Equal(t, http.StatusNotFound, code)

	// Starting it again brings it back.
	up, err = e.rt.Start(ctx, job, logs)
	require.NoError(t, err)
	_, err = e.rt.Route(ctx, "crashy", job.DeploymentID, up)
	require.NoError(t, err)
	assert.Equal(t, "hello v1", e.mustGet(t, "crashy.localhost", "/"))
}

func TestAppThatDoesNotAnswerFailsStartWithItsOutput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	repo, _ := newRepo(t, map[string]string{"README": "x"})
	job := deployments.Job{DeploymentID: platform.NewID(), ProjectSlug: "dud", RepoURL: repo,
		BuildCommand: "true", StartCommand: `echo "cannot open config.yml"; exit 7`}
	logs := &sink{}
	_, err := e.rt.Build(context.Background(), job, logs)
	require.NoError(t, err)
	_, err = e.rt.Start(context.Background(), job, logs)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "exited before answering HTTP (exit status 7)")
	assert.Contains(t, err.Error(), "cannot open config.yml")
	assert.Contains(t, logs.All(), "app: cannot open config.yml")

	// One that runs but never listens fails at the health timeout.
	e2 := newEnv(t, func(c *Config) { c.HealthTimeout = 300 * time.Millisecond })
	job.StartCommand = `echo "warming up"; exec sleep 300`
	_, err = e2.rt.Build(context.Background(), job, logs)
	require.NoError(t, err)
	_, err = e2.rt.Start(context.Background(), job, logs)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "did not answer HTTP")
}

func TestRepositoryURLsAreChecked(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.AllowLocalRepos = false })
	repo, _ := newRepo(t, map[string]string{"README": "x"})
	for url, want := range map[string]string{
		repo:                                   "local repositories are not allowed",
		"file://" + repo:                       "local repositories are not allowed",
		"ssh://git@example.com/a/b.git":        "must be an https URL",
		"ext::sh -c touch% /tmp/pwned":         "must not contain spaces",
		"git@example.com:a/b.git":              "not a valid URL; use an https URL",
		"http://example.com/a/b.git":           "must be an https URL",
		"https://user:tok@example.com/a/b.git": "must not contain credentials",
		"https://localhost/a/b.git":            "not localhost",
		"https://127.0.0.1:8443/a/b.git":       "must not be a loopback, private or link-local address",
		"https://[::1]/a/b.git":                "must not be a loopback, private or link-local address",
		"https://169.254.169.254/latest":       "must not be a loopback, private or link-local address",
		"https://10.1.2.3/a/b.git":             "must not be a loopback, private or link-local address",
		"https://no-such-host.invalid/a.git":   "does not resolve",
		"":                                     "repository URL: must not be empty",
	} {
		job := deployments.Job{DeploymentID: platform.NewID(), RepoURL: url, Framework: "static"}
		_, err := e.rt.Build(context.Background(), job, nil)
		require.Error(t, err, url)
		assert.Contains(t, err.Error(), want, url)
	}
	bad := deployments.Job{DeploymentID: platform.NewID(), RepoURL: "https://example.com/a.git", Framework: "static",
		Branch: "--upload-pack=touch /tmp/x"}
	_, err := e.rt.Build(context.Background(), bad, nil)
	require.ErrorContains(t, err, "not a valid branch name")
	bad.Branch, bad.CommitSHA = "", "HEAD~1"
	_, err = e.rt.Build(context.Background(), bad, nil)
	require.ErrorContains(t, err, "not a hexadecimal commit id")
	bad.CommitSHA, bad.DeploymentID = "", "../../etc"
	_, err = e.rt.Build(context.Background(), bad, nil)
	require.ErrorContains(t, err, "deployment id")
}

func TestBranchAndCommitSelection(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	repo, first := newRepo(t, map[string]string{"index.html": "one"})
	second := commit(t, repo, map[string]string{"index.html": "two"})
	git(t, repo, "checkout", "-q", "-b", "feature")
	feature := commit(t, repo, map[string]string{"index.html": "feature"})
	git(t, repo, "checkout", "-q", "main")

	read := func(job deployments.Job) (string, string) {
		t.Helper()
		c, err := e.rt.Build(context.Background(), job, nil)
		require.NoError(t, err)
		b, err := os.ReadFile(filepath.Join(e.dataDir, "workspaces", job.DeploymentID, "src", "index.html"))
		require.NoError(t, err)
		return c, string(b)
	}
	job := deployments.Job{DeploymentID: platform.NewID(), RepoURL: "file://" + repo, Framework: "static"}
	c, body := read(job)
	assert.Equal(t, second, c)
	assert.Equal(t, "two", body)

	job.Branch = "feature"
	c, body = read(job)
	assert.Equal(t, feature, c)
	assert.Equal(t, "feature", body)

	job.Branch, job.CommitSHA = "main", first[:12]
	c, body = read(job) // rebuilding the same deployment replaces its checkout
	assert.Equal(t, first, c)
	assert.Equal(t, "one", body)

	job.Branch = "no-such-branch"
	job.CommitSHA = ""
	_, err := e.rt.Build(context.Background(), job, nil)
	require.ErrorContains(t, err, "git fetch")
}

func TestStaticPresetServesFilesButNoDotfilesOrEscapes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	repo, _ := newRepo(t, map[string]string{"public/index.html": "<h1>static</h1>", "public/.env": "SECRET=1",
		"notes.txt": "outside public"})
	require.NoError(t, os.Symlink("/etc/hostname", filepath.Join(repo, "public", "leak")))
	commit(t, repo, nil)
	job := deployments.Job{DeploymentID: platform.NewID(), ProjectSlug: "site", RepoURL: repo, Framework: "Static"}
	logs := &sink{}
	_, err := e.rt.Build(context.Background(), job, logs)
	require.NoError(t, err)
	up, err := e.rt.Start(context.Background(), job, logs)
	require.NoError(t, err)
	_, err = e.rt.Route(context.Background(), "site", job.DeploymentID, up)
	require.NoError(t, err)

	assert.Equal(t, "<h1>static</h1>", e.mustGet(t, "site.localhost", "/"))
	for _, p := range []string{"/.env", "/../notes.txt", "/leak", "/.git/config"} {
		code, _, err := e.get("site.localhost", p)
		require.NoError(t, err)
		assert.NotEqual(t, http.StatusOK, code, p)
	}
	require.NoError(t, e.rt.Stop(context.Background(), job.DeploymentID))
	assert.False(t, answers(up))
}

func TestStorageLimitIsEnforcedAfterTheBuild(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	repo, _ := newRepo(t, map[string]string{"README": "x"})
	job := deployments.Job{DeploymentID: platform.NewID(), RepoURL: repo, BuildCommand: "truncate -s 2G big.bin",
		StartCommand: "true", Limits: deployments.Limits{StorageGi: 1}}
	_, err := e.rt.Build(context.Background(), job, nil)
	require.ErrorContains(t, err, "more than the plan's 1 GiB storage limit")
	job.Limits.StorageGi = 3
	_, err = e.rt.Build(context.Background(), job, nil)
	require.NoError(t, err)
}

func TestUnknownFrameworkWithoutCommandsIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	job := deployments.Job{DeploymentID: platform.NewID(), RepoURL: "https://example.com/a.git", Framework: "cobol"}
	_, err := e.rt.Build(context.Background(), job, nil)
	require.ErrorContains(t, err, `framework "cobol" has no preset`)
	job.BuildCommand = "make"
	_, err = e.rt.Start(context.Background(), job, nil)
	require.ErrorContains(t, err, `no start command is set and framework "cobol" has no preset`)
}

func TestCloseStopsEveryAppAndRefusesNewWork(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	repo, _ := newRepo(t, goApp("v1"))
	// A shell whose child is the listener: Close must take the whole group down.
	job := goJob(repo, "p")
	job.StartCommand = `./.keelson/app & echo $! > server.pid; wait`
	_, err := e.rt.Build(ctx, job, nil)
	require.NoError(t, err)
	up, err := e.rt.Start(ctx, job, nil)
	require.NoError(t, err)
	pid := readPid(t, filepath.Join(e.dataDir, "workspaces", job.DeploymentID, "src", "server.pid"))

	require.NoError(t, e.rt.Close(ctx))
	assert.False(t, answers(up))
	platformtest.Eventually(t, time.Minute, "the app's child to die", func() bool { return childGone(pid) })
	_, err = e.rt.Start(ctx, job, nil)
	require.ErrorContains(t, err, "shut down")
	_, err = e.rt.Build(ctx, job, nil)
	require.ErrorContains(t, err, "shut down")
}

// TestSecretsAreMaskedHoweverTheBuildPrintsThem: a hostile build prints its
// secrets split across the 8 KiB line cut, in pieces across writes, with and
// without a trailing newline, as a multi-line PEM, and with a NUL inside;
// none reaches the log. A one-character secret does not eat the output.
func TestSecretsAreMaskedHoweverTheBuildPrintsThem(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	repo, _ := newRepo(t, map[string]string{"README": "x"})
	logs := &sink{}
	const tok = "S3cr3tValueXYZ123456"
	pemLines := []string{"MIIEvQIBADANBgkqhkiG9w0BAQEFAASC", "BKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj"}
	pem := "-----BEGIN PRIVATE KEY-----\n" + strings.Join(pemLines, "\n") + "\n-----END PRIVATE KEY-----\n"
	job := deployments.Job{
		DeploymentID: platform.NewID(), ProjectSlug: "s", RepoURL: repo, StartCommand: "true",
		BuildCommand: `head -c 8180 /dev/zero | tr '\0' A; printf '%s\n' "$TOK"
printf 'half:%s' "$(echo "$TOK" | cut -c1-9)"; sleep 0.1; printf '%s:end\n' "$(echo "$TOK" | cut -c10-)"
printf 'nl:%s' "$NL"
printf '%s' "$PEM"
printf 'x marks the spot\n'
printf 'last:%s' "$TOK"`,
		Env: []deployments.EnvVar{
			{Key: "TOK", Value: tok, Secret: true},
			{Key: "NL", Value: "newline-secret-value\n", Secret: true},
			{Key: "PEM", Value: pem, Secret: true},
			{Key: "X", Value: "x", Secret: true},
		},
	}
	_, err := e.rt.Build(context.Background(), job, logs)
	require.NoError(t, err)
	all := logs.All()
	for _, s := range append([]string{tok, tok[:9], tok[9:], "newline-secret-value"}, pemLines...) {
		assert.NotContains(t, all, s)
	}
	assert.Contains(t, all, "half:***:end")
	assert.Contains(t, all, "nl:***")
	assert.Contains(t, all, "last:***")
	assert.Contains(t, all, "x marks the spot", "a one-character secret is not masked")
}

// TestAppStartsWhenAnotherProcessTakesItsPort: another process (a second
// server on the machine, a parallel test) binds the port picked for the app
// before the app does. The app cannot listen and exits; the start launches it
// once more on another port instead of failing.
func TestAppStartsWhenAnotherProcessTakesItsPort(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	job, gate, logs := gatedGoJob(t, e, "taken")
	done := startInBackground(e, job, logs)
	port := pickedPort(t, logs)
	// It accepts connections and closes them: it answers no HTTP.
	ln, err := net.Listen("tcp", "127.0.0.1:"+port)
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	require.NoError(t, os.WriteFile(gate, nil, 0o600))

	res := platformtest.Receive(t, done, 2*time.Minute, "the start")
	require.NoError(t, res.err, logs.All())
	assert.NotEqual(t, "127.0.0.1:"+port, res.up)
	_, err = e.rt.Route(ctx, "taken", job.DeploymentID, res.up)
	require.NoError(t, err)
	assert.Equal(t, "hello v1", e.mustGet(t, "taken.localhost", "/"))
	assert.Contains(t, logs.All(), "port "+port+" was taken by another process")
}

// TestAppIsNeverRoutedToAnotherProcessOnItsPort: another process (here the
// test itself, no process of the app) binds the port picked for the app
// before the app does, and answers HTTP on it. That answer must not make the
// app healthy: the deployment would be routed to someone else's app. The
// start launches the app once more on another port, and the route reaches
// the app.
func TestAppIsNeverRoutedToAnotherProcessOnItsPort(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	job, gate, logs := gatedGoJob(t, e, "foreign")
	done := startInBackground(e, job, logs)
	port := pickedPort(t, logs)
	asked := make(chan struct{}, 1)
	foreign := &http.Server{ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case asked <- struct{}{}:
			default:
			}
			_, _ = w.Write([]byte("not the app"))
		})}
	ln, err := net.Listen("tcp", "127.0.0.1:"+port)
	require.NoError(t, err)
	go func() { _ = foreign.Serve(ln) }()
	t.Cleanup(func() { foreign.Close() })
	// The health check reaches the other listener while the app still waits
	// for its gate: the app cannot have exited on the taken port yet.
	platformtest.Receive(t, asked, time.Minute, "a health check answered by the other listener")
	require.NoError(t, os.WriteFile(gate, nil, 0o600))

	res := platformtest.Receive(t, done, 2*time.Minute, "the start")
	require.NoError(t, res.err, logs.All())
	require.NotEqual(t, "127.0.0.1:"+port, res.up, "the app's upstream is the other process's listener")
	_, err = e.rt.Route(ctx, "foreign", job.DeploymentID, res.up)
	require.NoError(t, err)
	for range 5 {
		assert.Equal(t, "hello v1", e.mustGet(t, "foreign.localhost", "/"))
	}
	assert.Contains(t, logs.All(), "port "+port+" was taken by another process")
}

// gatedGoJob builds a Go app whose start command waits until the returned
// gate file exists, so a test can bind the app's port before the app does.
func gatedGoJob(t *testing.T, e *env, slug string) (deployments.Job, string, *sink) {
	t.Helper()
	repo, _ := newRepo(t, goApp("v1"))
	job := goJob(repo, slug)
	gate := filepath.Join(t.TempDir(), "gate")
	job.Env = append(job.Env, deployments.EnvVar{Key: "GATE", Value: gate})
	job.StartCommand = `while [ ! -e "$GATE" ]; do sleep 0.01; done; exec ./.keelson/app`
	logs := &sink{}
	_, err := e.rt.Build(context.Background(), job, logs)
	require.NoError(t, err, logs.All())
	return job, gate, logs
}

// started is how a Start in the background ended.
type started struct {
	up  string
	err error
}

// startInBackground starts job; the channel receives how the start ended.
func startInBackground(e *env, job deployments.Job, logs *sink) <-chan started {
	done := make(chan started, 1)
	go func() {
		up, err := e.rt.Start(context.Background(), job, logs)
		done <- started{up, err}
	}()
	return done
}

// pickedPort is the port the first launch of the app was given, read from
// its "starting app" line.
func pickedPort(t *testing.T, logs *sink) string {
	t.Helper()
	var port string
	platformtest.Eventually(t, time.Minute, "the app's port to be picked", func() bool {
		m := regexp.MustCompile(`\(PORT=(\d+)\)`).FindStringSubmatch(logs.All())
		if m != nil {
			port = m[1]
		}
		return m != nil
	})
	return port
}
