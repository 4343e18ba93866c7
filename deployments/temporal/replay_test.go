package temporal

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// TestWorkflowReplaysHistoriesOfEarlierVersions replays histories recorded
// on the dev server by earlier versions of Workflow (testdata/history_v*),
// so a change that would break workflows running during an upgrade (a step
// added without workflow.GetVersion) fails here. v0 was recorded at commit
// b15b3ea, before the per-owner build slots: one deployment that went LIVE
// and was released (deleted), one whose build command failed.
func TestWorkflowReplaysHistoriesOfEarlierVersions(t *testing.T) {
	for _, file := range []string{"testdata/history_v0_live_released.json", "testdata/history_v0_build_failed.json"} {
		t.Run(file, func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflowWithOptions(Workflow, workflow.RegisterOptions{Name: WorkflowType})
			require.NoError(t, r.ReplayWorkflowHistoryFromJSONFile(nil, file))
		})
	}
}
