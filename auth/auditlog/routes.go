package auditlog

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// Event is one audit row as the API answers it.
type Event struct {
	ID           string    `json:"id" doc:"Event id (UUID)"`
	At           time.Time `json:"at" doc:"When the change was made"`
	ActorID      string    `json:"actorId" doc:"The user who made the change (for an API token, its creator)"`
	TokenID      string    `json:"tokenId,omitempty" doc:"The API token the change was made with; absent for a session"`
	Address      string    `json:"address,omitempty" doc:"The client address the change came from"`
	Action       string    `json:"action" example:"project.create" doc:"<resource>.<verb>"`
	ResourceType string    `json:"resourceType" example:"project"`
	ResourceID   string    `json:"resourceId"`
	OwnerID      string    `json:"ownerId,omitempty" doc:"The account the resource belongs to: a team or a user"`
	ProjectID    string    `json:"projectId,omitempty" doc:"The project the change is about, when there is one"`
	Summary      string    `json:"summary" doc:"What changed, in words; never a secret value"`
}

// SchemaName names Event in the OpenAPI document.
func (Event) SchemaName() string { return "AuditEvent" }

func (r *eventRow) out() *Event {
	return &Event{ID: r.ID, At: r.At.UTC(), ActorID: r.ActorID, TokenID: r.TokenID, Address: r.Addr, Action: r.Action,
		ResourceType: r.ResourceType, ResourceID: r.ResourceID, OwnerID: r.OwnerID, ProjectID: r.ProjectID, Summary: r.Summary}
}

// Filter narrows a listing; empty fields match everything.
type Filter struct {
	Action       string `query:"action" maxLength:"64" pattern:"^[a-z_]+\\.[a-z_]+$" doc:"Only this action, e.g. project.create"`
	ResourceType string `query:"resourceType" maxLength:"32" pattern:"^[a-z_]+$" doc:"Only this resource type, e.g. project"`
}

type listOut struct {
	NextCursor string `header:"X-Next-Cursor" doc:"Cursor of the next page; empty on the last page"`
	Body       []*Event
}

// Register adds GET /teams/{id}/audit-log and GET /auth/audit-log to api.
func (s *Service) Register(api huma.API) error {
	ops, err := platform.NewBearerOps("auditlog", api, s.d.Auth, "")
	if err != nil {
		return err
	}
	op := func(id, path, summary, tag string) huma.Operation {
		o := ops.Op(id, http.MethodGet, path, summary, "", 0)
		o.Tags = []string{tag}
		return o
	}
	huma.Register(api, op("list-team-audit-log", "/teams/{id}/audit-log",
		"A team's audit log, newest first (admin and owner)", "Teams"), s.teamLog)
	huma.Register(api, op("list-account-audit-log", "/auth/audit-log",
		"The caller's audit log, newest first: their own changes and those to their personal projects", "Auth"), s.accountLog)
	return nil
}

func (s *Service) teamLog(ctx context.Context, in *struct {
	ID string `path:"id" maxLength:"36" doc:"Team id"`
	Filter
	platform.PageParams
}) (*listOut, error) {
	p, _ := platform.PrincipalFrom(ctx)
	role, err := s.d.Teams.MemberRole(ctx, in.ID, p.UserID)
	if err != nil {
		return nil, fmt.Errorf("auditlog: team role: %w", err)
	}
	if role == "" || (p.TeamID != "" && p.TeamID != in.ID) { // a token of another team: as a non-member
		return nil, platform.NotFound("team not found")
	}
	if !role.Allows(platform.AuditRead) {
		return nil, platform.Denied(role, platform.AuditRead)
	}
	if !p.Allows(platform.AuditRead) {
		return nil, platform.Forbidden("this API token's scopes do not include " + string(platform.AuditRead)).WithCode("SCOPE_MISSING")
	}
	return s.list(ctx, in.Filter, in.PageParams, func(q *bun.SelectQuery) *bun.SelectQuery {
		return q.Where("owner_id = ?", in.ID)
	})
}

func (s *Service) accountLog(ctx context.Context, in *struct {
	Filter
	platform.PageParams
}) (*listOut, error) {
	p, _ := platform.PrincipalFrom(ctx)
	return s.list(ctx, in.Filter, in.PageParams, func(q *bun.SelectQuery) *bun.SelectQuery {
		return q.Where("(actor_id = ? OR owner_id = ?)", p.UserID, p.UserID)
	})
}

// list answers a page of the rows scope selects, newest first.
func (s *Service) list(ctx context.Context, f Filter, page platform.PageParams, scope func(*bun.SelectQuery) *bun.SelectQuery) (*listOut, error) {
	after, err := platform.DecodeCursor(page.Cursor)
	if err != nil {
		return nil, err
	}
	q := scope(s.d.DB.NewSelect().Model((*eventRow)(nil)))
	if f.Action != "" {
		q = q.Where("action = ?", f.Action)
	}
	if f.ResourceType != "" {
		q = q.Where("resource_type = ?", f.ResourceType)
	}
	rows, next, err := db.ReadPage(ctx, q, db.Keyset{Time: "at", ID: "id"}, after, page.Size(),
		func(last eventRow) platform.Cursor { return platform.Cursor{Time: last.At, ID: last.ID} })
	if err != nil {
		return nil, fmt.Errorf("auditlog: list: %w", db.Translate(err))
	}
	out := &listOut{Body: make([]*Event, 0, len(rows)), NextCursor: next}
	for i := range rows {
		out.Body = append(out.Body, rows[i].out())
	}
	return out, nil
}
