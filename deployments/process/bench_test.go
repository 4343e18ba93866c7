package process

import (
	"context"
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
