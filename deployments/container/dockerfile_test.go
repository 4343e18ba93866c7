package container

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keelson-dev/keelson/deployments"
)

func TestDockerfileFor(t *testing.T) {
	imgs := Images{Go: "b/go", GoRun: "r/go", Node: "n/node", Static: "s/static"}
	dir := func(files ...string) string {
		d := t.TempDir()
		for _, f := range files {
			require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(d, f)), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(d, f), []byte("x"), 0o644))
		}
		return d
	}
	job := func(fw string) deployments.Job { return deployments.Job{Framework: fw} }

	got, err := dockerfileFor(job("go"), dir("go.mod", "go.sum", "main.go"), imgs)
	require.NoError(t, err)
	assert.Equal(t, "FROM b/go AS build\nWORKDIR /src\nENV CGO_ENABLED=0\nCOPY go.mod go.sum ./\nRUN go mod download\n"+
		"COPY . .\nRUN go build -trimpath -o /out/app .\nFROM r/go\nCOPY --from=build /out/app /app\nUSER 65534:65534\nENTRYPOINT [\"/app\"]\n", got)

	got, err = dockerfileFor(job("nextjs"), dir("package.json"), imgs)
	require.NoError(t, err)
	assert.Contains(t, got, "FROM n/node AS build\n")
	assert.Contains(t, got, "RUN npm ci || npm install\n")
	assert.Contains(t, got, "USER 65534:65534\nCMD [\"npm\", \"start\"]\n")

	got, err = dockerfileFor(job("static"), dir("public/index.html"), imgs)
	require.NoError(t, err)
	assert.Contains(t, got, "FROM s/static\nCOPY public/ /site/\n")

	// A repository's own Dockerfile wins whatever the framework.
	got, err = dockerfileFor(job("go"), dir("Dockerfile"), imgs)
	require.NoError(t, err)
	assert.Empty(t, got)

	// Its own commands run in the preset's builder image.
	j := job("go")
	j.BuildCommand, j.StartCommand = "make app", "./bin/app --serve"
	got, err = dockerfileFor(j, dir("main.go"), imgs)
	require.NoError(t, err)
	assert.Equal(t, "FROM b/go\nWORKDIR /src\nCOPY . .\nRUN make app\nUSER 65534:65534\nCMD [\"sh\", \"-c\", \"exec ./bin/app --serve\"]\n", got)
	j.BuildCommand = "make\nRUN evil"
	_, err = dockerfileFor(j, dir("main.go"), imgs)
	assert.ErrorContains(t, err, "one line")

	_, err = dockerfileFor(job("docker"), dir("index.html"), imgs)
	assert.ErrorContains(t, err, `framework "docker" needs a Dockerfile at the root of the repository`)
	_, err = dockerfileFor(job("cobol"), dir("main.cob"), imgs)
	assert.ErrorContains(t, err, `framework "cobol" has no preset`)

	d := dir()
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(d, "Dockerfile")))
	_, err = dockerfileFor(job("go"), d, imgs)
	assert.ErrorContains(t, err, "not a regular file")
}

// The images a Dockerfile builds on, read as the classic builder reads it.
func TestImageRefs(t *testing.T) {
	text := "# escape=`\n" +
		"ARG BASE=keelson/abc-p1:cache\n" +
		"ARG TAG\n" +
		"FROM ${BASE} AS one\n" +
		"# a comment\n" +
		"FROM --platform=linux/amd64 busybox:${TAG:-1.37} AS Two\n" +
		"COPY --from=one /a /a\n" +
		"COPY --chown=1:1 `\n" +
		"  # a comment inside the continuation\n" +
		"  --from=two /b /b\n" +
		"COPY --from=1 /c /c\n" +
		"COPY --from=7 /d /d\n" +
		"FROM one\n" +
		"FROM scratch\n" +
		"copy --from=c789f /e /e\n"
	var got []string
	require.NoError(t, checkDockerfile("Dockerfile", text, func(ref string) error {
		got = append(got, ref)
		return nil
	}))
	assert.Equal(t, []string{"keelson/abc-p1:cache", "busybox:1.37", "7", "c789f"}, got,
		"stages (by name or index) and scratch are not images")
	err := checkDockerfile("Dockerfile", text, func(ref string) error {
		if ref == "7" {
			return errors.New(imageRefProblem(ref))
		}
		return nil
	})
	assert.EqualError(t, err, "Dockerfile line 12 (COPY --from 7): it names an image by a local image id; name it by repository and tag or digest")

	for ref, refused := range map[string]bool{
		"keelson/abc-p1:cache": true, "docker.io/keelson/x:1": true, "KEELSON/X": true,
		"c789f": true, "sha256:c789f89c": true, "0": true, "a${X}": true,
		"busybox:1.37": false, "golang:1.26-alpine": false, "ghcr.io/keelson/x:1": false,
		"cafe:1": false, "node@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef": false,
	} {
		assert.Equal(t, refused, imageRefProblem(ref) != "", ref)
	}
}
