package dockerfile

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keelson-dev/keelson/deployments/rt"
)

func TestDockerfileFor(t *testing.T) {
	imgs := Presets{Go: "b/go", GoRun: "r/go", Node: "n/node", Static: "s/static"}
	dir := func(files ...string) string {
		d := t.TempDir()
		for _, f := range files {
			require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(d, f)), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(d, f), []byte("x"), 0o644))
		}
		return d
	}
	job := func(fw string) rt.Job { return rt.Job{Framework: fw} }

	got, err := For(job("go"), dir("go.mod", "go.sum", "main.go"), imgs)
	require.NoError(t, err)
	assert.Equal(t, "FROM b/go AS build\nWORKDIR /src\nENV CGO_ENABLED=0\nCOPY go.mod go.sum ./\nRUN go mod download\n"+
		"COPY . .\nRUN go build -trimpath -o /out/app .\nFROM r/go\nCOPY --from=build /out/app /app\nUSER 65534:65534\nENTRYPOINT [\"/app\"]\n", got)

	got, err = For(job("nextjs"), dir("package.json"), imgs)
	require.NoError(t, err)
	assert.Contains(t, got, "FROM n/node AS build\n")
	assert.Contains(t, got, "RUN npm ci || npm install\n")
	assert.Contains(t, got, "USER 65534:65534\nCMD [\"npm\", \"start\"]\n")

	got, err = For(job("static"), dir("public/index.html"), imgs)
	require.NoError(t, err)
	assert.Contains(t, got, "FROM s/static\nCOPY public/ /site/\n")

	// A repository's own Dockerfile wins whatever the framework.
	got, err = For(job("go"), dir("Dockerfile"), imgs)
	require.NoError(t, err)
	assert.Empty(t, got)

	// Its own commands run in the preset's builder image.
	j := job("go")
	j.BuildCommand, j.StartCommand = "make app", "./bin/app --serve"
	got, err = For(j, dir("main.go"), imgs)
	require.NoError(t, err)
	assert.Equal(t, "FROM b/go\nWORKDIR /src\nCOPY . .\nRUN make app\nUSER 65534:65534\nCMD [\"sh\", \"-c\", \"exec ./bin/app --serve\"]\n", got)
	j.BuildCommand = "make\nRUN evil"
	_, err = For(j, dir("main.go"), imgs)
	assert.ErrorContains(t, err, "one line")

	_, err = For(job("docker"), dir("index.html"), imgs)
	assert.ErrorContains(t, err, `framework "docker" needs a Dockerfile at the root of the repository`)
	_, err = For(job("cobol"), dir("main.cob"), imgs)
	assert.ErrorContains(t, err, `framework "cobol" has no preset`)

	d := dir()
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(d, "Dockerfile")))
	_, err = For(job("go"), d, imgs)
	assert.ErrorContains(t, err, "not a regular file")
}
