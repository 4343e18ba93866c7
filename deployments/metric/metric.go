// Package metric is what the deployments module tells an embedder's
// metrics (deployments.Deps.Metrics): the interface, the build outcomes,
// and the implementation that records nothing.
package metric

import (
	"context"
	"errors"
	"time"
)

// Metrics is told what the module does, for an operator's dashboards: the
// module imports no metrics library; the embedder counts these events in
// its own (the reference server uses Prometheus). Deps.Metrics is optional:
// nil records nothing.
//
// Methods are called on hot paths (the log writer, every stream) and from
// many goroutines: they must be safe for concurrent use, cheap, and never
// block.
type Metrics interface {
	// BuildFinished reports a build (the BUILD step's clone and build, on
	// the runtime) that ended after took, with its outcome.
	BuildFinished(outcome BuildOutcome, took time.Duration)
	// LogLinesStored reports n deployment log lines stored in the database
	// by this process.
	LogLinesStored(n int)
	// LogStreamOpened and LogStreamClosed bracket every log stream (SSE)
	// this process serves: opened when its 200 starts, closed when it ends.
	LogStreamOpened()
	LogStreamClosed()
}

// BuildOutcome is how a build ended.
type BuildOutcome string

// Build outcomes.
const (
	BuildSucceeded BuildOutcome = "succeeded"
	BuildFailed    BuildOutcome = "failed"
	// BuildCancelled is a build stopped by a cancellation or a shutdown.
	BuildCancelled BuildOutcome = "cancelled"
)

// Outcome classifies the error of a runtime's Build.
func Outcome(ctx context.Context, err error) BuildOutcome {
	switch {
	case err == nil:
		return BuildSucceeded
	case ctx.Err() != nil || errors.Is(err, context.Canceled):
		return BuildCancelled
	}
	return BuildFailed
}

// None is the Metrics of a Deps without one: it records nothing.
type None struct{}

func (None) BuildFinished(BuildOutcome, time.Duration) {}
func (None) LogLinesStored(int)                        {}
func (None) LogStreamOpened()                          {}
func (None) LogStreamClosed()                          {}
