package container

import (
	"errors"
	"net/netip"
	"testing"

	dockerspec "github.com/moby/docker-image-spec/specs-go/v1"
	"github.com/moby/moby/client"
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
			err := checkDockerfile("Dockerfile", tc.text, images)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	asked = nil
	ok := "FROM golang:1.26 AS build\nADD . /src\nADD --chown=1:1 a.tar.gz /\nCOPY --from=build /x /y\nCOPY --from=0 /x /z\n" +
		"FROM scratch\nCOPY --from=build /out /app\nENV URL=http://example.com\nRUN wget $URL\nADD [\"a b\", \"/c\"]\n"
	require.NoError(t, checkDockerfile("Dockerfile", ok, images))
	assert.Equal(t, []string{"golang:1.26"}, asked, "stages and scratch are not images to fetch")
}

func TestCheckOnBuild(t *testing.T) {
	require.NoError(t, checkOnBuild("b", []string{"COPY . /app", "RUN make", "ADD x.tar /"}))
	err := checkOnBuild("b", []string{"ADD http://169.254.169.254/latest/meta-data /m"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "base image b has an ONBUILD ADD that fetches a URL")
}

func TestPrivateRegistry(t *testing.T) {
	lookup := func(host string) ([]netip.Addr, error) {
		switch host {
		case "registry.lan":
			return []netip.Addr{netip.MustParseAddr("10.1.2.3")}, nil
		case "ghcr.io":
			return []netip.Addr{netip.MustParseAddr("140.82.114.33")}, nil
		}
		return nil, errors.New("no such host")
	}
	lan := netip.MustParsePrefix("10.1.0.0/16")
	none := func(netip.Addr) bool { return false }
	allowLAN := func(a netip.Addr) bool { return lan.Contains(a) }
	for ref, want := range map[string]string{
		"alpine": "", "docker.io/library/alpine@sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef": "",
		"ghcr.io/a/b:1": "", "nowhere.example/a": "",
		"localhost:5000/a":      "is this server",
		"127.0.0.1:5000/a":      "private address (127.0.0.1)",
		"[::1]:5000/a":          "private address (::1)",
		"169.254.169.254/a:1":   "private address (169.254.169.254)",
		"registry.lan/a":        "private address (10.1.2.3)",
		"100.64.1.1:443/x/y:z":  "private address (100.64.1.1)",
		"[fd00::1]:5000/a":      "private address (fd00::1)",
		"192.168.1.10:5000/b:2": "private address",
	} {
		err := privateRegistry(registryHost(ref), lookup, none)
		if want == "" {
			assert.NoError(t, err, ref)
		} else if assert.Error(t, err, ref) {
			assert.Contains(t, err.Error(), want, ref)
		}
	}
	assert.NoError(t, privateRegistry(registryHost("registry.lan/a"), lookup, allowLAN), "an allowed CIDR")
}

// A local image is refused when Keelson built it, or when its ONBUILD
// triggers copy from an image a build may not name.
func TestLocalImageProblem(t *testing.T) {
	img := func(labels map[string]string, onbuild ...string) client.ImageInspectResult {
		var res client.ImageInspectResult
		res.Config = &dockerspec.DockerOCIImageConfig{}
		res.Config.Labels = labels
		res.Config.OnBuild = onbuild
		return res
	}
	assert.Empty(t, localImageProblem(client.ImageInspectResult{}))
	assert.Empty(t, localImageProblem(img(map[string]string{"maintainer": "x"}, "COPY --from=busybox:1 /bin/sh /sh")))
	assert.Contains(t, localImageProblem(img(map[string]string{LabelProject: "p1"})), "an image Keelson built for a project")
	assert.Contains(t, localImageProblem(img(map[string]string{LabelKeelson: "1"})), "an image Keelson built for a project")
	assert.Equal(t, "its ONBUILD trigger copies from keelson/abc-p1:cache, which a build may not use",
		localImageProblem(img(nil, "RUN true", "COPY --chown=1:1 --from=keelson/abc-p1:cache /a /a")))
}
