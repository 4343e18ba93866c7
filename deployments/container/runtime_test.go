package container_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/container"
	"github.com/keelson-dev/keelson/deployments/container/containertest"
	"github.com/keelson-dev/keelson/deployments/ingress"
	"github.com/keelson-dev/keelson/deployments/internal/runtimetest"
	"github.com/keelson-dev/keelson/deployments/rt"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	platformtest.Summary()
	if code == 0 {
		if err := platformtest.FindLeaks(goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("internal/poll.runtime_pollWait")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// sink records every log line as "stream: line".
type sink = runtimetest.Sink

type env struct {
	rt      *container.Runtime
	docker  *client.Client
	ingress *httptest.Server
	dataDir string
	cfg     container.Config
}

func newEnv(t testing.TB, mutate func(*container.Config)) *env {
	t.Helper()
	imgs, docker := containertest.Images(t)
	router, err := ingress.New(ingress.Config{PublicPort: 8081})
	require.NoError(t, err)
	cfg := container.Config{
		DataDir: t.TempDir(), AllowLocalRepos: true, Ingress: router, Images: imgs, Client: docker,
		Supervision: rt.Supervision{HealthTimeout: 60 * time.Second, StopGrace: 2 * time.Second, RestartBackoff: 10 * time.Millisecond},
	}
	if mutate != nil {
		mutate(&cfg)
	}
	rt, err := container.New(cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(router)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		assert.NoError(t, rt.Close(ctx))
		srv.Close()
		router.Close()
		containertest.RemoveInstance(docker, rt.Instance())
	})
	return &env{rt: rt, docker: docker, ingress: srv, dataDir: cfg.DataDir, cfg: cfg}
}

func (e *env) get(t testing.TB, host, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.ingress.URL+path, nil)
	require.NoError(t, err)
	req.Host = host
	res, err := e.ingress.Client().Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(b)
}

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

func newRepo(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	git(t, dir, "init", "-q")
	for name, content := range files {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	git(t, dir, "add", "-A")
	git(t, dir, "commit", "-q", "-m", "c")
	return dir
}

func goJob(repo string) deployments.Job {
	return deployments.Job{
		DeploymentID: platform.NewID(), ProjectID: platform.NewID(), ProjectSlug: "app" + platformtest.Unique(8),
		RepoURL: repo, Framework: "go",
		Env: []deployments.EnvVar{
			{Key: "API_TOKEN", Value: "tok-s3cret-value-42", Secret: true},
			{Key: "GREETING", Value: "hi"},
		},
		Limits: deployments.Limits{MemoryMi: 200, CPUMillis: 1000},
	}
}

// One build serves every check of a running app (builds are the slow part).
func TestGoApp_LimitsRestartsOOMAdoptionAndCleanup(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	job := goJob(newRepo(t, containertest.HostileApp("v1")))
	logs := &sink{}
	commit, err := e.rt.Build(ctx, job, logs)
	require.NoError(t, err, logs.All())
	require.Len(t, commit, 40)

	// The secret is in no layer, history entry or label of the image.
	img, err := e.docker.ImageInspect(ctx, "keelson/"+e.rt.Instance()+"-"+job.ProjectID+":"+job.DeploymentID)
	require.NoError(t, err)
	raw := fmt.Sprint(img.Config, img.Config.Labels)
	assert.NotContains(t, raw, "tok-s3cret-value-42")
	hist, err := e.docker.ImageHistory(ctx, img.ID)
	require.NoError(t, err)
	assert.NotContains(t, fmt.Sprint(hist), "tok-s3cret-value-42")
	assert.Equal(t, job.ProjectID, img.Config.Labels[container.LabelProject])

	up, err := e.rt.Start(ctx, job, logs)
	require.NoError(t, err, logs.All())
	ap, err := netip.ParseAddrPort(up)
	require.NoError(t, err, up)
	require.True(t, ap.Addr().IsPrivate(), "the app's address on its network: %s", up) // no published port
	_, err = e.rt.Route(ctx, job.ProjectSlug, job.DeploymentID, up)
	require.NoError(t, err)
	host := job.ProjectSlug + ".localhost"
	code, body := e.get(t, host, "/")
	require.Equal(t, 200, code, body)
	assert.Equal(t, "hello v1", body)
	_, body = e.get(t, host, "/env?k=API_TOKEN")
	assert.Equal(t, "tok-s3cret-value-42", body, "secrets reach the app at run time")
	_, body = e.get(t, host, "/env?k=PORT")
	assert.Equal(t, "8080", body)
	platformtest.Eventually(t, 90*time.Second, "the app's first line", func() bool { return strings.Contains(logs.All(), "app: app starting with token=***") })
	assert.NotContains(t, logs.All(), "tok-s3cret-value-42")

	// Limits and hardening, as the engine reports them.
	list, err := e.docker.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: client.Filters{}.Add("label", container.LabelDeployment+"="+job.DeploymentID)})
	require.NoError(t, err)
	require.Len(t, list.Items, 1)
	cid := list.Items[0].ID
	ins, err := e.docker.ContainerInspect(ctx, cid, client.ContainerInspectOptions{})
	require.NoError(t, err)
	hc := ins.Container.HostConfig
	assert.Equal(t, int64(200<<20), hc.Memory)
	assert.Equal(t, int64(200<<20), hc.MemorySwap, "no swap on top of the memory limit")
	assert.Equal(t, int64(1_000_000_000), hc.NanoCPUs)
	require.NotNil(t, hc.PidsLimit)
	assert.Positive(t, *hc.PidsLimit)
	assert.Equal(t, []string{"ALL"}, []string(hc.CapDrop))
	assert.Contains(t, hc.SecurityOpt, "no-new-privileges:true")
	assert.False(t, hc.Privileged)
	assert.Empty(t, hc.Binds)
	assert.Empty(t, ins.Container.Mounts)
	assert.Equal(t, job.ProjectID, ins.Container.Config.Labels[container.LabelProject])

	// Inside: the cgroup holds the plan's limits, no host path is there.
	_, body = e.get(t, host, "/read?p=/sys/fs/cgroup/memory/memory.limit_in_bytes")
	if strings.HasPrefix(body, "ERR") { // cgroup v2
		_, body = e.get(t, host, "/read?p=/sys/fs/cgroup/memory.max")
	}
	assert.Equal(t, fmt.Sprint(200<<20), strings.TrimSpace(body))
	_, body = e.get(t, host, "/read?p=/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
	if strings.HasPrefix(body, "ERR") { // cgroup v2: "quota period"
		_, body = e.get(t, host, "/read?p=/sys/fs/cgroup/cpu.max")
		body = strings.Fields(body)[0]
	}
	assert.Equal(t, "100000", strings.TrimSpace(body), "1000 millicores = 100000us per 100000us period")
	_, body = e.get(t, host, "/read?p="+e.dataDir+"/containers/"+job.DeploymentID+"/src/main.go")
	assert.True(t, strings.HasPrefix(body, "ERR"), body)

	// A crash restarts it.
	_, _ = e.get(t, host, "/crash")
	platformtest.Eventually(t, 90*time.Second, "the crash in the log", func() bool { return strings.Contains(logs.All(), "the app exited (exit code 3)") })
	platformtest.Eventually(t, 90*time.Second, "the app after the crash", func() bool { c, b := e.get(t, host, "/"); return c == 200 && b == "hello v1" })

	// Past the memory limit it is killed, the log says so in words, and it comes back.
	_, _ = e.get(t, host, "/alloc?mb=400")
	platformtest.Eventually(t, 90*time.Second, "the OOM kill in the log", func() bool {
		return strings.Contains(logs.All(), "app killed: out of memory (limit 200 MiB)")
	})
	platformtest.Eventually(t, 90*time.Second, "the app after the OOM kill", func() bool { c, b := e.get(t, host, "/"); return c == 200 && b == "hello v1" })

	// A container removed behind the runtime's back is created again.
	_, err = e.docker.ContainerRemove(ctx, cid, client.ContainerRemoveOptions{Force: true})
	require.NoError(t, err)
	platformtest.Eventually(t, 90*time.Second, "the container to be made again", func() bool {
		return strings.Contains(logs.All(), "the app's container is gone; creating it again")
	})
	platformtest.Eventually(t, 90*time.Second, "the app after its container was removed", func() bool {
		c, b := e.get(t, host, "/")
		return c == 200 && b == "hello v1"
	})
	list, err = e.docker.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: client.Filters{}.Add("label", container.LabelDeployment+"="+job.DeploymentID)})
	require.NoError(t, err)
	require.Len(t, list.Items, 1)
	cid = list.Items[0].ID

	// A second runtime on the same data dir (a server restarted after kill -9)
	// adopts the running container instead of starting another.
	router2, err := ingress.New(ingress.Config{PublicPort: 8081})
	require.NoError(t, err)
	defer router2.Close()
	cfg2 := e.cfg
	cfg2.Ingress = router2
	rt2, err := container.New(cfg2)
	require.NoError(t, err)
	logs2 := &sink{}
	up2, err := rt2.Start(ctx, job, logs2)
	require.NoError(t, err, logs2.All())
	assert.Contains(t, logs2.All(), "adopting it")
	list, err = e.docker.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: client.Filters{}.Add("label", container.LabelDeployment+"="+job.DeploymentID)})
	require.NoError(t, err)
	require.Len(t, list.Items, 1, "adopted, not started twice")
	assert.Equal(t, cid, list.Items[0].ID)
	assert.NotEmpty(t, up2)

	// Cleanup leaves nothing of the deployment; CleanupProject nothing of the project.
	require.NoError(t, e.rt.Stop(ctx, job.DeploymentID))
	require.NoError(t, rt2.Cleanup(ctx, job.DeploymentID))
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	require.NoError(t, rt2.Close(cctx))
	cancel()
	assert.Empty(t, containertest.Leftovers(t, e.docker, e.rt.Instance(), container.LabelDeployment, job.DeploymentID))
	require.NoError(t, e.rt.CleanupProject(ctx, job.ProjectID))
	assert.Empty(t, containertest.Leftovers(t, e.docker, e.rt.Instance(), container.LabelProject, job.ProjectID))
	cctx, cancel = context.WithTimeout(ctx, time.Minute)
	require.NoError(t, e.rt.Close(cctx))
	cancel()
	assert.Empty(t, containertest.Leftovers(t, e.docker, e.rt.Instance(), "", ""))
}

func TestBuildTimeoutLeavesNothingRunning(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	marker := "keelson-timeout-" + platformtest.Unique(8)
	job := goJob(newRepo(t, map[string]string{
		"Dockerfile": "FROM " + e.cfg.Images.Static + "\nRUN echo " + marker + " && sleep 600\n",
	}))
	job.Framework = "docker"
	job.Limits.BuildTimeout = 3 * time.Second
	logs := &sink{}
	_, err := e.rt.Build(ctx, job, logs)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "build timed out after 3s")
	platformtest.Eventually(t, 90*time.Second, "the build container to go", func() bool {
		res, err := e.docker.ContainerList(ctx, client.ContainerListOptions{All: true})
		require.NoError(t, err)
		for _, c := range res.Items {
			if strings.Contains(c.Command, marker) {
				return false
			}
		}
		return true
	})
	require.NoError(t, e.rt.Cleanup(ctx, job.DeploymentID))
}

func TestFrameworkDockerNeedsADockerfile(t *testing.T) {
	e := newEnv(t, nil)
	job := goJob(newRepo(t, map[string]string{"index.html": "hi"}))
	job.Framework = "docker"
	_, err := e.rt.Build(context.Background(), job, &sink{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `framework "docker" needs a Dockerfile at the root of the repository`)
}

// A static site whose dist is a symlink to / serves the container's own
// file system, never the server's.
func TestStaticSymlinkServesNothingOfTheHost(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	require.NoError(t, os.WriteFile(filepath.Join(e.dataDir, "host-only-secret"), []byte("host-secret-7731"), 0o600))
	repo := newRepo(t, map[string]string{"index.html": "<h1>site</h1>"})
	require.NoError(t, os.Symlink("/", filepath.Join(repo, "dist")))
	git(t, repo, "add", "-A")
	git(t, repo, "commit", "-q", "-m", "link")
	job := goJob(repo)
	job.Framework = "static"
	logs := &sink{}
	_, err := e.rt.Build(ctx, job, logs)
	require.NoError(t, err, logs.All())
	up, err := e.rt.Start(ctx, job, logs)
	require.NoError(t, err, logs.All())
	_, err = e.rt.Route(ctx, job.ProjectSlug, job.DeploymentID, up)
	require.NoError(t, err)
	host := job.ProjectSlug + ".localhost"
	code, body := e.get(t, host, "/index.html")
	assert.Equal(t, 200, code)
	assert.Contains(t, body, "site")
	_, body = e.get(t, host, "/dist"+e.dataDir+"/host-only-secret")
	assert.NotContains(t, body, "host-secret-7731")
	require.NoError(t, e.rt.Cleanup(ctx, job.DeploymentID))
	require.NoError(t, e.rt.CleanupProject(ctx, job.ProjectID))
	assert.Empty(t, containertest.Leftovers(t, e.docker, e.rt.Instance(), container.LabelProject, job.ProjectID))
}

// The engine's refusals reach the user as sentences, not engine text.
func TestEngineErrorsInPlainWords(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	job := goJob(newRepo(t, map[string]string{"Dockerfile": "FROM keelson-test/no-such-image-" + platformtest.Unique(8) + ":1\n"}))
	job.Framework = "docker"
	_, err := e.rt.Build(ctx, job, &sink{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the image build failed: a base image")
	assert.NotContains(t, err.Error(), "Error response from daemon")

	// A build the engine refuses outright carries the engine's reason, which
	// is about the tenant's own Dockerfile; an empty one is refused before
	// the engine sees it (with the image's LABEL line appended).
	for dockerfile, reason := range map[string]string{
		"":                      "the repository's Dockerfile is empty: it needs at least a FROM instruction",
		"# nothing\n\n":         "the repository's Dockerfile is empty: it needs at least a FROM instruction",
		"FROM scratch\nFOO x\n": "the container engine refused the build: dockerfile parse error line 2: unknown instruction: FOO",
	} {
		bad := goJob(newRepo(t, map[string]string{"Dockerfile": dockerfile}))
		bad.Framework = "docker"
		_, err = e.rt.Build(ctx, bad, &sink{})
		require.Error(t, err)
		assert.Contains(t, err.Error(), reason)
		assert.NotContains(t, err.Error(), "Error response from daemon")
		require.NoError(t, e.rt.Cleanup(ctx, bad.DeploymentID))
	}

	_, err = e.rt.Start(ctx, goJob("/nowhere"), &sink{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "has not been built (no image)")
	require.NoError(t, e.rt.Cleanup(ctx, job.DeploymentID))
}

// The instance id is random, kept in the data dir, and the same when a
// server starts again on that dir; it never follows from the path.
func TestInstanceIDStoredInDataDir(t *testing.T) {
	router, err := ingress.New(ingress.Config{PublicPort: 8081})
	require.NoError(t, err)
	defer router.Close()
	open := func(dir string) string {
		rt, err := container.New(container.Config{DataDir: dir, Ingress: router})
		require.NoError(t, err)
		require.NoError(t, rt.Close(context.Background()))
		return rt.Instance()
	}
	dir := t.TempDir()
	first := open(dir)
	assert.Regexp(t, `^[0-9a-f]{12}$`, first)
	b, err := os.ReadFile(filepath.Join(dir, "containers", "instance"))
	require.NoError(t, err)
	assert.Equal(t, first+"\n", string(b))
	assert.Equal(t, first, open(dir), "the same data dir, the same instance")

	// The same path after the data dir was made anew (another machine, or
	// the image's default /data): another instance.
	require.NoError(t, os.RemoveAll(dir))
	assert.NotEqual(t, first, open(dir))
}

// An app that keeps crashing is given up, and its route goes with it: its
// host answers 404 instead of proxying to a port the engine freed.
func TestGivenUpAppLosesItsRoute(t *testing.T) {
	e := newEnv(t, func(c *container.Config) { c.MaxRestarts = 1 })
	ctx := context.Background()
	job := goJob(newRepo(t, map[string]string{
		"Dockerfile": "FROM " + e.cfg.Images.Static + "\nRUN mkdir -p /site && echo up > /site/index.html\n" +
			`CMD ["sh", "-c", "httpd -p $PORT -h /site; sleep 2; exit 3"]` + "\n",
	}))
	job.Framework = "docker"
	logs := &sink{}
	_, err := e.rt.Build(ctx, job, logs)
	require.NoError(t, err, logs.All())
	up, err := e.rt.Start(ctx, job, logs)
	require.NoError(t, err, logs.All())
	_, err = e.rt.Route(ctx, job.ProjectSlug, job.DeploymentID, up)
	require.NoError(t, err)
	platformtest.Eventually(t, 90*time.Second, "the runtime to give up", func() bool {
		return strings.Contains(logs.All(), "not restarting it") && strings.Contains(logs.All(), "its route is removed")
	})
	code, body := e.get(t, job.ProjectSlug+".localhost", "/")
	assert.Equal(t, http.StatusNotFound, code, body)

	require.NoError(t, e.rt.Cleanup(ctx, job.DeploymentID))
	require.NoError(t, e.rt.CleanupProject(ctx, job.ProjectID))
	assert.Empty(t, containertest.Leftovers(t, e.docker, e.rt.Instance(), container.LabelProject, job.ProjectID))
}
