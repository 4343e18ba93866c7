package container_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/require"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/container"
	"github.com/keelson-dev/keelson/deployments/container/containertest"
	"github.com/keelson-dev/keelson/deployments/ingress"
	"github.com/keelson-dev/keelson/deployments/process"
	"github.com/keelson-dev/keelson/platform"
)

// BenchmarkAppCapacity runs KEELSON_BENCH_APPS (default 40) small apps at
// once on one fenced runtime (a prebuilt static binary FROM scratch, 64 MiB
// each), checks that every one answers through the ingress and that one
// cannot reach another, and reports per app: the time from Start to a routed
// LIVE app (docker-live-ms; process-live-ms is the same binary under the
// process runtime), the engine's memory (engine-MiB: dockerd, containerd,
// the shims and port proxies, growth over the run), the container's own
// (app-MiB: usage less page cache) and the server's Go heap (keelson-KiB).
//
//	KEELSON_BENCH_APPS=200 go test ./deployments/container/ -run '^$' -bench AppCapacity -benchtime 1x -timeout 60m
func BenchmarkAppCapacity(b *testing.B) {
	n := 40
	if v, err := strconv.Atoi(os.Getenv("KEELSON_BENCH_APPS")); err == nil && v > 0 {
		n = v
	}
	bin := containertest.HostileBinary(b)
	e := newEnv(b, nil)
	ctx := context.Background()
	var tenants [4]string
	for i := range tenants {
		tenants[i] = platform.NewID()
	}
	repo := scratchRepo(b, bin, containertest.ScratchDockerfile)
	for range b.N {
		b.StopTimer()
		jobs := make([]deployments.Job, n)
		var wg sync.WaitGroup
		sem := make(chan struct{}, 4)
		for i := range jobs {
			jobs[i] = goJob(repo)
			jobs[i].Framework, jobs[i].ProjectID = "docker", tenants[i%len(tenants)]
			jobs[i].Limits = deployments.Limits{MemoryMi: 64, CPUMillis: 250}
			jobs[i].Env = append(jobs[i].Env, deployments.EnvVar{Key: "APP_INDEX", Value: fmt.Sprint(i)})
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				_, err := e.rt.Build(ctx, jobs[i], nil)
				require.NoError(b, err)
			}()
		}
		wg.Wait()
		engine0, heap0 := engineRSS(b), goHeap()
		b.StartTimer()
		var live time.Duration
		var mu sync.Mutex
		for i := range jobs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				t0 := time.Now()
				up, err := e.rt.Start(ctx, jobs[i], nil)
				require.NoError(b, err)
				_, err = e.rt.Route(ctx, jobs[i].ProjectSlug, jobs[i].DeploymentID, up)
				require.NoError(b, err)
				mu.Lock()
				live += time.Since(t0)
				mu.Unlock()
			}()
		}
		wg.Wait()
		b.StopTimer()
		for i, j := range jobs {
			code, body := e.get(b, j.ProjectSlug+".localhost", "/env?k=APP_INDEX")
			require.Equal(b, 200, code, body)
			require.Equal(b, fmt.Sprint(i), body)
		}
		for i := 1; i < min(n, 8); i++ {
			_, body := e.get(b, jobs[0].ProjectSlug+".localhost", "/dial?a="+e.containerIP(b, jobs[i].DeploymentID)+":8080")
			require.True(b, strings.HasPrefix(body, "ERR"), "app 0 reached app %d: %s", i, body)
		}
		time.Sleep(2 * time.Second) // let the apps go idle: a measurement, not a wait for work
		fn := float64(n)
		b.ReportMetric(float64(n), "apps-live")
		b.ReportMetric(float64(live.Milliseconds())/fn, "docker-live-ms")
		b.ReportMetric(float64(engineRSS(b)-engine0)/fn/(1<<20), "engine-MiB")
		b.ReportMetric(appsMemory(b, e.docker, e.rt.Instance())/fn/(1<<20), "app-MiB")
		b.ReportMetric(float64(goHeap()-heap0)/fn/(1<<10), "keelson-KiB")
		for _, j := range jobs {
			require.NoError(b, e.rt.Cleanup(ctx, j.DeploymentID))
		}
		b.StartTimer()
	}
	b.StopTimer()
	for _, p := range tenants {
		require.NoError(b, e.rt.CleanupProject(ctx, p))
	}
	b.ReportMetric(processLiveMs(b, repo), "process-live-ms")
}

// processLiveMs is the mean time from Start to a routed app of the same
// binary under the process runtime, over 10 apps.
func processLiveMs(b *testing.B, repo string) float64 {
	router, err := ingress.New(ingress.Config{})
	require.NoError(b, err)
	defer router.Close()
	rt, err := process.New(process.Config{DataDir: b.TempDir(), AllowLocalRepos: true, Ingress: router})
	require.NoError(b, err)
	defer rt.Close(context.Background()) //nolint:errcheck
	ctx := context.Background()
	var live time.Duration
	const k = 10
	for range k {
		job := goJob(repo)
		job.BuildCommand, job.StartCommand = "true", "./app"
		_, err := rt.Build(ctx, job, nil)
		require.NoError(b, err)
		t0 := time.Now()
		up, err := rt.Start(ctx, job, nil)
		require.NoError(b, err)
		_, err = rt.Route(ctx, job.ProjectSlug, job.DeploymentID, up)
		require.NoError(b, err)
		live += time.Since(t0)
		require.NoError(b, rt.Cleanup(ctx, job.DeploymentID))
	}
	return float64(live.Milliseconds()) / k
}

// engineRSS is the resident memory of the engine's processes: dockerd,
// containerd, the containers' shims and the port proxies.
func engineRSS(b *testing.B) int64 {
	var total int64
	dirs, err := filepath.Glob("/proc/[0-9]*/status")
	require.NoError(b, err)
	for _, f := range dirs {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		var name string
		var rss int64
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			k, v, _ := strings.Cut(sc.Text(), ":")
			switch k {
			case "Name":
				name = strings.TrimSpace(v)
			case "VmRSS":
				rss, _ = strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			}
		}
		fh.Close()
		switch {
		case name == "dockerd", name == "containerd", name == "docker-proxy", strings.HasPrefix(name, "containerd-shim"):
			total += rss << 10
		}
	}
	return total
}

func goHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}

// appsMemory is the memory the instance's containers use (usage less page
// cache), read from their cgroups (v1 with the cgroupfs driver, or v2).
func appsMemory(b *testing.B, docker *client.Client, instance string) float64 {
	res, err := docker.ContainerList(context.Background(), client.ContainerListOptions{
		Filters: client.Filters{}.Add("label", container.LabelInstance+"="+instance)})
	require.NoError(b, err)
	var total float64
	for _, c := range res.Items {
		v1 := "/sys/fs/cgroup/memory/docker/" + c.ID
		if usage, err := readInt(v1 + "/memory.usage_in_bytes"); err == nil {
			total += float64(usage - statField(v1+"/memory.stat", "total_cache"))
			continue
		}
		v2 := "/sys/fs/cgroup/system.slice/docker-" + c.ID + ".scope"
		if usage, err := readInt(v2 + "/memory.current"); err == nil {
			total += float64(usage - statField(v2+"/memory.stat", "inactive_file"))
		}
	}
	return total
}

func readInt(p string) (int64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

func statField(p, key string) int64 {
	b, _ := os.ReadFile(p)
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, " "); ok && k == key {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}
