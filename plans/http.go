package plans

import (
	"context"
	"errors"
	"net/http"

	"github.com/danielgtaylor/huma/v2"
	"github.com/keelson-dev/keelson/platform"
)

type planOutput struct {
	Body *Plan
}

type listOutput struct {
	Body []*Plan
}

type idInput struct {
	ID string `path:"id" maxLength:"36" doc:"Plan id (UUID)"`
}

type createInput struct {
	Body PlanInput
}

type patchInput struct {
	ID   string `path:"id" maxLength:"36" doc:"Plan id (UUID)"`
	Body PlanPatch
}

type assignInput struct {
	ID     string `path:"id" maxLength:"36" doc:"Plan id (UUID)"`
	UserID string `path:"userId" maxLength:"36" doc:"User id (UUID)"`
}

// Register adds the plan routes to api: GET /plans and GET /plans/{id} are
// public; POST, PATCH, DELETE and the account assignment need the ADMIN role.
func (s *Service) Register(api huma.API) error {
	if s.d.Auth == nil {
		return errors.New("plans: Deps.Auth is required to register routes")
	}
	tags := []string{"Plans"}
	s.registerReads(api, tags)
	s.registerWrites(api, tags)
	return nil
}

// registerReads adds the public routes: list and get.
func (s *Service) registerReads(api huma.API, tags []string) {
	huma.Register(api, huma.Operation{
		OperationID: "list-plans", Method: http.MethodGet, Path: "/plans", Tags: tags,
		Summary: "List plans", Description: "Every plan, lowest tier first. Public.",
	}, func(ctx context.Context, _ *struct{}) (*listOutput, error) {
		return platform.Reply[listOutput](s.List(ctx))
	})
	huma.Register(api, huma.Operation{
		OperationID: "get-plan", Method: http.MethodGet, Path: "/plans/{id}", Tags: tags,
		Summary: "Get a plan", Description: "Public.",
	}, func(ctx context.Context, in *idInput) (*planOutput, error) {
		p, err := s.Get(ctx, in.ID)
		if err != nil {
			if errors.Is(err, platform.ErrNotFound) {
				err = platform.NotFound("plan not found")
			}
			return nil, err
		}
		return &planOutput{Body: p}, nil
	})
}

// registerWrites adds the ADMIN routes: create, update, delete and assign.
func (s *Service) registerWrites(api huma.API, tags []string) {
	admin := huma.Middlewares{platform.RequireRole(api, s.d.Auth, platform.RoleAdmin)}
	huma.Register(api, huma.Operation{
		OperationID: "create-plan", Method: http.MethodPost, Path: "/plans", Tags: tags,
		Summary: "Create a plan", Description: "ADMIN only. A taken name is 409.",
		DefaultStatus: http.StatusCreated, Security: platform.Bearer(), Middlewares: admin,
		MaxBodyBytes: 16 << 10,
	}, func(ctx context.Context, in *createInput) (*planOutput, error) {
		return platform.Reply[planOutput](s.Create(ctx, in.Body))
	})
	huma.Register(api, huma.Operation{
		OperationID: "update-plan", Method: http.MethodPatch, Path: "/plans/{id}", Tags: tags,
		Summary: "Update a plan",
		Description: "ADMIN only. Any subset of the create fields. Renaming a plan projects use, " +
			"or moving the last FREE-tier plan to another tier, is 409.",
		Security: platform.Bearer(), Middlewares: admin, MaxBodyBytes: 16 << 10,
	}, func(ctx context.Context, in *patchInput) (*planOutput, error) {
		return platform.Reply[planOutput](s.Update(ctx, in.ID, in.Body))
	})
	huma.Register(api, huma.Operation{
		OperationID: "delete-plan", Method: http.MethodDelete, Path: "/plans/{id}", Tags: tags,
		Summary: "Delete a plan",
		Description: "ADMIN only. A plan used by projects or as an account plan, or the last FREE-tier " +
			"plan, cannot be deleted (409). Answers the deleted plan.",
		Security: platform.Bearer(), Middlewares: admin,
	}, func(ctx context.Context, in *idInput) (*planOutput, error) {
		return platform.Reply[planOutput](s.Delete(ctx, in.ID))
	})
	huma.Register(api, huma.Operation{
		OperationID: "assign-account-plan", Method: http.MethodPut, Path: "/plans/{id}/accounts/{userId}", Tags: tags,
		Summary:       "Put a user on a plan",
		Description:   "ADMIN only. Makes the plan the user's account plan (users without one are on the default FREE-tier plan).",
		DefaultStatus: http.StatusNoContent, Security: platform.Bearer(), Middlewares: admin,
	}, func(ctx context.Context, in *assignInput) (*struct{}, error) {
		if err := s.AssignAccountPlan(ctx, in.UserID, in.ID); err != nil {
			return nil, err
		}
		return nil, nil
	})
	huma.Register(api, huma.Operation{
		OperationID: "assign-team-plan", Method: http.MethodPut, Path: "/plans/{id}/teams/{teamId}", Tags: tags,
		Summary: "Put a team on a plan",
		Description: "ADMIN only. Makes the plan the team's: its quotas and whether it may have more than one member (teamMembers). " +
			"Until then a team follows its owner's account plan.",
		DefaultStatus: http.StatusNoContent, Security: platform.Bearer(), Middlewares: admin,
	}, func(ctx context.Context, in *struct {
		ID     string `path:"id" maxLength:"36" doc:"Plan id (UUID)"`
		TeamID string `path:"teamId" maxLength:"36" doc:"Team id (UUID)"`
	}) (*struct{}, error) {
		return nil, s.AssignTeamPlan(ctx, in.TeamID, in.ID)
	})
}
