// Package lifecycle holds the steps of a deployment's life that both runtimes
// (deployments/process and deployments/container) take alike: joining an app
// that is already starting or running, stopping every app at close, and
// keeping the builds (Builds).
package lifecycle

import (
	"context"
	"fmt"
	"sync"
)

// Await waits for the app of deployment id that is already starting or
// running, given its ready channel (closed once it answered HTTP) and done
// channel (closed once its supervisor ended). It returns restart=true when
// the app gave up (after crashes) and must be started afresh, an error when
// it stopped while starting or ctx ended, and neither when it runs.
func Await(ctx context.Context, id string, ready, done <-chan struct{}) (restart bool, err error) {
	select {
	case <-ready:
	case <-done:
	case <-ctx.Done():
		return false, context.Cause(ctx)
	}
	switch {
	case !Closed(ready):
		return false, fmt.Errorf("the app of deployment %s stopped while starting", id)
	case Closed(done): // gave up after crashes: start it afresh
		return true, nil
	}
	return false, nil
}

// StopAll stops every id at once with stop and waits for them all; it
// returns their errors, one an id.
func StopAll(ctx context.Context, ids []string, stop func(ctx context.Context, id string) error) []error {
	var wg sync.WaitGroup
	errs := make([]error, len(ids))
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = stop(ctx, id)
		}()
	}
	wg.Wait()
	return errs
}

// Closed reports whether c is closed.
func Closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
