package container_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keelson-dev/keelson/deployments/container"
	"github.com/keelson-dev/keelson/deployments/container/containertest"
	"github.com/keelson-dev/keelson/deployments/internal/runtimetest"
	"github.com/keelson-dev/keelson/deployments/rt"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

// The supervisor contract, with real containers.
func TestSupervisorContract(t *testing.T) {
	t.Parallel()
	runtimetest.Run(t, func(t *testing.T, s runtimetest.Settings) runtimetest.Target {
		imgs, docker := containertest.Images(t)
		r, err := container.New(container.Config{
			DataDir: t.TempDir(), AllowLocalRepos: true, Ingress: s.Ingress, Images: imgs, Client: docker, Clock: s.Clock,
			Supervision: s.Supervision,
		})
		require.NoError(t, err)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			assert.NoError(t, r.Close(ctx))
			containertest.RemoveInstance(docker, r.Instance())
		})
		return runtimetest.Target{Runtime: r, Job: func(repo string) rt.Job {
			return rt.Job{
				DeploymentID: platform.NewID(), ProjectID: platform.NewID(), ProjectSlug: "contract" + platformtest.Unique(8),
				RepoURL: repo, Framework: "go", Limits: rt.Limits{MemoryMi: 200, CPUMillis: 1000},
			}
		}}
	})
}
