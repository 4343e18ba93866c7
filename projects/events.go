package projects

import (
	"context"

	"github.com/keelson-dev/keelson/platform/events"
)

// Events are what the projects module publishes (platform/events). Modules
// built after it subscribe when they are built (Service.Events): deployments
// and custom domains tear a deleted project down and follow a moved one, the
// bandwidth module and the ingress follow settings.
type Events struct {
	// Deleted is published by a project's teardown, in the background, with
	// a context bounded by Deps.TeardownTimeout. Subscribers remove what the
	// project has outside this module (apps, routes, workspaces, logs,
	// domains) and must be idempotent: an error leaves the project FAILED
	// with it, and the next DELETE (or Start) publishes the event again.
	Deleted events.Topic[Deleted]
	// OwnerChanged is published after a project moved to another owner
	// account; a subscriber's error is the transfer's error.
	OwnerChanged events.Topic[OwnerChanged]
	// PlanChanged is published after a settings update changed planName; it
	// runs on the request's goroutine (its error is logged only).
	PlanChanged events.Topic[PlanChanged]
	// HTTPSRedirectChanged is published after a settings update changed
	// httpsRedirect; same rules as PlanChanged.
	HTTPSRedirectChanged events.Topic[HTTPSRedirectChanged]
}

// Deleted: the project is being deleted and its teardown runs.
type Deleted struct{ ProjectID string }

// OwnerChanged: the project moved to the owner account OwnerID (a user or a team).
type OwnerChanged struct{ ProjectID, OwnerID string }

// PlanChanged: the project's own plan (planName) changed.
type PlanChanged struct{ ProjectID string }

// HTTPSRedirectChanged: the project's httpsRedirect changed.
type HTTPSRedirectChanged struct{ ProjectID string }

// Events returns the topics the module publishes on; subscribe before Start.
func (s *Service) Events() *Events { return &s.events }

// published logs the error of a notification whose subscribers cannot
// undo the change that was made.
func (s *Service) published(ctx context.Context, what string, err error) {
	if err != nil {
		s.d.Logger.WarnContext(ctx, "projects: "+what+": a subscriber failed", "err", err)
	}
}
