// Package events is the typed publish/subscribe that carries the
// notifications between modules: a module built early publishes what
// happened (projects: a project was deleted or moved; plans: a plan
// changed), and a module built later subscribes when it is constructed. The
// build order is then the dependency order, and no module holds a pointer to
// one built after it.
//
// Delivery is synchronous, in the publisher's goroutine and in the order of
// subscription: Publish returns when every subscriber has run, so a change
// is followed through before the publisher answers, exactly as a direct call
// would be, and the first subscriber error stops delivery and is returned to
// the publisher. A subscriber that must not hold the publisher up starts its
// own work in the background.
//
// It is not a message queue: nothing is stored, retried or sent to another
// process (replicas hear of changes through the database: db.StartListen).
// And it is only for notifications; a question to another module is an
// interface in the asking module's Deps, never an event.
package events

import (
	"context"
	"sync"
)

// Handler is one subscriber of a Topic of events E.
type Handler[E any] func(ctx context.Context, e E) error

// Topic is one kind of event E: its publisher calls Publish, its subscribers
// Subscribe. The zero value is ready to use, and a nil *Topic has no
// subscribers (Publish does nothing).
type Topic[E any] struct {
	mu   sync.RWMutex
	subs []Handler[E]
}

// Subscribe adds h; it is called after the handlers subscribed before it.
// Hosts subscribe while they build the modules, before any is started.
func (t *Topic[E]) Subscribe(h Handler[E]) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.subs = append(t.subs, h)
}

// Publish calls every subscriber with e, in order of subscription, in the
// caller's goroutine. It stops at the first error and returns it; the
// subscribers after it are not called.
func (t *Topic[E]) Publish(ctx context.Context, e E) error {
	if t == nil {
		return nil
	}
	t.mu.RLock()
	subs := t.subs
	t.mu.RUnlock()
	for _, h := range subs {
		if err := h(ctx, e); err != nil {
			return err
		}
	}
	return nil
}

// Notify adapts fn, which cannot fail, to a Handler.
func Notify[E any](fn func(e E)) Handler[E] {
	return func(_ context.Context, e E) error { fn(e); return nil }
}
