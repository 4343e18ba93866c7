package container

import (
	"os"

	"github.com/keelson-dev/keelson/deployments/container/dockerfile"
	"github.com/keelson-dev/keelson/deployments/rt"
)

// Images names the images the presets build with and run on. Each is
// overridable (README: KEELSON_IMAGE_*); the defaults are official images a
// machine with internet access pulls on first use.
type Images struct {
	// Go builds the go preset. Default golang:1.26-alpine.
	Go string
	// GoRun runs a go preset's binary (static, CGO off). Default gcr.io/distroless/static-debian12.
	GoRun string
	// Node builds and runs the node preset. Default node:22-alpine.
	Node string
	// Static serves the static preset with busybox httpd. Default busybox:1.37.
	Static string
}

func (i Images) withDefaults() Images {
	if i.Go == "" {
		i.Go = "golang:1.26-alpine"
	}
	if i.GoRun == "" {
		i.GoRun = "gcr.io/distroless/static-debian12"
	}
	if i.Node == "" {
		i.Node = "node:22-alpine"
	}
	if i.Static == "" {
		i.Static = "busybox:1.37"
	}
	return i
}

// has reports whether ref is one of the presets' images, as configured.
func (i Images) has(ref string) bool {
	return ref != "" && (ref == i.Go || ref == i.GoRun || ref == i.Node || ref == i.Static)
}

// generatedDockerfile is the name of the Dockerfile this runtime writes
// into a build context (dockerfile.Generated).
const generatedDockerfile = dockerfile.Generated

// dockerfileFor returns the Dockerfile for a checkout (dockerfile.For).
func dockerfileFor(job rt.Job, src string, img Images) (string, error) {
	return dockerfile.For(job, src, dockerfile.Presets(img))
}

// writeContext writes a checkout as a build context (dockerfile.WriteContext).
var writeContext = dockerfile.WriteContext

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// DefaultImages are the images used where Images leaves a name empty.
func DefaultImages() Images { return Images{}.withDefaults() }
