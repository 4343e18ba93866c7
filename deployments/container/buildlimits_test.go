package container_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/container"
	"github.com/keelson-dev/keelson/deployments/container/containertest"
	"github.com/keelson-dev/keelson/deployments/ingress"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

func dockerJob(t *testing.T, dockerfile string) deployments.Job {
	job := goJob(newRepo(t, map[string]string{"Dockerfile": dockerfile}))
	job.Framework = "docker"
	return job
}

// buildCgroups lists the cgroups named for instance's builds, in every hierarchy.
func buildCgroups(t *testing.T, instance string) []string {
	t.Helper()
	found, err := filepath.Glob("/sys/fs/cgroup/*/keelson-build-" + instance + "-*")
	require.NoError(t, err)
	v2, err := filepath.Glob("/sys/fs/cgroup/keelson-build-" + instance + "-*")
	require.NoError(t, err)
	return append(found, v2...)
}

// A build starting 3000 processes holds at most the pids limit: the count
// is taken inside the step with shell builtins only (at the limit a fork
// fails, and the subshell starting them gives up).
func TestBuildPidsLimit(t *testing.T) {
	e := newEnv(t, func(c *container.Config) { c.BuildPidsLimit = 100 })
	ctx := context.Background()
	job := dockerJob(t, "FROM "+e.cfg.Images.Static+"\n"+
		`RUN (i=0; while [ $i -lt 3000 ]; do sleep 120 & i=$((i+1)); done) 2>/dev/null; set -- /proc/[0-9]*; echo "procs=$#"`+"\n"+
		"RUN grep -E '^(CapEff|Seccomp):' /proc/self/status\n")
	logs := &sink{}
	_, err := e.rt.Build(ctx, job, logs)
	require.NoError(t, err, logs.All())
	m := regexp.MustCompile(`procs=(\d+)`).FindStringSubmatch(logs.All())
	require.NotNil(t, m, logs.All())
	n, _ := strconv.Atoi(m[1])
	t.Logf("processes in the step after starting 3000: %d (limit 100)", n)
	assert.LessOrEqual(t, n, 100, "processes in the build step")
	assert.Greater(t, n, 50, "the step did start processes up to the limit")
	assert.Empty(t, buildCgroups(t, e.rt.Instance()), "the build's cgroup parent is removed")

	// What this engine's classic builder gives a step and the runtime cannot
	// change (the daemon refuses securityopt on build, and the build API has no
	// CapDrop): Docker's 14 default capabilities (NET_RAW, MKNOD, AUDIT_WRITE
	// among them) under the default seccomp profile. README: Security model.
	assert.Contains(t, logs.All(), "build: CapEff:\t00000000a80425fb")
	assert.Contains(t, logs.All(), "build: Seccomp:\t2")
	require.NoError(t, e.rt.Cleanup(ctx, job.DeploymentID))
	require.NoError(t, e.rt.CleanupProject(ctx, job.ProjectID))
}

// Without its pids limit a build does not run.
func TestBuildWithoutPidsLimitRefused(t *testing.T) {
	e := newEnv(t, func(c *container.Config) { c.CgroupRoot = t.TempDir() })
	ctx := context.Background()
	marker := "ran-" + strings.ToLower(t.Name())
	job := dockerJob(t, "FROM "+e.cfg.Images.Static+"\nRUN echo "+marker+"\n")
	logs := &sink{}
	_, err := e.rt.Build(ctx, job, logs)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the build was not started: its process limit (1024) could not be set up")
	assert.NotContains(t, logs.All(), marker)
	require.NoError(t, e.rt.Cleanup(ctx, job.DeploymentID))
	assert.Empty(t, containertest.Leftovers(t, e.docker, e.rt.Instance(), container.LabelProject, job.ProjectID))
}

// A step writing past the plan's storage limit is stopped while it runs,
// with the limit named; nothing of the build is left.
func TestBuildDiskLimit(t *testing.T) {
	e := newEnv(t, func(c *container.Config) {
		c.StorageGiB = 32 << 20 // the plan's "1 GiB" is 32 MiB here
		c.DiskPollInterval = 200 * time.Millisecond
	})
	ctx := context.Background()

	// Base images are the engine's, not the build's: a stage on the 300 MB
	// builder image writing little stays under a 32 MiB limit.
	small := dockerJob(t, "FROM "+e.cfg.Images.Go+" AS b\nRUN sleep 1 && echo x > /x\nFROM "+e.cfg.Images.Static+"\nCOPY --from=b /x /x\n")
	small.Limits.StorageGi = 1
	logs := &sink{}
	_, err := e.rt.Build(ctx, small, logs)
	require.NoError(t, err, logs.All())
	require.NoError(t, e.rt.Cleanup(ctx, small.DeploymentID))
	require.NoError(t, e.rt.CleanupProject(ctx, small.ProjectID))

	job := dockerJob(t, "FROM "+e.cfg.Images.Static+"\n"+
		`RUN i=0; while [ $i -lt 40 ]; do busybox dd if=/dev/zero of=/f$i bs=1M count=10 2>/dev/null; sleep 0.3; i=$((i+1)); done; echo wrote-$((20+22))`+"\n")
	job.Limits.StorageGi = 1
	logs = &sink{}
	_, err = e.rt.Build(ctx, job, logs)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the build has used")
	assert.Contains(t, err.Error(), "more than the plan's storage limit of 1 GiB (maxStorageGi")
	assert.NotContains(t, logs.All(), "wrote-42", "stopped while it ran, not after")
	require.NoError(t, e.rt.Cleanup(ctx, job.DeploymentID))
	require.NoError(t, e.rt.CleanupProject(ctx, job.ProjectID))
	assert.Empty(t, containertest.Leftovers(t, e.docker, e.rt.Instance(), container.LabelProject, job.ProjectID))
	assert.Empty(t, buildCgroups(t, e.rt.Instance()))
	_, err = os.Stat(filepath.Join(e.dataDir, "containers", job.DeploymentID))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// A server that does not see the host's cgroup file system (here: a
// directory standing in for it) makes its parent where the engine never
// looks; the first running step shows it, and the build is stopped.
func TestBuildStoppedWhenItsCgroupIsElsewhere(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(root, "pids"), 0o755))
	e := newEnv(t, func(c *container.Config) { c.CgroupRoot = root; c.DiskPollInterval = 200 * time.Millisecond })
	ctx := context.Background()
	job := dockerJob(t, "FROM "+e.cfg.Images.Static+"\nRUN sleep 5 && echo step-$((40+2))\n")
	logs := &sink{}
	_, err := e.rt.Build(ctx, job, logs)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the build was stopped: its process limit (1024) is not in effect")
	assert.NotContains(t, logs.All(), "step-42")
	require.NoError(t, e.rt.Cleanup(ctx, job.DeploymentID))
	// The engine made the parent on the host, without the limit; remove it
	// once the stopped step's cgroup is gone.
	platformtest.Eventually(t, time.Minute, "the engine's parent cgroup to be removed", func() bool {
		for _, d := range buildCgroups(t, e.rt.Instance()) {
			_ = os.Remove(d)
		}
		return len(buildCgroups(t, e.rt.Instance())) == 0
	})
}

// A server killed during a build leaves its empty cgroup parents; the next
// start of the same instance removes them, and nobody else's.
func TestLeftBuildCgroupsSwept(t *testing.T) {
	root := t.TempDir()
	mine := []string{filepath.Join(root, "pids", "keelson-build-abc123-d1"), filepath.Join(root, "memory", "keelson-build-abc123-d1")}
	busy := filepath.Join(root, "pids", "keelson-build-abc123-d2")
	other := filepath.Join(root, "pids", "keelson-build-ffff00-d1")
	for _, d := range append(mine, busy, other) {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(busy, "step"), nil, 0o644)) // not empty: still in use
	router, err := ingress.New(ingress.Config{PublicPort: 8081})
	require.NoError(t, err)
	defer router.Close()
	rt, err := container.New(container.Config{DataDir: t.TempDir(), Ingress: router, Instance: "abc123", CgroupRoot: root})
	require.NoError(t, err)
	require.NoError(t, rt.Close(context.Background()))
	for _, d := range mine {
		assert.NoDirExists(t, d)
	}
	assert.DirExists(t, busy)
	assert.DirExists(t, other)
}
