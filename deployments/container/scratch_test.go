package container_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keelson-dev/keelson/deployments/container"
	"github.com/keelson-dev/keelson/deployments/container/containertest"
	"github.com/keelson-dev/keelson/platform"
)

// A plain image FROM scratch is made without the builder and runs; the
// same commit built again for the project is not built at all: its image
// is the project's last one, labelled as the builder would.
func TestScratchImagesAndUnchangedContexts(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	job := scratchJob(t, containertest.HostileBinary(t))
	logs := &sink{}
	_, err := e.rt.Build(ctx, job, logs)
	require.NoError(t, err, logs.All())
	assert.Contains(t, logs.All(), "loaded without build steps")
	host := e.deploy(t, job)
	code, body := e.get(t, host, "/")
	assert.Equal(t, 200, code, body)

	again := job
	again.DeploymentID = platform.NewID()
	logs2 := &sink{}
	_, err = e.rt.Build(ctx, again, logs2)
	require.NoError(t, err, logs2.All())
	assert.Contains(t, logs2.All(), "nothing changed since the project's last image")
	first, err := e.docker.ImageInspect(ctx, "keelson/"+e.rt.Instance()+"-"+strings.ToLower(job.ProjectID)+":"+strings.ToLower(job.DeploymentID))
	require.NoError(t, err)
	second, err := e.docker.ImageInspect(ctx, "keelson/"+e.rt.Instance()+"-"+strings.ToLower(job.ProjectID)+":"+strings.ToLower(again.DeploymentID))
	require.NoError(t, err)
	assert.Equal(t, first.ID, second.ID)
	assert.Equal(t, job.ProjectID, first.Config.Labels[container.LabelProject])
	assert.Equal(t, []string{"/app"}, first.Config.Entrypoint)
	require.NoError(t, e.rt.CleanupProject(ctx, job.ProjectID))
}
