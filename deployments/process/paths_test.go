package process

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/platform"
)

// TestStaticSymlinkOutOfTheCheckoutServesNothing is the attack of issue 13: a
// repository holding only index.html and `dist -> <somewhere outside>`, with
// the static preset and no build, must not expose the server's data dir or
// the machine's root through the ingress.
func TestStaticSymlinkOutOfTheCheckoutServesNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, link string }{
		{"dist to the root", "/"},
		{"dist to the data dir", ""}, // filled with the runtime's data dir
		{"public to the data dir", ""},
		{"dist relative up", "../../.."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil)
			const secret = "jwt-secret-value-never-served"
			require.NoError(t, os.WriteFile(filepath.Join(e.dataDir, "jwt-secret"), []byte(secret), 0o600))
			target := tc.link
			if target == "" {
				target = e.dataDir
			}
			sub := "dist"
			if strings.HasPrefix(tc.name, "public") {
				sub = "public"
			}
			repo, _ := newRepo(t, map[string]string{"index.html": "<h1>top</h1>"})
			require.NoError(t, os.Symlink(target, filepath.Join(repo, sub)))
			commit(t, repo, nil)

			job := deployments.Job{DeploymentID: platform.NewID(), ProjectSlug: "leak", RepoURL: repo, Framework: "static"}
			logs := &sink{}
			_, err := e.rt.Build(context.Background(), job, logs)
			require.NoError(t, err, logs.All())
			// The link is really in the checkout, pointing out of it.
			got, err := os.Readlink(filepath.Join(e.dataDir, "workspaces", job.DeploymentID, "src", sub))
			require.NoError(t, err)
			require.Equal(t, target, got)

			up, startErr := e.rt.Start(context.Background(), job, logs)
			if startErr == nil { // as the server would do
				_, err = e.rt.Route(context.Background(), "leak", job.DeploymentID, up)
				require.NoError(t, err)
			}
			for _, p := range []string{"/jwt-secret", "/etc/hostname", "/proc/self/environ"} {
				code, body, err := e.get("leak.localhost", p)
				require.NoError(t, err)
				assert.NotEqual(t, http.StatusOK, code, p)
				assert.NotContains(t, body, secret, p)
			}
			require.ErrorContains(t, startErr, sub+"/ is a symlink that leaves the checkout")
			assert.Contains(t, logs.All(), sub+"/ is a symlink that leaves the checkout")
			assert.False(t, e.rt.sup.Running(job.DeploymentID), "no app is left starting or running")
		})
	}
}

// TestStaticFilesNeverLeaveTheCheckout: a dist/ that is a symlink inside the
// checkout is served, but no file in it that links out of the checkout
// (absolute, relative, or through a linked directory) is.
func TestStaticFilesNeverLeaveTheCheckout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	const secret = "jwt-secret-value-never-served"
	require.NoError(t, os.WriteFile(filepath.Join(e.dataDir, "jwt-secret"), []byte(secret), 0o600))
	repo, _ := newRepo(t, map[string]string{"site/index.html": "<h1>site</h1>", "site/docs/a.html": "doc a",
		"shared.css": "body{}"})
	for link, target := range map[string]string{
		"dist":            "site",
		"site/abs":        filepath.Join(e.dataDir, "jwt-secret"),
		"site/rel":        "../../../jwt-secret",
		"site/datadir":    e.dataDir,
		"site/root":       "/",
		"site/inside.css": "../shared.css", // leaves dist/ but stays in the checkout
		"site/docs2":      "docs",
	} {
		require.NoError(t, os.Symlink(target, filepath.Join(repo, link)))
	}
	commit(t, repo, nil)
	job := deployments.Job{DeploymentID: platform.NewID(), ProjectSlug: "site", RepoURL: repo, Framework: "static"}
	logs := &sink{}
	_, err := e.rt.Build(context.Background(), job, logs)
	require.NoError(t, err, logs.All())
	up, err := e.rt.Start(context.Background(), job, logs)
	require.NoError(t, err, logs.All())
	_, err = e.rt.Route(context.Background(), "site", job.DeploymentID, up)
	require.NoError(t, err)

	assert.Equal(t, "<h1>site</h1>", e.mustGet(t, "site.localhost", "/"))
	assert.Equal(t, "doc a", e.mustGet(t, "site.localhost", "/docs2/a.html"))
	for _, p := range []string{"/abs", "/rel", "/datadir/jwt-secret", "/root/etc/hostname", "/root/",
		"/datadir/", "/inside.css", "/../jwt-secret"} {
		code, body, err := e.get("site.localhost", p)
		require.NoError(t, err)
		assert.NotEqual(t, http.StatusOK, code, p)
		assert.NotContains(t, body, secret, p)
	}
	require.NoError(t, e.rt.Stop(context.Background(), job.DeploymentID))
}

// TestOutputDirSymlinkIsRefused: the go preset writes ./.keelson/app and
// starts it; a repository committing `.keelson -> <elsewhere>` must not make
// the build write outside the checkout.
func TestOutputDirSymlinkIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	outside := t.TempDir()
	files := goApp("v1")
	repo, _ := newRepo(t, files)
	require.NoError(t, os.Symlink(outside, filepath.Join(repo, ".keelson")))
	commit(t, repo, nil)
	job := goJob(repo, "p")
	_, err := e.rt.Build(context.Background(), job, nil)
	require.ErrorContains(t, err, "the repository's .keelson is not a directory")
	entries, err := os.ReadDir(outside)
	require.NoError(t, err)
	assert.Empty(t, entries, "nothing may be written through the link")
}
