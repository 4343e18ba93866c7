package deployments

import "github.com/keelson-dev/keelson/deployments/metric"

// Metrics is told what the module does, for an operator's dashboards
// (Deps.Metrics, optional); see package metric.
type Metrics = metric.Metrics

// BuildOutcome is how a build ended.
type BuildOutcome = metric.BuildOutcome

// Build outcomes.
const (
	BuildSucceeded = metric.BuildSucceeded
	BuildFailed    = metric.BuildFailed
	BuildCancelled = metric.BuildCancelled
)
