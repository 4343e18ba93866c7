package process

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/keelson-dev/keelson/deployments/ingress"
	"github.com/keelson-dev/keelson/platform"
)

// BenchmarkDeployGoApp measures Build+Start+Route of the tiny Go app from a
// local repository, split into clone, build (go build, warm cache), start
// (until it answers HTTP) and route. ns/op is the whole deployment without
// its teardown.
func BenchmarkDeployGoApp(b *testing.B) {
	router, err := ingress.New(ingress.Config{})
	require.NoError(b, err)
	defer router.Close()
	rt, err := New(Config{DataDir: b.TempDir(), CacheDir: testCacheDir, AllowLocalRepos: true, Ingress: router})
	require.NoError(b, err)
	defer rt.Close(context.Background()) //nolint:errcheck
	repo, _ := newRepo(b, goApp("bench"))
	ctx := context.Background()

	var clone, build, start, route time.Duration
	b.ResetTimer()
	for range b.N {
		job := goJob(repo, "bench")
		job.DeploymentID = platform.NewID()
		_, times, err := rt.build(ctx, job, nil)
		require.NoError(b, err)
		t0 := time.Now()
		up, err := rt.Start(ctx, job, nil)
		require.NoError(b, err)
		t1 := time.Now()
		_, err = rt.Route(ctx, "bench", job.DeploymentID, up)
		require.NoError(b, err)
		t2 := time.Now()
		clone, build, start, route = clone+times.clone, build+times.build, start+t1.Sub(t0), route+t2.Sub(t1)

		b.StopTimer()
		require.NoError(b, rt.Stop(ctx, job.DeploymentID))
		require.NoError(b, rt.Cleanup(ctx, job.DeploymentID))
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(float64(clone.Milliseconds())/n, "clone-ms/op")
	b.ReportMetric(float64(build.Milliseconds())/n, "build-ms/op")
	b.ReportMetric(float64(start.Milliseconds())/n, "start-ms/op")
	b.ReportMetric(float64(route.Microseconds())/n, "route-µs/op")
}

// BenchmarkGroupEndNothingLeft measures what every git command, build and
// app pays when it ends and left nothing behind (the common case): one scan
// of /proc, reading each process's stat and (for those of the server's user)
// its environment. procs is how many processes the machine ran.
func BenchmarkGroupEndNothingLeft(b *testing.B) {
	c := &containment{owner: "bench", instance: "1.1", cg: noCgroup}
	self, ok := readStat(os.Getpid())
	require.True(b, ok)
	// A leader that started with this benchmark: older processes are not its.
	g := &group{c: c, tag: "bench/1.1/none/build-1", leader: procStat{pid: 1 << 30, pgid: 1 << 30, start: self.start}}
	for b.Loop() {
		g.killAll()
	}
	b.ReportMetric(float64(len(allProcs())), "procs")
}

// BenchmarkStartupSweepNothingLeft measures the sweep New runs on a data dir
// whose previous server left nothing running.
func BenchmarkStartupSweepNothingLeft(b *testing.B) {
	c, err := newContainment(b.TempDir())
	require.NoError(b, err)
	for b.Loop() {
		c.sweep()
	}
	b.ReportMetric(float64(len(allProcs())), "procs")
}
