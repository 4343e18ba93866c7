package process

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/keelson-dev/keelson/deployments/internal/runtimetest"
	"github.com/keelson-dev/keelson/deployments/rt"
	"github.com/keelson-dev/keelson/platform"
)

// The supervisor contract, with real processes. Every port looks taken to a
// restart, so each restart moves the app and its route must follow.
func TestSupervisorContract(t *testing.T) {
	t.Parallel()
	runtimetest.Run(t, func(t *testing.T, s runtimetest.Settings) runtimetest.Target {
		r, err := New(Config{
			DataDir: t.TempDir(), CacheDir: testCacheDir, AllowLocalRepos: true, Ingress: s.Ingress, Clock: s.Clock,
			Supervision: s.Supervision,
		})
		require.NoError(t, err)
		r.portFree = func(int) bool { return false }
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			require.NoError(t, r.Close(ctx))
		})
		return runtimetest.Target{Runtime: r, MovesOnRestart: true, Job: func(repo string) rt.Job {
			return rt.Job{
				DeploymentID: platform.NewID(), ProjectID: platform.NewID(), ProjectSlug: "contract",
				RepoURL: repo, Framework: "go",
				Env: []rt.EnvVar{{Key: "HOST", Value: "127.0.0.1"}, {Key: "GOPROXY", Value: "off"}, {Key: "GOTOOLCHAIN", Value: "local"}},
			}
		}}
	})
}
