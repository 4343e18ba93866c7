package container

import (
	"context"
	"strings"

	"github.com/keelson-dev/keelson/deployments/container/internal/egress"
	"github.com/keelson-dev/keelson/deployments/internal/runlog"
	"github.com/keelson-dev/keelson/deployments/rt"
)

// BridgeID is the id in the names of an instance's bridges and egress chains.
func BridgeID(instance string) string { return egress.BridgeID(instance) }

// ReadBuildOutput reads an engine build stream as Build does.
func ReadBuildOutput(stream string) error {
	r := &Runtime{}
	out := runlog.New(discard{}, rt.StreamBuild, nil)
	return r.readBuildOutput(context.Background(), rt.Job{}, strings.NewReader(stream), &buildTrace{}, out)
}

// ErrCacheLayerLost is errCacheLayerLost.
var ErrCacheLayerLost = errCacheLayerLost

type discard struct{}

func (discard) Log(string, string) {}
