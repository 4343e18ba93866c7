package container_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
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

// BenchmarkTimeToLive deploys the same Go app (a new commit each time, so the
// app's own package is compiled again; dependencies and the toolchain's
// cache are warm after one untimed deployment) under each runtime and
// reports Build+Start+Route (ns/op, and live-ms/op), Start alone (start-ms/op:
// container create and start versus a child process) and, for docker, the
// memory one idle app container uses (idle-MiB, from the engine's stats:
// usage minus page cache).
//
//	go test ./deployments/container/ -run '^$' -bench TimeToLive -benchtime 5x
func BenchmarkTimeToLive(b *testing.B) {
	imgs, docker := containertest.Images(b)
	for _, kind := range []string{"process", "docker"} {
		b.Run(kind, func(b *testing.B) {
			router, err := ingress.New(ingress.Config{})
			require.NoError(b, err)
			defer router.Close()
			dataDir := b.TempDir()
			var rt interface {
				deployments.Runtime
				Close(context.Context) error
			}
			if kind == "docker" {
				crt, err := container.New(container.Config{DataDir: dataDir, AllowLocalRepos: true, Ingress: router, Images: imgs, Client: docker})
				require.NoError(b, err)
				defer containertest.RemoveInstance(docker, crt.Instance())
				rt = crt
			} else {
				prt, err := process.New(process.Config{DataDir: dataDir, AllowLocalRepos: true, Ingress: router})
				require.NoError(b, err)
				rt = prt
			}
			defer rt.Close(context.Background()) //nolint:errcheck
			repo := newRepo(b, containertest.HostileApp("bench-0"))
			projectID := platform.NewID()
			ctx := context.Background()
			deploy := func(i int) (live, start time.Duration, id string) {
				require.NoError(b, os.WriteFile(filepath.Join(repo, "version.go"),
					fmt.Appendf(nil, "package main\n\nconst version = %q\n", fmt.Sprint("bench-", i, "-", time.Now().UnixNano())), 0o644))
				git(b, repo, "commit", "-q", "-am", "bench")
				job := goJob(repo)
				job.ProjectID, job.ProjectSlug = projectID, "bench"
				job.Limits = deployments.Limits{MemoryMi: 512, CPUMillis: 2000}
				t0 := time.Now()
				_, err := rt.Build(ctx, job, nil)
				require.NoError(b, err)
				t1 := time.Now()
				up, err := rt.Start(ctx, job, nil)
				require.NoError(b, err)
				t2 := time.Now()
				_, err = rt.Route(ctx, "bench", job.DeploymentID, up)
				require.NoError(b, err)
				return time.Since(t0), t2.Sub(t1), job.DeploymentID
			}
			_, _, warm := deploy(0)
			require.NoError(b, rt.Cleanup(ctx, warm))
			var live, start time.Duration
			var idle float64
			b.ResetTimer()
			for i := range b.N {
				l, s, id := deploy(i + 1)
				live, start = live+l, start+s
				b.StopTimer()
				if kind == "docker" {
					idle += idleMiB(b, docker, id)
				}
				require.NoError(b, rt.Cleanup(ctx, id))
				b.StartTimer()
			}
			n := float64(b.N)
			b.ReportMetric(float64(live.Milliseconds())/n, "live-ms/op")
			b.ReportMetric(float64(start.Milliseconds())/n, "start-ms/op")
			if kind == "docker" {
				b.ReportMetric(idle/n, "idle-MiB")
			}
		})
	}
}

// idleMiB is the memory of the deployment's container once it has settled.
func idleMiB(b *testing.B, docker *client.Client, deploymentID string) float64 {
	ctx := context.Background()
	res, err := docker.ContainerList(ctx, client.ContainerListOptions{
		Filters: client.Filters{}.Add("label", container.LabelDeployment+"="+deploymentID)})
	require.NoError(b, err)
	require.Len(b, res.Items, 1)
	time.Sleep(2 * time.Second) // let it go idle: a measurement, not a wait for work
	st, err := docker.ContainerStats(ctx, res.Items[0].ID, client.ContainerStatsOptions{})
	require.NoError(b, err)
	defer st.Body.Close()
	var s struct {
		MemoryStats struct {
			Usage uint64            `json:"usage"`
			Stats map[string]uint64 `json:"stats"`
		} `json:"memory_stats"`
	}
	require.NoError(b, json.NewDecoder(st.Body).Decode(&s))
	used := s.MemoryStats.Usage - s.MemoryStats.Stats["cache"] // cgroup v1
	if f, ok := s.MemoryStats.Stats["inactive_file"]; ok {     // cgroup v2
		used = s.MemoryStats.Usage - f
	}
	return float64(used) / (1 << 20)
}

// timeline is a LogSink that keeps each line with the time it arrived.
type timeline struct {
	mu    sync.Mutex
	t0    time.Time
	lines []string
}

func (t *timeline) Log(stream, line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, fmt.Sprintf("%6dms %s %s", time.Since(t.t0).Milliseconds(), stream, line))
}

// BenchmarkScratchTimeToLive is issue 28's container case: a prebuilt
// static binary FROM scratch, a new binary (a new commit) each time, from
// Build to a routed app, under docker and under the process runtime (the
// same binary, started as ./app). With -v it logs each deployment's
// timeline (the runtime's log lines, stamped from the start of Build).
//
//	go test ./deployments/container/ -run '^$' -bench ScratchTimeToLive -benchtime 5x -v
func BenchmarkScratchTimeToLive(b *testing.B) {
	bin := containertest.HostileBinary(b)
	imgs, docker := containertest.Images(b)
	for _, kind := range []string{"process", "docker"} {
		b.Run(kind, func(b *testing.B) {
			router, err := ingress.New(ingress.Config{})
			require.NoError(b, err)
			defer router.Close()
			var rt interface {
				deployments.Runtime
				Close(context.Context) error
			}
			if kind == "docker" {
				crt, err := container.New(container.Config{DataDir: b.TempDir(), AllowLocalRepos: true, Ingress: router, Images: imgs, Client: docker})
				require.NoError(b, err)
				defer containertest.RemoveInstance(docker, crt.Instance())
				rt = crt
			} else {
				prt, err := process.New(process.Config{DataDir: b.TempDir(), AllowLocalRepos: true, Ingress: router})
				require.NoError(b, err)
				rt = prt
			}
			defer rt.Close(context.Background()) //nolint:errcheck
			repo := scratchRepo(b, bin, containertest.ScratchDockerfile)
			projectID := platform.NewID()
			ctx := context.Background()
			deploy := func(i int) (time.Duration, string, *timeline) {
				// A changed binary: the same program with bytes appended.
				require.NoError(b, os.WriteFile(filepath.Join(repo, "app"), append(append([]byte{}, bin...), fmt.Sprint(i, time.Now().UnixNano())...), 0o755))
				git(b, repo, "commit", "-q", "-am", "bench")
				job := goJob(repo)
				job.ProjectID, job.ProjectSlug, job.Framework = projectID, "bench", "docker"
				if kind == "process" {
					job.BuildCommand, job.StartCommand = "true", "./app"
				}
				job.Limits = deployments.Limits{MemoryMi: 64, CPUMillis: 1000}
				tl := &timeline{t0: time.Now()}
				_, err := rt.Build(ctx, job, tl)
				require.NoError(b, err, strings.Join(tl.lines, "\n"))
				tl.Log("bench", "built")
				up, err := rt.Start(ctx, job, tl)
				require.NoError(b, err, strings.Join(tl.lines, "\n"))
				tl.Log("bench", "started")
				_, err = rt.Route(ctx, "bench", job.DeploymentID, up)
				require.NoError(b, err)
				tl.Log("bench", "routed")
				return time.Since(tl.t0), job.DeploymentID, tl
			}
			_, warm, _ := deploy(0)
			require.NoError(b, rt.Cleanup(ctx, warm))
			var live time.Duration
			b.ResetTimer()
			for i := range b.N {
				l, id, tl := deploy(i + 1)
				live += l
				b.StopTimer()
				b.Logf("%s deployment %d: %s\n%s", kind, i+1, l.Round(time.Millisecond), strings.Join(tl.lines, "\n"))
				require.NoError(b, rt.Cleanup(ctx, id))
				b.StartTimer()
			}
			b.ReportMetric(float64(live.Milliseconds())/float64(b.N), "live-ms/op")
		})
	}
}
