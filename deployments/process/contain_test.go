package process

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/ingress"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

// daemonize is shell that starts `sleep 300` in a new session (setsid: out of
// the build's process group and session, reparented to init once its parent
// exits), with its pid in daemon.pid and its /proc stat in daemon.stat, and
// waits until both are written. envPrefix runs the daemon under e.g. `env -i`.
func daemonize(envPrefix string) string {
	return `setsid ` + envPrefix + ` sh -c 'echo $$ > daemon.tmp; mv daemon.tmp daemon.pid; exec sleep 300' </dev/null >/dev/null 2>&1 &
while [ ! -s daemon.pid ]; do sleep 0.01; done
cat /proc/$(cat daemon.pid)/stat > daemon.stat
echo "spawned daemon $(cat daemon.pid)"`
}

// daemonOf reads the daemon's pid once the build wrote it, and checks it
// really left the build's process group and session.
func daemonOf(t *testing.T, src string) int {
	t.Helper()
	platformtest.Eventually(t, time.Minute, "the daemon's stat", func() bool {
		b, err := os.ReadFile(filepath.Join(src, "daemon.stat"))
		return err == nil && len(b) > 0 && b[len(b)-1] == '\n'
	})
	pid := readPid(t, filepath.Join(src, "daemon.pid"))
	b, err := os.ReadFile(filepath.Join(src, "daemon.stat"))
	require.NoError(t, err)
	st, ok := parseStat(pid, b)
	require.True(t, ok)
	require.Equal(t, pid, st.sid, "the daemon must lead its own session")
	require.Equal(t, pid, st.pgid, "the daemon must lead its own process group")
	return pid
}

// alive reports whether pid runs (a zombie does not count).
func alive(pid int) bool { return !childGone(pid) }

// tagged lists the live processes carrying a tag of the runtime of dataDir.
func tagged(dataDir string) []int {
	owner := ownerOf(dataDir)
	var out []int
	for _, p := range allProcs() {
		if p.state != 'Z' && strings.HasPrefix(readTag(p.pid), owner+"/") {
			out = append(out, p.pid)
		}
	}
	return out
}

func srcOf(e *env, id string) string { return filepath.Join(e.dataDir, "workspaces", id, "src") }

// TestSetsidDaemonOfABuildDies: a build that daemonizes a process (new
// session, reparented away from the build) leaves nothing running, whether the
// build succeeds, fails, times out, is cancelled or its deployment is deleted.
func TestSetsidDaemonOfABuildDies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		tail  string // after the daemon started
		limit time.Duration
		end   func(e *env, id string, cancel context.CancelFunc)
		want  string // in the build's error, "" for success
	}{
		{name: "build succeeds", tail: "true"},
		{name: "build fails", tail: "exit 3", want: "build command failed"},
		{name: "build times out", tail: "sleep 300", limit: 2 * time.Second, want: "build timed out after 2s"},
		{name: "build cancelled", tail: "sleep 300", end: func(_ *env, _ string, cancel context.CancelFunc) { cancel() },
			want: "context canceled"},
		{name: "deployment deleted", tail: "sleep 300", end: func(e *env, id string, _ context.CancelFunc) {
			_ = e.rt.Cleanup(context.Background(), id)
		}, want: "context canceled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil)
			repo, _ := newRepo(t, map[string]string{"README": "x"})
			job := deployments.Job{DeploymentID: platform.NewID(), ProjectSlug: "d", RepoURL: repo,
				BuildCommand: daemonize("") + "\n" + tc.tail, StartCommand: "true",
				Limits: deployments.Limits{BuildTimeout: tc.limit}}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			logs := &sink{}
			done := make(chan error, 1)
			go func() {
				_, err := e.rt.Build(ctx, job, logs)
				done <- err
			}()
			var daemon int
			if tc.end != nil {
				platformtest.Eventually(t, time.Minute, "the build to daemonize", func() bool { return logs.Has("spawned daemon") })
				daemon = daemonOf(t, srcOf(e, job.DeploymentID))
				require.True(t, alive(daemon))
				tc.end(e, job.DeploymentID, cancel)
			}
			err := platformtest.Receive(t, done, 2*time.Minute, "the build to end")
			if tc.want == "" {
				require.NoError(t, err, logs.All())
			} else {
				require.ErrorContains(t, err, tc.want)
			}
			if daemon == 0 {
				daemon = daemonOf(t, srcOf(e, job.DeploymentID))
			}
			// Build returned: the daemon is already gone, no polling needed.
			assert.False(t, alive(daemon), "the daemon %d outlived its build", daemon)
			assert.Empty(t, tagged(e.dataDir))
		})
	}
}

// useCgroup switches e's runtime (before it started anything) to mode,
// skipping the test when the machine does not allow it.
func useCgroup(t *testing.T, e *env, mode cgroupMode) {
	t.Helper()
	c := e.rt.contain
	if c.cg != noCgroup { // drop what New prepared
		_ = os.Remove(c.instanceDir())
		_ = os.Remove(c.cgRoot)
	}
	switch mode {
	case noCgroup:
		c.cg, c.cgRoot = noCgroup, ""
	case cgroupV2:
		mounts, self := cgroupMounts(), selfCgroups()
		root := filepath.Join(mounts["cgroup2"], self[""], "keelson-"+c.owner)
		if _, ok := mounts["cgroup2"]; !ok || !probeV2(root) {
			_ = os.Remove(root)
			t.Skip("no writable cgroup v2 hierarchy here")
		}
		c.cg, c.cgRoot = cgroupV2, root
	case cgroupV1:
		mounts, self := cgroupMounts(), selfCgroups()
		mnt, ok := mounts["pids"]
		root := filepath.Join(mnt, self["pids"], "keelson-"+c.owner)
		if !ok || os.MkdirAll(root, 0o755) != nil {
			t.Skip("no writable cgroup v1 pids hierarchy here")
		}
		c.cg, c.cgRoot, c.v1Home = cgroupV1, root, filepath.Dir(root)
	}
}

// TestDaemonWithAClearedEnvironmentDiesByItsCgroup: `setsid env -i` leaves the
// process group, the session and the environment tag behind; only the cgroup
// still holds it (v2, entered at fork, or v1 pids, entered right after).
func TestDaemonWithAClearedEnvironmentDiesByItsCgroup(t *testing.T) {
	t.Parallel()
	for _, mode := range []cgroupMode{cgroupV2, cgroupV1} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil)
			useCgroup(t, e, mode)
			repo, _ := newRepo(t, map[string]string{"README": "x"})
			job := deployments.Job{DeploymentID: platform.NewID(), ProjectSlug: "d", RepoURL: repo,
				BuildCommand: daemonize("env -i PATH=/usr/bin:/bin"), StartCommand: "true"}
			logs := &sink{}
			_, err := e.rt.Build(context.Background(), job, logs)
			require.NoError(t, err, logs.All())
			daemon := daemonOf(t, srcOf(e, job.DeploymentID))
			assert.False(t, alive(daemon), "the daemon %d outlived its build", daemon)
			// The group's cgroup is gone, and so are its empty parents.
			entries, err := os.ReadDir(e.rt.contain.instanceDir())
			require.ErrorIs(t, err, fs.ErrNotExist)
			for _, d := range entries {
				assert.False(t, d.IsDir(), "the cgroup %s remains after its group ended", d.Name())
			}
		})
	}
}

// TestSetsidDaemonDiesWithoutCgroups: where no cgroup is writable (a
// non-root server), the environment tag still finds a daemon that kept it.
func TestSetsidDaemonDiesWithoutCgroups(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	useCgroup(t, e, noCgroup)
	repo, _ := newRepo(t, map[string]string{"README": "x"})
	job := deployments.Job{DeploymentID: platform.NewID(), ProjectSlug: "d", RepoURL: repo,
		BuildCommand: daemonize("") + "\nsleep 300", StartCommand: "true", Limits: deployments.Limits{BuildTimeout: 2 * time.Second}}
	_, err := e.rt.Build(context.Background(), job, nil)
	require.ErrorContains(t, err, "build timed out")
	daemon := daemonOf(t, srcOf(e, job.DeploymentID))
	assert.False(t, alive(daemon), "the daemon %d outlived its build", daemon)
	assert.Empty(t, tagged(e.dataDir))
}

// TestSetsidChildOfAnAppDiesWithStop: an app that daemonizes a helper takes
// it down when it is stopped, and when its deployment is deleted.
func TestSetsidChildOfAnAppDiesWithStop(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	repo, _ := newRepo(t, goApp("v1"))
	for _, stop := range []func(id string) error{
		func(id string) error { return e.rt.Stop(context.Background(), id) },
		func(id string) error { return e.rt.Cleanup(context.Background(), id) },
	} {
		job := goJob(repo, "app")
		job.StartCommand = daemonize("") + "\nexec ./.keelson/app"
		logs := &sink{}
		_, err := e.rt.Build(context.Background(), job, logs)
		require.NoError(t, err, logs.All())
		up, err := e.rt.Start(context.Background(), job, logs)
		require.NoError(t, err, logs.All())
		daemon := daemonOf(t, srcOf(e, job.DeploymentID))
		require.True(t, alive(daemon))
		require.NoError(t, stop(job.DeploymentID))
		assert.False(t, answers(up))
		assert.False(t, alive(daemon), "the daemon %d outlived its app", daemon)
	}
	assert.Empty(t, tagged(e.dataDir))
}

// Helper process for the kill -9 tests: a "server" running a build or an app
// on a runtime, to be killed hard by the test.
const helperVar = "KEELSON_PROCESS_TEST_HELPER"

// runHelper runs in the re-executed test binary; it never returns.
func runHelper(mode string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(2)
	}
	router, err := ingress.New(ingress.Config{PublicPort: 8081})
	if err != nil {
		fail(err)
	}
	rt, err := New(Config{DataDir: os.Getenv("HELPER_DATA"), CacheDir: os.Getenv("HELPER_CACHE"),
		AllowLocalRepos: true, Ingress: router})
	if err != nil {
		fail(err)
	}
	job := goJob(os.Getenv("HELPER_REPO"), "app")
	job.DeploymentID = os.Getenv("HELPER_ID")
	ctx := context.Background()
	switch mode {
	case "build":
		job.BuildCommand = daemonize("") + "\nsleep 300"
		fmt.Println("building")
		_, err = rt.Build(ctx, job, nil)
		fail(fmt.Errorf("the build ended: %v", err))
	case "app":
		job.StartCommand = os.Getenv("HELPER_START")
		if _, err := rt.Build(ctx, job, nil); err != nil {
			fail(err)
		}
		up, err := rt.Start(ctx, job, nil)
		if err != nil {
			fail(err)
		}
		fmt.Println("upstream " + up)
	}
	select {}
}

// startHelper runs the helper in mode and returns it and its stdout lines.
func startHelper(t *testing.T, mode string, env ...string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{helperVar + "=" + mode, "HELPER_CACHE=" + testCacheDir}, env...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd, lines
}

// kill9 kills the helper hard: no deferred code, no Close.
func kill9(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
}

// TestSetsidDaemonOfABuildDiesAfterAServerKill: the server is killed with -9
// mid-build; the build's daemon survives it (nothing of the server ran), and
// the next runtime on the same data dir kills it before doing anything else.
func TestSetsidDaemonOfABuildDiesAfterAServerKill(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	repo, _ := newRepo(t, map[string]string{"README": "x"})
	id := platform.NewID()
	helper, lines := startHelper(t, "build", "HELPER_DATA="+data, "HELPER_REPO="+repo, "HELPER_ID="+id)
	src := filepath.Join(data, "workspaces", id, "src")
	platformtest.Eventually(t, time.Minute, "the helper's build to daemonize", func() bool {
		_, err := os.Stat(filepath.Join(src, "daemon.stat"))
		return err == nil
	})
	daemon := daemonOf(t, src)
	kill9(t, helper)
	for range lines {
	}
	require.True(t, alive(daemon), "the daemon died with the server; the test shows nothing")
	require.NotEmpty(t, tagged(data), "the build's own shell and sleep are orphans too")

	router, err := ingress.New(ingress.Config{PublicPort: 8081})
	require.NoError(t, err)
	defer router.Close()
	rt, err := New(Config{DataDir: data, CacheDir: testCacheDir, AllowLocalRepos: true, Ingress: router})
	require.NoError(t, err)
	defer rt.Close(context.Background())
	assert.False(t, alive(daemon), "the daemon %d outlived the server's restart", daemon)
	assert.Empty(t, tagged(data))
	entries, err := os.ReadDir(filepath.Join(data, runDir))
	require.NoError(t, err)
	assert.Empty(t, entries, "the records of the killed server are swept")
}

// TestAppIsNotRunTwiceAfterAServerKill: an app that runs in a session of its
// own outlives a kill -9 of the server holding its port; the restarted
// runtime kills it before starting the deployment again, so exactly one copy
// runs afterwards.
func TestAppIsNotRunTwiceAfterAServerKill(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	repo, _ := newRepo(t, goApp("v1"))
	id := platform.NewID()
	start := "setsid ./.keelson/app & wait"
	helper, lines := startHelper(t, "app", "HELPER_DATA="+data, "HELPER_REPO="+repo, "HELPER_ID="+id, "HELPER_START="+start)
	var up string
	for l := range lines {
		if u, ok := strings.CutPrefix(l, "upstream "); ok {
			up = u
			break
		}
	}
	require.NotEmpty(t, up, "the helper did not start the app")
	first := appPid(t, up)
	kill9(t, helper)
	for range lines {
	}
	require.True(t, alive(first), "the app died with the server; the test shows nothing")
	require.True(t, answers(up), "the orphaned app still holds its port")

	router, err := ingress.New(ingress.Config{PublicPort: 8081})
	require.NoError(t, err)
	defer router.Close()
	rt, err := New(Config{DataDir: data, CacheDir: testCacheDir, AllowLocalRepos: true, Ingress: router})
	require.NoError(t, err)
	defer rt.Close(context.Background())
	assert.False(t, alive(first), "the orphaned app %d outlived the server's restart", first)

	job := goJob(repo, "app")
	job.DeploymentID, job.StartCommand = id, start
	up2, err := rt.Start(context.Background(), job, nil)
	require.NoError(t, err)
	second := appPid(t, up2)
	assert.NotEqual(t, first, second)
	bin := filepath.Join(data, "workspaces", id, "src", outputDir, "app")
	assert.Equal(t, []int{second}, running(bin), "exactly one copy of the app runs")
	require.NoError(t, rt.Stop(context.Background(), id))
	assert.False(t, alive(second))
	assert.Empty(t, running(bin))
}

// appPid asks the test app its pid.
func appPid(t *testing.T, upstream string) int {
	t.Helper()
	res, err := http.Get("http://" + upstream + "/pid")
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	pid, err := strconv.Atoi(string(b))
	require.NoError(t, err)
	return pid
}

// running lists the live processes executing bin.
func running(bin string) []int {
	var out []int
	for _, p := range allProcs() {
		if exe, err := os.Readlink("/proc/" + strconv.Itoa(p.pid) + "/exe"); err == nil && exe == bin && p.state != 'Z' {
			out = append(out, p.pid)
		}
	}
	return out
}

// TestGroupsStartWhileAnotherServerTidies: a server starting on the same
// machine removes every empty keelson-* cgroup directory, also this one's
// between the moment a group creates it and the moment it creates its own
// below it. The group is still created.
func TestGroupsStartWhileAnotherServerTidies(t *testing.T) {
	t.Parallel()
	for _, mode := range []cgroupMode{cgroupV2, cgroupV1} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil)
			useCgroup(t, e, mode)
			c := e.rt.contain
			defer removeMeanwhile(c.instanceDir(), c.cgRoot)()
			for i := range 2000 {
				cmd := exec.Command("true")
				g, err := c.newGroup(cmd, "race", "build")
				require.NoError(t, err, "group %d", i)
				g.abandon(cmd)
			}
		})
	}
}

// TestCgroupFoundWhileAnotherServerTidies: a server starting while another
// one's tidyOthers removes every empty keelson-* cgroup directory still
// finds its cgroup hierarchy (the one it finds undisturbed, and the v1 pids
// one), instead of falling back to another or to none.
func TestCgroupFoundWhileAnotherServerTidies(t *testing.T) {
	t.Parallel()
	owner := ownerOf(t.TempDir())
	want, root := findCgroup(owner)
	if want == noCgroup {
		t.Skip("no writable cgroup hierarchy here")
	}
	type probe struct {
		name  string
		root  string
		tries int // findCgroup runs /bin/true (v2): fewer
		ok    func() bool
	}
	probes := []probe{{"found " + want.String(), root, 500, func() bool { got, _ := findCgroup(owner); return got == want }}}
	mounts, self := cgroupMounts(), selfCgroups()
	if mnt, ok := mounts["pids"]; ok {
		v1 := filepath.Join(mnt, self["pids"], "keelson-"+owner)
		if probeV1(v1) {
			probes = append(probes, probe{"v1", v1, 2000, func() bool { return probeV1(v1) }})
		}
	}
	for _, p := range probes {
		stop := removeMeanwhile(p.root)
		for i := range p.tries {
			if !p.ok() {
				stop()
				t.Fatalf("%s: try %d did not find the hierarchy", p.name, i)
			}
		}
		stop()
		_ = os.Remove(p.root)
	}
}

// TestTidyOthersLeavesOtherCgroups: tidyOthers removes the empty cgroups of
// process runtimes that no longer run, and no other keelson-* cgroup beside
// them: not the docker runtime's build parents (their pids.max is the
// build's limit, and the engine makes each step's cgroup in one, empty for
// a moment), nor a second engine's parent (containertest).
func TestTidyOthersLeavesOtherCgroups(t *testing.T) {
	t.Parallel()
	parent := t.TempDir()
	c := &containment{owner: "0123456789abcdef", instance: "1.1", cg: cgroupV2, cgRoot: filepath.Join(parent, "keelson-0123456789abcdef")}
	deadRoot := filepath.Join(parent, "keelson-fedcba9876543210")
	others := []string{
		filepath.Join(parent, "keelson-build-abc123-d1"),                          // between two steps
		filepath.Join(parent, "keelson-build-abc123-d2", strings.Repeat("c", 64)), // a step's, just made
		filepath.Join(parent, "keelson-engine-a1b2c3", strings.Repeat("e", 64)),
	}
	for _, d := range append(others, filepath.Join(deadRoot, "4194305.1", "d1.build-1")) { // no such pid
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	c.tidyOthers(c.deadInstance)
	assert.NoDirExists(t, deadRoot, "a dead runtime's empty cgroups")
	for _, d := range others {
		assert.DirExists(t, d)
	}
}

// removeMeanwhile removes dirs (when empty) in a loop, as often as it can,
// until stop: what another server's tidyOthers does, at its worst.
func removeMeanwhile(dirs ...string) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
				for _, d := range dirs {
					_ = os.Remove(d)
				}
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}
