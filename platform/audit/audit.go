// Package audit is how a module records a change for the audit log: an
// Entry, written through a Recorder with the same bun.IDB (the transaction)
// as the change, so a change and its audit row commit or roll back
// together. Who acted (the Principal's user and API token) and from where
// (the client address the host put in the context with platform.WithClientAddr) are taken
// from ctx; a module only says what changed.
//
// The table and the routes that read it belong to the auth/auditlog module,
// which implements Recorder; modules that record know only this package. It
// is not a log of reads, nor of what the platform does by itself (a push
// deploying, a retention purge): a change with no person or token behind it
// records nothing.
package audit

import (
	"context"

	"github.com/keelson-dev/keelson/platform"
	"github.com/uptrace/bun"
)

// Entry is one change. Summary is for people and must never hold a secret
// value: name env vars, never their values; name tokens by id.
type Entry struct {
	// Action is "<resource>.<verb>", e.g. "project.create", "member.role".
	Action string
	// ResourceType and ResourceID name what changed ("project", its id).
	ResourceType, ResourceID string
	// OwnerID is the account the resource belongs to: the team of a team's
	// project or of a team's member, the user of a personal project or of
	// their account. The team audit log lists the rows of its team; the
	// account audit log the caller's own actions and the rows of their
	// personal resources.
	OwnerID string
	// ProjectID is the project the change is about, when there is one.
	ProjectID string
	Summary   string
	// ActorID is who acted when ctx carries no Principal (a login); empty
	// otherwise, as the Principal's UserID is taken.
	ActorID string
}

// Recorder writes entries. idb is the change's transaction (or the pool
// when the change is one statement).
type Recorder interface {
	Record(ctx context.Context, idb bun.IDB, e Entry) error
}

// Record writes e through r, if r is set (a module built without an audit
// log records nothing).
func Record(ctx context.Context, r Recorder, idb bun.IDB, e Entry) error {
	if r == nil {
		return nil
	}
	return r.Record(ctx, idb, e)
}

// Actor is who e is recorded for: the caller's user and API token, or
// e.ActorID. An empty user means nobody acted (the platform itself).
func Actor(ctx context.Context, e Entry) (userID, tokenID string) {
	if p, ok := platform.PrincipalFrom(ctx); ok {
		return p.UserID, p.TokenID
	}
	return e.ActorID, ""
}
