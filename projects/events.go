package projects

import (
	"context"

	"github.com/keelson-dev/keelson/platform/events"
)

// Events are what the module publishes (platform/events); modules built
// after it subscribe when they are built.
type Events struct {
	// Deleted is published by a project's background teardown, bounded by
	// Deps.TeardownTimeout. Subscribers remove what the project has outside
	// this module and must be idempotent: an error leaves the project FAILED
	// with it, and the next DELETE (or Start) publishes the event again.
	Deleted events.Topic[Deleted]
	// OwnerChanged: a subscriber's error is the transfer's.
	OwnerChanged events.Topic[OwnerChanged]
	// PlanChanged and HTTPSRedirectChanged follow a settings update, on the
	// request's goroutine; a subscriber's error is only logged.
	PlanChanged          events.Topic[PlanChanged]
	HTTPSRedirectChanged events.Topic[HTTPSRedirectChanged]
}

// Deleted: the project is being deleted; OwnerChanged: it moved to the owner
// account OwnerID; PlanChanged: its planName changed; HTTPSRedirectChanged:
// its httpsRedirect changed.
type (
	Deleted              struct{ ProjectID string }
	OwnerChanged         struct{ ProjectID, OwnerID string }
	PlanChanged          struct{ ProjectID string }
	HTTPSRedirectChanged struct{ ProjectID string }
)

// Events returns the topics the module publishes on; subscribe before Start.
func (s *Service) Events() *Events { return &s.events }

// published logs a settings notification's subscriber error.
func (s *Service) published(ctx context.Context, what string, err error) {
	if err != nil {
		s.d.Logger.WarnContext(ctx, "projects: "+what+": a subscriber failed", "err", err)
	}
}
