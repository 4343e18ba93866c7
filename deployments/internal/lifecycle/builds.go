package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/keelson-dev/keelson/deployments/internal/idlock"
)

// Builds are the builds a runtime runs, kept alike by both runtimes: one at
// a time per deployment, under the deployment's workspace lock; none once
// closed; none of a deployment whose app runs. Cleanup cancels a deployment's
// build. The zero value is ready to use.
type Builds struct {
	mu      sync.Mutex
	closed  bool
	cancels map[string]context.CancelFunc // deploymentID -> running build
	locks   idlock.Locks                  // deploymentID -> workspace lock
}

// Begin starts the build of deployment id: it takes the workspace lock and
// refuses when the runtime is closed or running(id). The build runs with the
// returned context, which ends when ctx or base ends or Cancel(id) is
// called, and calls end once done.
func (b *Builds) Begin(ctx, base context.Context, id string, running func(id string) bool) (context.Context, func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(base, cancel)
	unlock := b.locks.Lock(id)
	b.mu.Lock()
	var err error
	switch {
	case b.closed:
		err = errors.New("runtime is shut down")
	case running(id):
		err = fmt.Errorf("deployment %s is running; stop it before building it again", id)
	default:
		if b.cancels == nil {
			b.cancels = map[string]context.CancelFunc{}
		}
		b.cancels[id] = cancel
	}
	b.mu.Unlock()
	end := func() {
		b.mu.Lock()
		if err == nil {
			delete(b.cancels, id)
		}
		b.mu.Unlock()
		unlock()
		stop()
		cancel()
	}
	if err != nil {
		end()
		return nil, nil, err
	}
	return ctx, end, nil
}

// CancelAndLock cancels the build of id if one runs and takes the
// deployment's workspace lock once it ended; the caller calls unlock.
func (b *Builds) CancelAndLock(id string) (unlock func()) {
	b.mu.Lock()
	if cancel := b.cancels[id]; cancel != nil {
		cancel()
	}
	b.mu.Unlock()
	return b.locks.Lock(id)
}

// Close refuses every build from now on.
func (b *Builds) Close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
}
