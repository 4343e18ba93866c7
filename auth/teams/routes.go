package teams

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"
	"github.com/keelson-dev/keelson/platform"
)

// Register adds the team, member and invitation routes to api; all need a bearer token.
func (s *Service) Register(api huma.API) error {
	ops, err := platform.NewBearerOps("teams", api, s.d.Auth, "Teams")
	if err != nil {
		return err
	}
	ops.MaxBodyBytes = 16 << 10
	op := func(id, method, path, summary string, status int) huma.Operation {
		return ops.Op(id, method, path, summary, "", status)
	}
	huma.Register(api, op("create-team", http.MethodPost, "/teams", "Create a team; the caller becomes its owner", http.StatusCreated), s.create)
	huma.Register(api, op("list-teams", http.MethodGet, "/teams", "List the caller's teams, newest first", http.StatusOK), s.list)
	huma.Register(api, op("get-team", http.MethodGet, "/teams/{id}", "Get a team (members only; 404 otherwise)", http.StatusOK), s.get)
	huma.Register(api, op("update-team", http.MethodPatch, "/teams/{id}", "Rename a team (owner)", http.StatusOK), s.update)
	huma.Register(api, op("delete-team", http.MethodDelete, "/teams/{id}", "Delete a team that owns no project (owner)", http.StatusNoContent), s.delete)
	huma.Register(api, op("list-team-members", http.MethodGet, "/teams/{id}/members", "List a team's members, first joined first", http.StatusOK), s.members)
	huma.Register(api, op("update-team-member", http.MethodPatch, "/teams/{id}/members/{userId}",
		"Change a member's role (admin; granting or taking away owner: owner; the last owner stays owner)", http.StatusOK), s.setRole)
	huma.Register(api, op("remove-team-member", http.MethodDelete, "/teams/{id}/members/{userId}",
		"Remove a member (admin; an owner: owner; not the last owner); they lose the team's projects at once", http.StatusNoContent), s.remove)
	huma.Register(api, op("leave-team", http.MethodPost, "/teams/{id}/leave", "Leave a team (the last owner cannot)", http.StatusNoContent), s.leave)
	huma.Register(api, op("create-team-invitation", http.MethodPost, "/teams/{id}/invitations",
		"Invite an email address to the team (admin; the owner role: owner); the link is mailed, never answered", http.StatusCreated), s.invite)
	huma.Register(api, op("list-team-invitations", http.MethodGet, "/teams/{id}/invitations", "List the team's pending invitations (admin)", http.StatusOK), s.invitations)
	huma.Register(api, op("revoke-team-invitation", http.MethodDelete, "/teams/{id}/invitations/{invitationId}", "Revoke a pending invitation (admin)", http.StatusNoContent), s.revoke)
	huma.Register(api, op("accept-team-invitation", http.MethodPost, "/invitations/accept",
		"Accept an invitation: only the signed-in account whose verified email was invited", http.StatusOK), s.accept)
	return nil
}

func caller(ctx context.Context) string {
	p, _ := platform.PrincipalFrom(ctx)
	return p.UserID
}

// TeamRequest is the body of POST /teams and PATCH /teams/{id}.
type TeamRequest struct {
	Name string `json:"name" minLength:"1" maxLength:"100" doc:"Display name"`
}

// MemberRoleRequest is the body of PATCH /teams/{id}/members/{userId}.
type MemberRoleRequest struct {
	Role platform.MemberRole `json:"role" enum:"owner,admin,developer,viewer"`
}

// InvitationRequest is the body of POST /teams/{id}/invitations.
type InvitationRequest struct {
	Email string              `json:"email" minLength:"3" maxLength:"254" doc:"Address to invite"`
	Role  platform.MemberRole `json:"role" enum:"owner,admin,developer,viewer" doc:"Role the invitee gets on accepting"`
}

// AcceptInvitationRequest is the body of POST /invitations/accept.
type AcceptInvitationRequest struct {
	Token string `json:"token" minLength:"1" maxLength:"100" doc:"The token of the mailed link"`
}

// SchemaName methods name these types in the OpenAPI document.
func (TeamRequest) SchemaName() string             { return "TeamRequest" }
func (MemberRoleRequest) SchemaName() string       { return "TeamMemberRoleRequest" }
func (InvitationRequest) SchemaName() string       { return "CreateTeamInvitationRequest" }
func (AcceptInvitationRequest) SchemaName() string { return "AcceptTeamInvitationRequest" }

type idIn struct {
	ID string `path:"id" maxLength:"36" doc:"Team id"`
}

type teamOut struct{ Body *Team }

type pageIn struct {
	ID string `path:"id" maxLength:"36" doc:"Team id"`
	platform.PageParams
}

func (s *Service) create(ctx context.Context, in *struct{ Body TeamRequest }) (*teamOut, error) {
	t, err := s.Create(ctx, caller(ctx), in.Body.Name)
	return &teamOut{t}, err
}

func (s *Service) list(ctx context.Context, in *struct{ platform.PageParams }) (*struct {
	NextCursor string `header:"X-Next-Cursor" doc:"Cursor of the next page; empty on the last page"`
	Body       []*Team
}, error) {
	ts, next, err := s.List(ctx, caller(ctx), in.PageParams)
	if err != nil {
		return nil, err
	}
	out := &struct {
		NextCursor string `header:"X-Next-Cursor" doc:"Cursor of the next page; empty on the last page"`
		Body       []*Team
	}{NextCursor: next, Body: ts}
	return out, nil
}

func (s *Service) get(ctx context.Context, in *idIn) (*teamOut, error) {
	t, err := s.Get(ctx, caller(ctx), in.ID)
	return &teamOut{t}, err
}

func (s *Service) update(ctx context.Context, in *struct {
	ID   string `path:"id" maxLength:"36" doc:"Team id"`
	Body TeamRequest
}) (*teamOut, error) {
	t, err := s.Rename(ctx, caller(ctx), in.ID, in.Body.Name)
	return &teamOut{t}, err
}

func (s *Service) delete(ctx context.Context, in *idIn) (*struct{}, error) {
	return nil, s.Delete(ctx, caller(ctx), in.ID)
}

type membersOut struct {
	NextCursor string `header:"X-Next-Cursor" doc:"Cursor of the next page; empty on the last page"`
	Body       []*Member
}

func (s *Service) members(ctx context.Context, in *pageIn) (*membersOut, error) {
	ms, next, err := s.Members(ctx, caller(ctx), in.ID, in.PageParams)
	return &membersOut{NextCursor: next, Body: ms}, err
}

type memberIn struct {
	ID     string `path:"id" maxLength:"36" doc:"Team id"`
	UserID string `path:"userId" maxLength:"36" doc:"The member's user id"`
}

func (s *Service) setRole(ctx context.Context, in *struct {
	ID     string `path:"id" maxLength:"36" doc:"Team id"`
	UserID string `path:"userId" maxLength:"36" doc:"The member's user id"`
	Body   MemberRoleRequest
}) (*struct{ Body *Member }, error) {
	m, err := s.SetRole(ctx, caller(ctx), in.ID, in.UserID, in.Body.Role)
	return &struct{ Body *Member }{m}, err
}

func (s *Service) remove(ctx context.Context, in *memberIn) (*struct{}, error) {
	return nil, s.Remove(ctx, caller(ctx), in.ID, in.UserID)
}

func (s *Service) leave(ctx context.Context, in *idIn) (*struct{}, error) {
	return nil, s.Leave(ctx, caller(ctx), in.ID)
}

type invitationOut struct{ Body *Invitation }

func (s *Service) invite(ctx context.Context, in *struct {
	ID   string `path:"id" maxLength:"36" doc:"Team id"`
	Body InvitationRequest
}) (*invitationOut, error) {
	inv, err := s.Invite(ctx, caller(ctx), in.ID, in.Body.Email, in.Body.Role)
	return &invitationOut{inv}, err
}

func (s *Service) invitations(ctx context.Context, in *pageIn) (*struct {
	NextCursor string `header:"X-Next-Cursor" doc:"Cursor of the next page; empty on the last page"`
	Body       []*Invitation
}, error) {
	invs, next, err := s.Invitations(ctx, caller(ctx), in.ID, in.PageParams)
	return &struct {
		NextCursor string `header:"X-Next-Cursor" doc:"Cursor of the next page; empty on the last page"`
		Body       []*Invitation
	}{next, invs}, err
}

func (s *Service) revoke(ctx context.Context, in *struct {
	ID           string `path:"id" maxLength:"36" doc:"Team id"`
	InvitationID string `path:"invitationId" maxLength:"36" doc:"Invitation id"`
}) (*struct{}, error) {
	return nil, s.Revoke(ctx, caller(ctx), in.ID, in.InvitationID)
}

func (s *Service) accept(ctx context.Context, in *struct{ Body AcceptInvitationRequest }) (*teamOut, error) {
	t, err := s.Accept(ctx, caller(ctx), in.Body.Token)
	return &teamOut{t}, err
}
