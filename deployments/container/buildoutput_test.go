package container_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/keelson-dev/keelson/deployments/container"
)

// A build whose cached parent image another build removed mid-way fails with
// the engine's "unknown parent image ID" (seen on Docker 20.10 when two
// builds of identical steps ran and one's clean-up removed the shared layer):
// Build tells that apart from a failing step and builds again.
func TestBuildOutputTellsALostCacheLayerApart(t *testing.T) {
	lost := `{"stream":"Step 1/3 : FROM scratch\n"}` + "\n" +
		`{"errorDetail":{"message":"failed to export image: failed to set parent sha256:4e1d: unknown parent image ID sha256:4e1d"},"error":"failed to export image: failed to set parent sha256:4e1d: unknown parent image ID sha256:4e1d"}` + "\n"
	if err := container.ReadBuildOutput(lost); !errors.Is(err, container.ErrCacheLayerLost) {
		t.Fatalf("lost parent: err = %v, want ErrCacheLayerLost", err)
	}
	failed := `{"stream":"Step 2/3 : RUN false\n"}` + "\n" +
		`{"errorDetail":{"code":1,"message":"The command '/bin/sh -c false' returned a non-zero code: 1"},"error":"The command '/bin/sh -c false' returned a non-zero code: 1"}` + "\n"
	err := container.ReadBuildOutput(failed)
	if err == nil || errors.Is(err, container.ErrCacheLayerLost) || !strings.Contains(err.Error(), "returned a non-zero code") {
		t.Fatalf("failing step: err = %v, want the step's failure", err)
	}
}
