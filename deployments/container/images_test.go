package container_test

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keelson-dev/keelson/deployments/container"
	"github.com/keelson-dev/keelson/deployments/container/containertest"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

// Another project's image cannot be built on: not by Keelson's name for
// it, a variable holding that name, COPY --from, another tag of it, or a
// prefix of its id (which the classic builder resolves locally). A preset's
// image can, even named keelson/ (scripts/local-images.sh's), but no other
// keelson/ name.
func TestFromAnotherProjectRefused(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	a := dockerJob(t, "FROM "+e.cfg.Images.Static+"\nRUN echo a-secret > /a\n")
	logs := &sink{}
	_, err := e.rt.Build(ctx, a, logs)
	require.NoError(t, err, logs.All())
	repoA := "keelson/" + e.rt.Instance() + "-" + a.ProjectID
	img, err := e.docker.ImageInspect(ctx, repoA+":cache")
	require.NoError(t, err)
	id := strings.TrimPrefix(img.ID, "sha256:")
	alias := "plain-" + platformtest.Unique(8) + ":1"
	_, err = e.docker.ImageTag(ctx, client.ImageTagOptions{Source: img.ID, Target: alias})
	require.NoError(t, err)
	defer e.docker.ImageRemove(ctx, alias, client.ImageRemoveOptions{})

	st := e.cfg.Images.Static
	for dockerfile, want := range map[string]string{
		"FROM " + repoA + ":cache\nRUN cat /a\n":                                         "line 1 (FROM " + repoA + ":cache): keelson/ images",
		"FROM docker.io/" + repoA + ":cache\n":                                           "line 1 (FROM docker.io/" + repoA + ":cache): keelson/ images",
		"ARG B=" + repoA + ":cache\nFROM $B\n":                                           "line 2 (FROM " + repoA + ":cache)",
		"FROM " + st + " AS s\nFROM " + st + "\nCOPY --from=" + repoA + ":cache /a /a\n": "line 3 (COPY --from " + repoA + ":cache)",
		"FROM " + st + "\nCOPY \\\n  --from=" + id[:12] + " /a /a\n":                     "line 2 (COPY --from " + id[:12] + "): it names an image by a local image id",
		"FROM " + id[:12] + "\n":                                                         "it names an image by a local image id",
		"FROM sha256:" + id + "\n":                                                       "it names an image by a local image id",
		"FROM " + id[:5] + "\n":                                                          "it names an image by a local image id",
		"FROM " + alias + "\n":                                                           "it is an image Keelson built for a project",
		// Only the presets' own names pass (a is built FROM one, keelson/static:local by default).
		"FROM keelson/not-a-preset:local\n": "line 1 (FROM keelson/not-a-preset:local): keelson/ images",
	} {
		b := dockerJob(t, dockerfile)
		blogs := &sink{}
		_, err := e.rt.Build(ctx, b, blogs)
		require.Error(t, err, dockerfile)
		assert.True(t, strings.HasPrefix(err.Error(), "Dockerfile line "), err.Error())
		assert.Contains(t, err.Error(), want, dockerfile)
		assert.NotContains(t, blogs.All(), "a-secret")
		assert.NotContains(t, blogs.All(), "Step 1/", "refused before the build started")
		require.NoError(t, e.rt.Cleanup(ctx, b.DeploymentID))
	}
	require.NoError(t, e.rt.Cleanup(ctx, a.DeploymentID))
	require.NoError(t, e.rt.CleanupProject(ctx, a.ProjectID))
}

// A multi-stage build keeps its earlier stage as the project's stage cache
// (a tag, replaced by the next build's and removed with the project); a
// failed build leaves no image behind.
func TestStageImagesAreTheProjectsAndPruned(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	st := e.cfg.Images.Static
	multi := func(v string) string {
		return "FROM " + st + " AS build\nRUN echo " + v + " > /x\nFROM " + st + "\nCOPY --from=build /x /x\nCOPY --from=0 /x /y\n"
	}
	job := dockerJob(t, multi("one"))
	logs := &sink{}
	_, err := e.rt.Build(ctx, job, logs)
	require.NoError(t, err, logs.All())
	stage := "keelson/" + e.rt.Instance() + "-" + job.ProjectID + ":cache-stage0"
	first, err := e.docker.ImageInspect(ctx, stage)
	require.NoError(t, err, "the first stage is kept as the project's stage cache")

	// The next build of the project replaces it; the old stage image goes.
	next := job
	next.DeploymentID = dockerJob(t, "").DeploymentID
	next.RepoURL = newRepo(t, map[string]string{"Dockerfile": multi("two")})
	_, err = e.rt.Build(ctx, next, logs)
	require.NoError(t, err, logs.All())
	second, err := e.docker.ImageInspect(ctx, stage)
	require.NoError(t, err)
	assert.NotEqual(t, first.ID, second.ID)
	_, err = e.docker.ImageInspect(ctx, first.ID)
	assert.Error(t, err, "the replaced stage image is removed")

	// A failed build of the project leaves none of its images.
	failed := job
	failed.DeploymentID = dockerJob(t, "").DeploymentID
	failed.RepoURL = newRepo(t, map[string]string{"Dockerfile": "FROM " + st + "\nRUN echo made > /m\nRUN exit 1\n"})
	flogs := &sink{}
	_, err = e.rt.Build(ctx, failed, flogs)
	require.Error(t, err)
	ids := regexp.MustCompile(`(?m)^build:  ---> ([0-9a-f]{12})$`).FindAllStringSubmatch(flogs.All(), -1)
	require.Len(t, ids, 2, flogs.All()) // the base image, then the first RUN's
	_, err = e.docker.ImageInspect(ctx, ids[1][1])
	assert.Error(t, err, "the failed build's image is removed")
	_, err = e.docker.ImageInspect(ctx, ids[0][1])
	assert.NoError(t, err, "the base image stays")

	// Another project with the same first stage gets the same stage image
	// from the engine's layer cache; deleting this project leaves it theirs.
	other := dockerJob(t, multi("two"))
	_, err = e.rt.Build(ctx, other, logs)
	require.NoError(t, err, logs.All())
	otherStage := "keelson/" + e.rt.Instance() + "-" + other.ProjectID + ":cache-stage0"
	shared, err := e.docker.ImageInspect(ctx, otherStage)
	require.NoError(t, err)
	require.Equal(t, second.ID, shared.ID, "the layer cache shares the stage image")

	for _, id := range []string{job.DeploymentID, next.DeploymentID, failed.DeploymentID} {
		require.NoError(t, e.rt.Cleanup(ctx, id))
	}
	require.NoError(t, e.rt.CleanupProject(ctx, job.ProjectID))
	assert.Empty(t, containertest.Leftovers(t, e.docker, e.rt.Instance(), container.LabelProject, job.ProjectID))
	_, err = e.docker.ImageInspect(ctx, otherStage)
	assert.NoError(t, err, "the other project's stage cache stays")

	require.NoError(t, e.rt.Cleanup(ctx, other.DeploymentID))
	require.NoError(t, e.rt.CleanupProject(ctx, other.ProjectID))
	assert.Empty(t, containertest.Leftovers(t, e.docker, e.rt.Instance(), container.LabelProject, other.ProjectID))
}
