package temporal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/fleet"
	"github.com/keelson-dev/keelson/deployments/hosts"
	"github.com/keelson-dev/keelson/deployments/ingress"
	"github.com/keelson-dev/keelson/deployments/internal/deploytest"
	"github.com/keelson-dev/keelson/deployments/process"
	"github.com/keelson-dev/keelson/deployments/temporal/temporaltest"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/keelson-dev/keelson/platform/platformtest"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
)

// dial connects a new client to the dev server (as another process would).
func dial(t *testing.T, srv *testsuite.DevServer) client.Client {
	t.Helper()
	c, err := client.Dial(client.Options{HostPort: srv.FrontendHostPort(), Namespace: "default", Logger: temporaltest.QuietLogger()})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// integrationTimeouts keep worker-loss detection short in tests.
var integrationTimeouts = Timeouts{Heartbeat: 2 * time.Second, HostPickup: 10 * time.Second}

// cluster is one API side (service + engine) and the database it shares with workers.
type cluster struct {
	srv      *testsuite.DevServer
	store    *deployments.Store
	logs     *deployments.Logs
	projects deployments.ProjectSource
	engine   *Engine
	svc      *deployments.Service
	queue    string
	// shares and slotLease are the build shares and slot lease of the
	// workers startWorker starts (nil, 0: the defaults).
	shares    deployments.Shares
	slotLease time.Duration
	slots     deployments.SlotPolicy // the workers' BuildSlots and FreeSlots (zero: the defaults)
	placer    Placer                 // the workers' Placer (nil: any worker builds)
}

func newCluster(t *testing.T, srv *testsuite.DevServer, bdb *bun.DB, projects deployments.ProjectSource) *cluster {
	t.Helper()
	// The random end of an ID: its start is the time, the same for clusters
	// made at once (parallel subtests), whose workers would share the queue.
	id := platform.NewID()
	c := &cluster{srv: srv, projects: projects, queue: "keelson-test-" + id[len(id)-12:]}
	tc := dial(t, srv)
	var err error
	// The API side's activities stop apps through their workflows (ControlRuntime).
	c.svc, err = deployments.New(deployments.Deps{DB: bdb, Auth: deploytest.Authn{}, Projects: projects,
		Runtime: ControlRuntime{Client: tc}, LogTokenKey: bytes.Repeat([]byte("k"), 32), CancelTimeout: time.Minute,
		NewEngine: func(ed deployments.EngineDeps) (deployments.Engine, error) {
			c.engine, err = NewEngine(EngineConfig{Client: tc, TaskQueue: c.queue, Store: ed.Store, Projects: ed.Projects,
				Logs: ed.Logs, Activities: ed.Activities, Timeouts: integrationTimeouts})
			return c.engine, err
		}})
	require.NoError(t, err)
	c.store, c.logs = deployments.NewStore(bdb), c.svc.Logs()
	t.Cleanup(func() { _ = c.svc.Close(context.Background()) })
	return c
}

// startWorker runs an in-process worker over rt until t ends (or stop is called).
func (c *cluster) startWorker(t *testing.T, rt deployments.Runtime) (stop func()) {
	t.Helper()
	_, stop = c.startHost(t, rt, "")
	return stop
}

// startHost starts a worker with host id (a new one when empty) and returns it.
func (c *cluster) startHost(t *testing.T, rt deployments.Runtime, id string) (w *Worker, stop func()) {
	t.Helper()
	// A worker process has its own log hub over the same database.
	logs := deployments.NewLogs(c.store, deployments.LogsConfig{})
	acts, err := deployments.NewActivities(deployments.ActivitiesConfig{Store: c.store, Logs: logs, Runtime: rt, Projects: c.projects})
	require.NoError(t, err)
	w, err = NewWorker(dial(t, c.srv), c.queue, rt, WorkerConfig{Activities: acts, Store: c.store, HostID: id,
		Shares: c.shares, SlotLease: c.slotLease, Placer: c.placer, BuildSlots: c.slots.Slots, FreeSlots: c.slots.FreeSlots, Options: worker.Options{WorkerStopTimeout: 5 * time.Second}})
	require.NoError(t, err)
	require.NoError(t, w.Start())
	var once sync.Once
	stop = func() { once.Do(func() { w.Stop(); logs.Close() }) }
	t.Cleanup(stop)
	return w, stop
}

// waitStatus polls the status route (which syncs from the engine) until the
// deployment reaches want, failing on another terminal status. It records
// every status seen.
func (c *cluster) waitStatus(t *testing.T, owner, id string, want deployments.Status) (*deployments.Deployment, []deployments.Status) {
	t.Helper()
	var seen []deployments.Status
	var d *deployments.Deployment
	platformtest.Eventually(t, 3*time.Minute, "deployment "+id+" to be "+string(want), func() bool {
		var err error
		d, err = c.svc.Status(context.Background(), owner, id)
		require.NoError(t, err)
		if len(seen) == 0 || seen[len(seen)-1] != d.Status {
			seen = append(seen, d.Status)
		}
		if d.Status != want && d.Status.Terminal() {
			t.Fatalf("deployment ended %s (want %s): %s\nlog:\n%s", d.Status, want, d.ErrorMessage, c.logText(t, id))
		}
		return d.Status == want
	})
	return d, seen
}

func (c *cluster) logText(t *testing.T, id string) string {
	_ = c.logs.Flush(context.Background())
	lines, err := c.store.LogList(context.Background(), deployments.LogListParams{DeploymentID: id, Limit: 100000})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "%d %s: %s\n", l.Seq, l.Stream, l.Message)
	}
	return b.String()
}

// --- a real app: a local git repository holding a tiny Go web app -----------

func gitRun(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "git %v: %s", args, out)
}

func goAppRepo(t *testing.T, version string) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/hello\n\ngo 1.21\n",
		"main.go": `package main

import (
	"fmt"
	"net/http"
	"os"
)

func main() {
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello ` + version + `") })
	fmt.Println("app starting")
	if err := http.ListenAndServe("127.0.0.1:"+os.Getenv("PORT"), nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
`,
	}
	for name, content := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
	gitRun(t, dir, "init", "-q")
	gitRun(t, dir, "add", "-A")
	gitRun(t, dir, "commit", "-q", "-m", "app")
	return dir
}

// processRuntime is the real process runtime with its ingress, served by an httptest server.
func processRuntime(t *testing.T) (*process.Runtime, *httptest.Server) {
	t.Helper()
	router, err := ingress.New(ingress.Config{})
	require.NoError(t, err)
	cache := t.TempDir()
	// Share the go command's build cache so the app compiles fast.
	if out, err := exec.Command("go", "env", "GOCACHE").Output(); err == nil {
		if gc := strings.TrimSpace(string(out)); gc != "" && gc != "off" {
			_ = os.Symlink(gc, filepath.Join(cache, "go-build"))
		}
	}
	cfg := process.Config{DataDir: t.TempDir(), CacheDir: cache, AllowLocalRepos: true, Ingress: router}
	cfg.StopGrace = 2 * time.Second
	rt, err := process.New(cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(router)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = rt.Close(ctx)
		srv.Close()
		router.Close()
	})
	return rt, srv
}

func getApp(t *testing.T, ingressURL, slug string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, ingressURL+"/", nil)
	require.NoError(t, err)
	req.Host = slug + ".localhost"
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func goSpec(repo, slug string) deployments.DeploySpec {
	return deployments.DeploySpec{OwnerID: platform.NewID(), Slug: slug, Name: slug, RepoURL: repo, Framework: "go",
		Port: 8080, Region: "local", Limits: deployments.Limits{BuildTimeout: 5 * time.Minute},
		Env: []deployments.EnvVar{
			{Key: "GOPROXY", Value: "off"}, {Key: "GOTOOLCHAIN", Value: "local"},
			{Key: "APP_SECRET", Value: "very-secret-value", Secret: true},
		}}
}

// TestTemporalDeploymentRunsToLive: the real dev server, the real process
// runtime, a real git repository; on SQLite and Postgres.
func TestTemporalDeploymentRunsToLive(t *testing.T) {
	srv := temporaltest.StartDevServer(t)
	dbtest.Each(t, []db.MigrationSet{deployments.Migrations()}, func(t *testing.T, bdb *bun.DB) {
		projects := deploytest.NewProjects()
		slug := "live-" + platformtest.Unique(8)
		spec := goSpec(goAppRepo(t, "v1"), slug)
		pid := projects.Add(spec)
		c := newCluster(t, srv, bdb, projects)
		rt, ing := processRuntime(t)
		c.startWorker(t, rt)

		d, err := c.svc.Trigger(context.Background(), deployments.TriggerParams{ProjectID: pid, OwnerID: spec.OwnerID})
		require.NoError(t, err)
		require.Equal(t, WorkflowID(d.ID), d.WorkflowName, "the workflow id is the workflowName")

		live, seen := c.waitStatus(t, spec.OwnerID, d.ID, deployments.StatusLive)
		// The statuses seen walk forward through the lifecycle (the first poll
		// may already find it past QUEUED).
		order := []deployments.Status{deployments.StatusQueued, deployments.StatusBuilding,
			deployments.StatusProvisioning, deployments.StatusConfiguringDNS, deployments.StatusLive}
		pos := 0
		for _, s := range seen {
			for pos < len(order) && order[pos] != s {
				pos++
			}
			require.Less(t, pos, len(order), "statuses out of order: %v", seen)
		}
		require.NotEmpty(t, live.DeployedURL)
		require.NotEmpty(t, live.CommitSHA)
		for _, s := range live.Steps {
			require.Equal(t, deployments.StepSucceeded, s.Status, "step %s", s.Name)
		}
		code, body := getApp(t, ing.URL, slug)
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, "hello v1", body)

		// The workflow answers its own view of the steps.
		ws, err := c.engine.WorkflowState(context.Background(), d.ID)
		require.NoError(t, err)
		require.Equal(t, deployments.StatusLive, ws.Status)
		require.NotEmpty(t, ws.HostQueue)
		log := c.logText(t, d.ID)
		require.Contains(t, log, "deployment queued")
		require.Contains(t, log, "BUILD started")
		require.Contains(t, log, "app starting")
		require.NotContains(t, log, "very-secret-value")

		// Deleting it asks the workflow to stop the app on its worker.
		require.NoError(t, c.svc.Delete(context.Background(), spec.OwnerID, d.ID))
		code, _ = getApp(t, ing.URL, slug)
		require.NotEqual(t, http.StatusOK, code, "the app is stopped and unrouted")
		desc, err := c.engine.cfg.Client.DescribeWorkflowExecution(context.Background(), d.WorkflowName, "")
		require.NoError(t, err)
		require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, desc.GetWorkflowExecutionInfo().GetStatus())
	})
}

// TestTemporalCancelMidBuild: cancelling during BUILD kills the build command
// (a real process) and ends the deployment CANCELLED.
func TestTemporalCancelMidBuild(t *testing.T) {
	srv := temporaltest.StartDevServer(t)
	bdb := dbtest.SQLite(t, deployments.Migrations())
	projects := deploytest.NewProjects()
	pidFile := filepath.Join(t.TempDir(), "build.pid")
	spec := goSpec(goAppRepo(t, "v1"), "cancel-"+platformtest.Unique(8))
	spec.BuildCommand = "echo build is running; echo $$ > " + pidFile + "; exec sleep 600"
	pid := projects.Add(spec)
	c := newCluster(t, srv, bdb, projects)
	rt, _ := processRuntime(t)
	c.startWorker(t, rt)

	d, err := c.svc.Trigger(context.Background(), deployments.TriggerParams{ProjectID: pid, OwnerID: spec.OwnerID})
	require.NoError(t, err)
	var buildPID int
	platformtest.Eventually(t, 20*time.Second, "the build command runs", func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return false
		}
		buildPID, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})

	got, err := c.svc.Cancel(context.Background(), spec.OwnerID, d.ID)
	require.NoError(t, err)
	require.Equal(t, deployments.StatusCancelled, got.Status, "log:\n%s", c.logText(t, d.ID))
	require.Equal(t, deployments.StepFailed, got.Steps.Get(deployments.StepBuild).Status)
	require.Equal(t, deployments.StepSkipped, got.Steps.Get(deployments.StepProvision).Status)
	platformtest.Eventually(t, 20*time.Second, "the build process is gone", func() bool {
		return errors.Is(syscall.Kill(buildPID, 0), syscall.ESRCH)
	})
	// Temporal agrees: the workflow ended cancelled. (It ends just after its
	// last activity recorded CANCELLED, which is what Cancel waits for.)
	var status enumspb.WorkflowExecutionStatus
	platformtest.Eventually(t, 20*time.Second, "the workflow ends", func() bool {
		desc, err := c.engine.cfg.Client.DescribeWorkflowExecution(context.Background(), d.WorkflowName, "")
		require.NoError(t, err)
		status = desc.GetWorkflowExecutionInfo().GetStatus()
		return status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	})
	require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED, status)
	st, err := c.svc.Status(context.Background(), spec.OwnerID, d.ID)
	require.NoError(t, err)
	require.Equal(t, deployments.StatusCancelled, st.Status)
}

// --- a worker in another process, killed mid-build --------------------------

const helperEnv = "KEELSON_TEMPORAL_TEST_HELPER_WORKER"

// staticProjects answers one spec for every project id (the helper process
// has no projects module; the IDs come from the parent's database).
type staticProjects struct{ spec deployments.DeploySpec }

func (p staticProjects) ProjectForDeploy(context.Context, string) (*deployments.DeploySpec, error) {
	s := p.spec
	return &s, nil
}

// blockingBuild is a runtime whose builds announce themselves in a marker
// file and then run until their context ends (or the process is killed).
type blockingBuild struct {
	*deploytest.Runtime
	marker string
}

func (b blockingBuild) Build(ctx context.Context, job deployments.Job, logs deployments.LogSink) (string, error) {
	logs.Log(deployments.StreamBuild, "helper worker building")
	if err := os.WriteFile(b.marker, []byte(job.DeploymentID), 0o644); err != nil {
		return "", err
	}
	<-ctx.Done()
	return "", ctx.Err()
}

// TestHelperWorkerProcess is not a test: run by TestTemporalWorkerKilledMidBuild
// in a child process, it is a worker until it is killed.
func TestHelperWorkerProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("helper process for TestTemporalWorkerKilledMidBuild")
	}
	ctx := context.Background()
	bdb, err := db.Open(ctx, db.Options{URL: os.Getenv("HELPER_DB_URL")})
	require.NoError(t, err)
	store := deployments.NewStore(bdb)
	logs := deployments.NewLogs(store, deployments.LogsConfig{})
	rt := blockingBuild{Runtime: deploytest.NewRuntime(), marker: os.Getenv("HELPER_MARKER")}
	acts, err := deployments.NewActivities(deployments.ActivitiesConfig{Store: store, Logs: logs, Runtime: rt,
		Projects: staticProjects{spec: deployments.DeploySpec{Slug: os.Getenv("HELPER_SLUG"), RepoURL: "https://example.test/app.git"}}})
	require.NoError(t, err)
	c, err := client.Dial(client.Options{HostPort: os.Getenv("HELPER_HOSTPORT"), Namespace: "default", Logger: temporaltest.QuietLogger()})
	require.NoError(t, err)
	w, err := NewWorker(c, os.Getenv("HELPER_QUEUE"), rt, WorkerConfig{Activities: acts, Store: store,
		Options: worker.Options{StickyScheduleToStartTimeout: time.Second}})
	require.NoError(t, err)
	require.NoError(t, w.Start())
	select {} // until killed
}

// TestTemporalWorkerKilledMidBuild: the worker process running BUILD is
// killed (SIGKILL); Temporal notices the missing heartbeats and retries BUILD
// on another worker, which finishes the deployment. Shares Postgres between
// the two processes. The runtimes are scripted (the orchestration is under test).
func TestTemporalWorkerKilledMidBuild(t *testing.T) {
	srv := temporaltest.StartDevServer(t)
	url := dbtest.PostgresURL(t)
	ctx := context.Background()
	bdb, err := db.Open(ctx, db.Options{URL: url})
	require.NoError(t, err)
	t.Cleanup(func() { bdb.Close() })
	require.NoError(t, db.Migrate(ctx, bdb, deployments.Migrations()))

	projects := deploytest.NewProjects()
	spec := deployments.DeploySpec{OwnerID: platform.NewID(), Slug: "kill-" + platformtest.Unique(8),
		RepoURL: "https://example.test/app.git", Framework: "go", Region: "local"}
	pid := projects.Add(spec)
	c := newCluster(t, srv, bdb, projects)

	marker := filepath.Join(t.TempDir(), "building")
	out := &platformtest.SyncBuffer{}
	helper := exec.Command(os.Args[0], "-test.run=^TestHelperWorkerProcess$", "-test.count=1", "-test.timeout=10m")
	helper.Env = append(os.Environ(), helperEnv+"=1", "HELPER_DB_URL="+url, "HELPER_MARKER="+marker,
		"HELPER_SLUG="+spec.Slug, "HELPER_HOSTPORT="+srv.FrontendHostPort(), "HELPER_QUEUE="+c.queue)
	helper.Stdout, helper.Stderr = out, out
	require.NoError(t, helper.Start())
	t.Cleanup(func() { _ = helper.Process.Kill(); _ = helper.Wait() })

	d, err := c.svc.Trigger(ctx, deployments.TriggerParams{ProjectID: pid, OwnerID: spec.OwnerID})
	require.NoError(t, err)
	platformtest.Eventually(t, 20*time.Second, "the helper worker is building", func() bool {
		b, err := os.ReadFile(marker)
		return err == nil && string(b) == d.ID
	})
	building, err := c.svc.Status(ctx, spec.OwnerID, d.ID)
	require.NoError(t, err)
	require.Equal(t, deployments.StatusBuilding, building.Status)

	require.NoError(t, helper.Process.Kill()) // SIGKILL: no goodbye to Temporal
	_ = helper.Wait()

	rt := deploytest.NewRuntime()
	c.startWorker(t, rt)
	live, _ := c.waitStatus(t, spec.OwnerID, d.ID, deployments.StatusLive)
	require.Equal(t, []string{d.ID}, rt.Builds(), "BUILD ran again on the new worker")
	require.Equal(t, 2, live.Attempt)
	require.Equal(t, d.ID, rt.RouteOf(spec.Slug))
	log := c.logText(t, d.ID)
	require.Contains(t, log, "helper worker building")
	require.Contains(t, log, "queued again from BUILD")
	require.Contains(t, log, "deployment is LIVE")
}

// TestTemporalCordonedHostTakesNoDeployment: of two workers, a cordoned one
// builds nothing, so PROVISION and DNS (which follow the builder) never land
// on it: each deployment goes LIVE on the other host and answers there.
// Uncordoned, it takes work again; cordoning a host keeps its apps running.
func TestTemporalCordonedHostTakesNoDeployment(t *testing.T) {
	srv := temporaltest.StartDevServer(t)
	bdb := dbtest.SQLite(t, deployments.Migrations())
	projects := deploytest.NewProjects()
	slug := "cordon-" + platformtest.Unique(8)
	spec := goSpec(goAppRepo(t, "v1"), slug)
	pid := projects.Add(spec)
	c := newCluster(t, srv, bdb, projects)
	rtA, ingA := processRuntime(t)
	rtB, ingB := processRuntime(t)
	a, _ := c.startHost(t, rtA, "host-a")
	b, _ := c.startHost(t, rtB, "host-b")

	deployOn := func(want *Worker, ing *httptest.Server) *deployments.Deployment {
		t.Helper()
		d, err := c.svc.Trigger(context.Background(), deployments.TriggerParams{ProjectID: pid, OwnerID: spec.OwnerID})
		require.NoError(t, err)
		c.waitStatus(t, spec.OwnerID, d.ID, deployments.StatusLive)
		got, err := c.store.DeploymentGet(context.Background(), d.ID)
		require.NoError(t, err)
		require.Equal(t, want.HostQueue(), got.Host, "placed on the host that is not cordoned")
		code, body := getApp(t, ing.URL, slug)
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, "hello v1", body)
		return got
	}

	require.NoError(t, a.Cordon(true))
	deployOn(b, ingB)

	require.NoError(t, a.Cordon(false))
	require.NoError(t, b.Cordon(true))
	deployOn(a, ingA)
	// B's app was replaced through B's own queue while B was cordoned.
	platformtest.Eventually(t, time.Minute, "the replaced app on the cordoned host to stop", func() bool {
		code, _ := getApp(t, ingB.URL, slug)
		return code != http.StatusOK
	})
	require.NoError(t, b.Cordon(false))
}

// TestTemporalRollbackRunsOnTheHostThatKeptTheBuild: v1 then v2 go LIVE on
// one of two workers; a rollback to v1 runs its BUILD on the host that
// kept v1's build (not built again: the step is SKIPPED), goes LIVE there
// and answers v1 again.
func TestTemporalRollbackRunsOnTheHostThatKeptTheBuild(t *testing.T) {
	srv := temporaltest.StartDevServer(t)
	ctx := context.Background()
	bdb := dbtest.SQLite(t, deployments.Migrations())
	projects := deploytest.NewProjects()
	slug := "rollback-" + platformtest.Unique(8)
	repo := goAppRepo(t, "v1")
	spec := goSpec(repo, slug)
	pid := projects.Add(spec)
	c := newCluster(t, srv, bdb, projects)
	rtA, ingA := processRuntime(t)
	rtB, ingB := processRuntime(t)
	a, _ := c.startHost(t, rtA, "host-a")
	b, _ := c.startHost(t, rtB, "host-b")
	ing := map[string]*httptest.Server{a.HostQueue(): ingA, b.HostQueue(): ingB}

	deploy := func(version string) *deployments.Deployment {
		t.Helper()
		d, err := c.svc.Trigger(ctx, deployments.TriggerParams{ProjectID: pid, OwnerID: spec.OwnerID})
		require.NoError(t, err)
		c.waitStatus(t, spec.OwnerID, d.ID, deployments.StatusLive)
		got, err := c.store.DeploymentGet(ctx, d.ID)
		require.NoError(t, err)
		code, body := getApp(t, ing[got.Host].URL, slug)
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, "hello "+version, body)
		return got
	}
	v1 := deploy("v1")
	main := filepath.Join(repo, "main.go")
	src, err := os.ReadFile(main)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(main, bytes.ReplaceAll(src, []byte("hello v1"), []byte("hello v2")), 0o644))
	gitRun(t, repo, "commit", "-q", "-am", "v2")
	// v2 goes to the other host, so the rollback must move back to v1's.
	other := map[string]*Worker{a.HostQueue(): b, b.HostQueue(): a}[v1.Host]
	mine := map[string]*Worker{a.HostQueue(): a, b.HostQueue(): b}[v1.Host]
	require.NoError(t, mine.Cordon(true))
	v2 := deploy("v2")
	require.Equal(t, other.HostQueue(), v2.Host)

	// Pinned to the other host, the rollback would run where the pin
	// forbids: refused, and nothing is queued.
	projects.Pin(pid, "the-other-host", other.HostQueue())
	_, err = c.svc.Rollback(ctx, spec.OwnerID, v1.ID)
	var perr *platform.Error
	require.ErrorAs(t, err, &perr)
	require.Equal(t, http.StatusConflict, perr.Status)
	require.Contains(t, perr.Message, "pinned to host the-other-host")
	all, err := c.store.DeploymentsWhere(ctx, deployments.Filter{ProjectID: pid})
	require.NoError(t, err)
	require.Len(t, all, 2, "no deployment queued")
	// Pinned to the host that kept the build, it runs there.
	projects.Pin(pid, "the-host-that-kept-it", v1.Host)

	back, err := c.svc.Rollback(ctx, spec.OwnerID, v1.ID)
	require.NoError(t, err)
	live, _ := c.waitStatus(t, spec.OwnerID, back.ID, deployments.StatusLive)
	require.Equal(t, deployments.StepSkipped, live.Steps.Get(deployments.StepBuild).Status, "nothing built again")
	got, err := c.store.DeploymentGet(ctx, back.ID)
	require.NoError(t, err)
	require.Equal(t, v1.Host, got.Host, "on the host that kept the build, cordoned or not")
	code, body := getApp(t, ing[v1.Host].URL, slug)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "hello v1", body)
	require.Contains(t, c.logText(t, back.ID), "nothing cloned or built")
}

// regPlacer adapts the hosts register to the Placer, as the reference
// server does (without pins): the deployment's needs are its row's.
type regPlacer struct {
	reg   *hosts.Service
	store *deployments.Store
}

func (p regPlacer) Place(ctx context.Context, id string) (Placement, error) {
	d, err := p.store.DeploymentGet(ctx, id)
	if err != nil {
		return Placement{}, err
	}
	q, why, err := p.reg.Place(ctx, hosts.Need{MemoryMi: d.MemoryMi, CPUm: d.CPUm})
	if errors.Is(err, hosts.ErrNoRoom) {
		return Placement{Reason: err.Error(), Refused: true}, nil
	}
	return Placement{Queue: q, Reason: why}, err
}

// TestTemporalPlacementChoosesTheLeastLoadedHost: with the hosts register as
// the Placer, a deployment builds and runs on the active host with the
// largest share of its memory free that has room for the plan's memory and
// CPU, counting what the deployments on each host need (fleet.LoadByHost,
// plus some held outside this test's project), and its log says why; a
// full host is skipped; when every host is full the deployment FAILS at
// placement naming why each was refused, and the LIVE one keeps serving.
func TestTemporalPlacementChoosesTheLeastLoadedHost(t *testing.T) {
	srv := temporaltest.StartDevServer(t)
	ctx := context.Background()
	bdb := dbtest.SQLite(t, deployments.Migrations(), hosts.Migrations())
	projects := deploytest.NewProjects()
	slug := "placed-" + platformtest.Unique(8)
	spec := goSpec(goAppRepo(t, "v1"), slug)
	spec.Limits.MemoryMi, spec.Limits.CPUMillis = 1024, 500
	pid := projects.Add(spec)
	c := newCluster(t, srv, bdb, projects)
	var mu sync.Mutex
	extra := map[string]int64{} // MiB held on each host queue by others
	var broken atomic.Bool      // the register's load query fails (its database is down)
	register, err := hosts.New(hosts.Deps{DB: bdb, Load: func(ctx context.Context) (map[string]hosts.Load, error) {
		if broken.Load() {
			return nil, errors.New("database is down")
		}
		loads, err := fleet.Queries{DB: bdb}.LoadByHost(ctx)
		mu.Lock()
		defer mu.Unlock()
		for q, mi := range extra {
			l := loads[q]
			l.MemoryMi += mi
			loads[q] = l
		}
		return loads, err
	}})
	require.NoError(t, err)
	c.placer = regPlacer{register, c.store}
	rtA, ingA := processRuntime(t)
	rtB, ingB := processRuntime(t)
	a, _ := c.startHost(t, rtA, "host-a")
	b, _ := c.startHost(t, rtB, "host-b")
	for id, w := range map[string]*Worker{"host-a": a, "host-b": b} {
		svc, err := hosts.New(hosts.Deps{DB: bdb, HeartbeatEvery: time.Hour, Local: &hosts.Local{
			Host:      hosts.Host{ID: id, Queue: w.HostQueue(), MemoryMB: 4096, CPUs: 2, MaxApps: 3},
			CountApps: func(ctx context.Context) (int, error) { return fleet.Queries{DB: bdb}.CountLive(ctx, w.HostQueue()) }}})
		require.NoError(t, err)
		require.NoError(t, svc.Start(ctx))
		t.Cleanup(func() { _ = svc.Close(ctx) })
	}
	hold := func(w *Worker, mi int64) { mu.Lock(); extra[w.HostQueue()] = mi; mu.Unlock() }
	trigger := func() *deployments.Deployment {
		d, err := c.svc.Trigger(ctx, deployments.TriggerParams{ProjectID: pid, OwnerID: spec.OwnerID})
		require.NoError(t, err)
		return d
	}
	deployOn := func(w *Worker, ing *httptest.Server, why string) {
		t.Helper()
		d := trigger()
		c.waitStatus(t, spec.OwnerID, d.ID, deployments.StatusLive)
		got, err := c.store.DeploymentGet(ctx, d.ID)
		require.NoError(t, err)
		require.Equal(t, w.HostQueue(), got.Host)
		code, _ := getApp(t, ing.URL, slug)
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, c.logText(t, d.ID), why)
	}

	hold(a, 3072) // room for 1,024 more, but b has more free
	deployOn(b, ingB, "placed on host host-b (0 apps, 0 of 4,096 MiB and 0 of 2,000 millicores held; needs 1,024 MiB, 500 millicores); others: host-a 0 apps, 3,072 of 4,096 MiB held")
	hold(b, 3072) // with its LIVE app's 1,024: full
	deployOn(a, ingA, "placed on host host-a (0 apps, 3,072 of 4,096 MiB and 0 of 2,000 millicores held; needs 1,024 MiB, 500 millicores); others: host-b full: 4,096 of 4,096 MiB held, needs 1,024")
	hold(b, 3584)
	d := trigger()
	failed, _ := c.waitStatus(t, spec.OwnerID, d.ID, deployments.StatusFailed)
	require.Equal(t, "deployment failed: placement: no host can take the deployment: host-a full: 4,096 of 4,096 MiB held, needs 1,024; host-b full: 3,584 of 4,096 MiB held, needs 1,024", failed.ErrorMessage)
	code, _ := getApp(t, ingA.URL, slug)
	require.Equal(t, http.StatusOK, code, "the LIVE deployment keeps serving")

	// A register that cannot be read fails the deployment (after the local
	// activity's retries) rather than letting any worker build it.
	hold(b, 0)
	broken.Store(true)
	d = trigger()
	failed, _ = c.waitStatus(t, spec.OwnerID, d.ID, deployments.StatusFailed)
	require.Equal(t, "deployment failed: placement: the hosts register could not be read: database is down", failed.ErrorMessage)
	got, err := c.store.DeploymentGet(ctx, d.ID)
	require.NoError(t, err)
	require.Empty(t, got.Host, "placed nowhere")
	require.Nil(t, got.Steps.Get(deployments.StepBuild).StartedAt, "nothing built")
}
