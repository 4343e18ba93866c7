package container_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/container"
	"github.com/keelson-dev/keelson/deployments/container/registrytest"
	"github.com/keelson-dev/keelson/platform"
)

const registryPassword = "reg-pw-0c7e19b2" // must never reach a log line or an error

// syncBuf is the operator's log of a runtime, for checking no secret is in it.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// registryEnv is a runtime pushing to and pulling from reg with the given
// password, its operator log in the returned buffer.
func registryEnv(t *testing.T, repository, password string) (*env, *syncBuf) {
	t.Helper()
	ops := &syncBuf{}
	e := newEnv(t, func(c *container.Config) {
		c.Registry = container.Registry{Repository: repository, Username: "keelson", Password: password}
		c.Logger = slog.New(slog.NewTextHandler(ops, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	return e, ops
}

func staticJob(t *testing.T, version string) deployments.Job {
	job := goJob(newRepo(t, map[string]string{"index.html": "<h1>site " + version + "</h1>"}))
	job.Framework = "static"
	return job
}

// A build is pushed and recorded by digest; once every local copy is gone,
// another runtime (another host's) starts it from the registry by that
// digest, as a rollback does, and serves its answer; its Cleanup removes
// the pulled image.
func TestRegistryPushThenPullByDigest(t *testing.T) {
	reg := registrytest.Start(t, registrytest.Options{Username: "keelson", Password: registryPassword})
	builder, bops := registryEnv(t, reg.Repository(), registryPassword)
	other, oops := registryEnv(t, reg.Repository(), registryPassword)
	ctx := context.Background()

	job := staticJob(t, "v1")
	logs := &sink{}
	_, err := builder.rt.Build(ctx, job, logs)
	require.NoError(t, err, logs.All())
	image, err := builder.rt.Publish(ctx, job, logs)
	require.NoError(t, err, logs.All())
	require.True(t, strings.HasPrefix(image, reg.Repository()+"/"+strings.ToLower(job.ProjectID)+"@sha256:"), image)
	assert.True(t, logs.Has("pushed "+image), logs.All())
	_, err = builder.docker.ImageInspect(ctx, image)
	require.True(t, cerrdefs.IsNotFound(err), "the image is known by its local tag only, not by the registry's name: %v", err)
	assertNoRegistryTag(t, builder.docker, reg.Repository())

	// Every copy on the engine goes (the builder's deployment and its cache).
	res, err := builder.docker.ImageInspect(ctx, "keelson/"+builder.rt.Instance()+"-"+strings.ToLower(job.ProjectID)+":"+strings.ToLower(job.DeploymentID))
	require.NoError(t, err)
	imageID := res.ID
	require.NoError(t, builder.rt.Cleanup(ctx, job.DeploymentID))
	require.NoError(t, builder.rt.CleanupProject(ctx, job.ProjectID))
	_, err = builder.docker.ImageInspect(ctx, imageID)
	require.True(t, cerrdefs.IsNotFound(err), "the built image is still on the engine: %v", err)

	// A rollback on the other host: nothing kept there, the registry has it.
	next := job
	next.DeploymentID, next.Image = platform.NewID(), image
	require.NoError(t, other.rt.Reuse(ctx, job.DeploymentID, next))
	gone := next
	gone.Image = ""
	require.ErrorIs(t, other.rt.Reuse(ctx, job.DeploymentID, gone), deployments.ErrBuildGone)
	olog := &sink{}
	up, err := other.rt.Start(ctx, next, olog)
	require.NoError(t, err, olog.All())
	assert.True(t, olog.Has("pulling the image "+image+" from the registry"), olog.All())
	_, err = other.rt.Route(ctx, next.ProjectSlug, next.DeploymentID, up)
	require.NoError(t, err)
	code, body := other.get(t, next.ProjectSlug+".localhost", "/index.html")
	assert.Equal(t, 200, code)
	assert.Contains(t, body, "site v1")

	pulled, err := other.docker.ImageInspect(ctx, imageID)
	require.NoError(t, err, "the pulled image is the one built")
	assert.Empty(t, pulled.RepoDigests, "no reference by the registry's name is left to leak")
	require.NoError(t, other.rt.Cleanup(ctx, next.DeploymentID))
	_, err = other.docker.ImageInspect(ctx, imageID)
	assert.True(t, cerrdefs.IsNotFound(err), "Cleanup left the pulled image: %v", err)

	for _, text := range []string{logs.All(), olog.All(), bops.String(), oops.String()} {
		assert.NotContains(t, text, registryPassword)
	}
}

// A wrong credential fails the push, an unreachable registry the push and
// the pull, each in a sentence naming the registry or the digest and never
// the password.
func TestRegistryFailuresAreClearAndKeepTheSecret(t *testing.T) {
	reg := registrytest.Start(t, registrytest.Options{Username: "keelson", Password: registryPassword})
	ctx := context.Background()

	wrong, wops := registryEnv(t, reg.Repository(), "not-the-"+registryPassword)
	job := staticJob(t, "v1")
	logs := &sink{}
	_, err := wrong.rt.Build(ctx, job, logs)
	require.NoError(t, err, logs.All())
	_, err = wrong.rt.Publish(ctx, job, logs)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "pushing the image to the registry "+reg.Repository()+" failed: the registry refused the credentials")
	for _, text := range []string{err.Error(), logs.All(), wops.String()} {
		assert.NotContains(t, text, registryPassword)
	}
	assertNoRegistryTag(t, wrong.docker, reg.Repository())

	// Nothing listens there (a port just freed).
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	down := l.Addr().String() + "/keelson"
	require.NoError(t, l.Close())
	away, aops := registryEnv(t, down, registryPassword)
	_, err = away.rt.Build(ctx, job, logs)
	require.NoError(t, err, logs.All())
	_, err = away.rt.Publish(ctx, job, logs)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "pushing the image to the registry "+down+" failed: the registry cannot be reached")

	next := job
	next.DeploymentID, next.Image = platform.NewID(), down+"/"+strings.ToLower(job.ProjectID)+"@sha256:"+strings.Repeat("ab", 32)
	_, err = away.rt.Start(ctx, next, logs)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "pulling the image "+next.Image+" failed")
	for _, text := range []string{err.Error(), logs.All(), aops.String()} {
		assert.NotContains(t, text, registryPassword)
	}
}

// assertNoRegistryTag: a failed push leaves no tag of the registry's name.
func assertNoRegistryTag(t *testing.T, docker *client.Client, repository string) {
	t.Helper()
	res, err := docker.ImageList(context.Background(), client.ImageListOptions{Filters: client.Filters{}.Add("reference", repository+"/*")})
	require.NoError(t, err)
	assert.Empty(t, res.Items)
}
