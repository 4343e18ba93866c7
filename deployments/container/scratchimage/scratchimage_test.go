package scratchimage

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Which Dockerfiles are made without the builder, and what they make.
func TestPlanScratch(t *testing.T) {
	src := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(src, "app"), []byte("binary"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(src, "static", "css"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(src, "static", "css", "a.css"), []byte("a"), 0o644))
	labels := `LABEL "dev.keelson"="1" "dev.keelson.project"="p1"` + "\n"
	img, ok := Plan("FROM scratch\nCOPY app /app\nCOPY static /srv/\nWORKDIR /srv\nENV A=1 B=2\nEXPOSE 8080\nUSER 65534:65534\n"+
		"ENTRYPOINT [\"/app\"]\nCMD [\"serve\"]\n"+labels, src)
	require.True(t, ok)
	c := img.config
	assert.Equal(t, []string{"/app"}, c.Entrypoint)
	assert.Equal(t, []string{"serve"}, c.Cmd)
	assert.Equal(t, []string{defaultPath, "A=1", "B=2"}, c.Env)
	assert.Equal(t, "/srv", c.WorkingDir)
	assert.Equal(t, "65534:65534", c.User)
	assert.Equal(t, map[string]string{"dev.keelson": "1", "dev.keelson.project": "p1"}, c.Labels)
	assert.Contains(t, c.ExposedPorts, "8080/tcp")
	var buf bytes.Buffer
	require.NoError(t, img.writeLayer(&buf, src))
	got := map[string]int64{}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		got[h.Name] = h.Mode
	}
	assert.Equal(t, map[string]int64{"srv/": 0o755, "app": 0o755, "srv/css/": 0o755, "srv/css/a.css": 0o644}, got)

	for name, text := range map[string]string{
		"a base image":     "FROM alpine\nCOPY app /app\n",
		"a RUN":            "FROM scratch\nCOPY app /app\nRUN [\"/app\"]\n",
		"a variable":       "FROM scratch\nENV X=1\nCOPY app /$X\n",
		"a shell form":     "FROM scratch\nCOPY app /app\nENTRYPOINT /app\n",
		"a COPY flag":      "FROM scratch\nCOPY --chown=1 app /app\n",
		"a glob":           "FROM scratch\nCOPY *.bin /\n",
		"a directive":      "# escape=`\nFROM scratch\nCOPY app /app\n",
		"two stages":       "FROM scratch\nCOPY app /app\nFROM scratch\n",
		"ADD":              "FROM scratch\nADD app /app\n",
		"a quoted ENV":     "FROM scratch\nENV A=\"x y\"\n",
		"single quotes":    "FROM scratch\nLABEL a='b'\n",
		"an open continue": "FROM scratch\nCOPY app \\",
	} {
		_, ok := Plan(text, src)
		assert.False(t, ok, name)
	}
	require.NoError(t, os.WriteFile(filepath.Join(src, ".dockerignore"), []byte("x\n"), 0o644))
	_, ok = Plan("FROM scratch\nCOPY app /app\n", src)
	assert.False(t, ok, ".dockerignore")
}

// A source the builder would treat by its own rules (a symlink) sends the
// Dockerfile back to it.
func TestScratchLayerRefusesSymlinks(t *testing.T) {
	src := t.TempDir()
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(src, "app")))
	img, ok := Plan("FROM scratch\nCOPY app /app\n", src)
	require.True(t, ok)
	assert.ErrorIs(t, img.writeLayer(io.Discard, src), ErrNotPlain)
}
