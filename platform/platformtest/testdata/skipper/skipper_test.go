// Package skipper is run by platformtest's TestSummaryShownByPlainGoTest
// (go test ./testdata/skipper): one test skipped through platformtest.Skip,
// one that passes, and the summary line after them.
package skipper

import (
	"testing"

	"github.com/keelson-dev/keelson/platform/platformtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	platformtest.Summary()
	if code != 0 {
		panic("skipper failed")
	}
}

func TestNeedsWidget(t *testing.T) {
	platformtest.Skip(t, "no widget on this machine", "make widget")
}

func TestPasses(t *testing.T) {}
