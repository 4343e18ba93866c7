package dockerfile

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCheckDockerfileRefusesWhatTheEngineWouldFetch(t *testing.T) {
	var asked []string
	images := func(ref string) error {
		asked = append(asked, ref)
		if ref == "127.0.0.1:5000/base" {
			return errors.New("private registry")
		}
		return nil
	}
	for _, tc := range []struct{ name, text, want string }{
		{"add url", "FROM alpine\nRUN true\nADD http://127.0.0.1:9/m /m\n", "Dockerfile line 3 (ADD http://127.0.0.1:9/m /m): ADD cannot fetch a URL (http://127.0.0.1:9/m)"},
		{"add url upper case, flags", "FROM alpine\nadd --chown=1:1 HTTPS://169.254.169.254/latest /m\n", "line 2"},
		{"add url json form", "FROM alpine\nADD [\"http://10.0.0.1/x\", \"/x\"]\n", "line 2"},
		{"add url continued", "FROM alpine\nADD \\\n  # a comment\n  http://10.0.0.1/x \\\n  /x\n", "line 2"},
		{"add url escape directive", "# escape=`\nFROM alpine\nADD `\n http://10.0.0.1/x /x\n", "line 3"},
		{"add url from arg", "ARG U=http://10.0.0.1/x\nFROM alpine\nARG U\nADD $U /x\n", "ADD cannot fetch a URL (http://10.0.0.1/x)"},
		{"add url from env", "FROM alpine\nENV H=10.0.0.1\nADD http://${H}/x /x\n", "ADD cannot fetch a URL (http://10.0.0.1/x)"},
		{"add from outside variable", "FROM alpine\nARG U\nADD $U /x\n", "uses $U, which the Dockerfile does not set"},
		{"add git", "FROM alpine\nADD git@github.com:a/b.git /b\n", "ADD cannot fetch a URL"},
		{"onbuild add", "FROM alpine\nONBUILD ADD http://10.0.0.1/x /x\n", "line 2"},
		{"from private registry", "FROM 127.0.0.1:5000/base\n", "Dockerfile line 1 (FROM 127.0.0.1:5000/base): private registry"},
		{"from through arg", "ARG R=127.0.0.1:5000\nFROM $R/base AS b\n", "private registry"},
		{"from outside arg", "ARG R\nFROM $R/base\n", "uses $R, which the Dockerfile gives no default"},
		{"copy from image", "FROM alpine\nCOPY --from=127.0.0.1:5000/base /x /x\n", "line 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check("Dockerfile", tc.text, images)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	asked = nil
	ok := "FROM golang:1.26 AS build\nADD . /src\nADD --chown=1:1 a.tar.gz /\nCOPY --from=build /x /y\nCOPY --from=0 /x /z\n" +
		"FROM scratch\nCOPY --from=build /out /app\nENV URL=http://example.com\nRUN wget $URL\nADD [\"a b\", \"/c\"]\n"
	require.NoError(t, Check("Dockerfile", ok, images))
	assert.Equal(t, []string{"golang:1.26"}, asked, "stages and scratch are not images to fetch")
}

func TestCheckOnBuild(t *testing.T) {
	require.NoError(t, CheckOnBuild("b", []string{"COPY . /app", "RUN make", "ADD x.tar /"}))
	err := CheckOnBuild("b", []string{"ADD http://169.254.169.254/latest/meta-data /m"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "base image b has an ONBUILD ADD that fetches a URL")
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
	require.NoError(t, Check("Dockerfile", text, func(ref string) error {
		got = append(got, ref)
		return nil
	}))
	assert.Equal(t, []string{"keelson/abc-p1:cache", "busybox:1.37", "7", "c789f"}, got,
		"stages (by name or index) and scratch are not images")
	err := Check("Dockerfile", text, func(ref string) error {
		if ref == "7" {
			return errors.New(RefProblem(ref))
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
		assert.Equal(t, refused, RefProblem(ref) != "", ref)
	}
}
