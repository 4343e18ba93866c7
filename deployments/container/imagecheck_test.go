package container

import (
	"errors"
	"net/netip"
	"testing"

	dockerspec "github.com/moby/docker-image-spec/specs-go/v1"
	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"

	"github.com/keelson-dev/keelson/deployments/container/dockerfile"
)

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
		err := privateRegistry(dockerfile.RegistryHost(ref), lookup, none)
		if want == "" {
			assert.NoError(t, err, ref)
		} else if assert.Error(t, err, ref) {
			assert.Contains(t, err.Error(), want, ref)
		}
	}
	assert.NoError(t, privateRegistry(dockerfile.RegistryHost("registry.lan/a"), lookup, allowLAN), "an allowed CIDR")
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
