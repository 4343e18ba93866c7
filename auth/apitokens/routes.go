package apitokens

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"
	"github.com/keelson-dev/keelson/platform"
)

// Register adds POST and GET /auth/tokens and DELETE /auth/tokens/{id};
// all need a signed-in session (Deps.Auth), never an API token.
func (s *Service) Register(api huma.API) error {
	ops, err := platform.NewBearerOps("apitokens", api, s.d.Auth, "API tokens")
	if err != nil {
		return err
	}
	ops.MaxBodyBytes = 16 << 10
	op := ops.Op
	huma.Register(api, op("create-api-token", http.MethodPost, "/auth/tokens", "Create an API token; its secret is answered only here",
		"Scopes are permissions (400 names an unknown one). With teamId the caller must be a member of the team whose role holds every scope (404, 403). "+
			"At every use the creator's current role still applies. An account holds a limited number of tokens (403 past it). "+
			"Needs a signed-in session: API tokens cannot manage tokens.", http.StatusCreated), s.create)
	huma.Register(api, op("list-api-tokens", http.MethodGet, "/auth/tokens", "List the caller's API tokens, newest first (never their secrets)", "", http.StatusOK), s.list)
	huma.Register(api, op("delete-api-token", http.MethodDelete, "/auth/tokens/{id}", "Revoke an API token: it stops working at once", "", http.StatusNoContent), s.delete)
	return nil
}

func caller(ctx context.Context) string {
	p, _ := platform.PrincipalFrom(ctx)
	return p.UserID
}

func (s *Service) create(ctx context.Context, in *struct{ Body CreateRequest }) (*struct{ Body *CreatedToken }, error) {
	t, err := s.Create(ctx, caller(ctx), &in.Body)
	if err != nil {
		return nil, err
	}
	return &struct{ Body *CreatedToken }{t}, nil
}

func (s *Service) list(ctx context.Context, _ *struct{}) (*struct{ Body []Token }, error) {
	ts, err := s.List(ctx, caller(ctx))
	if err != nil {
		return nil, err
	}
	return &struct{ Body []Token }{ts}, nil
}

func (s *Service) delete(ctx context.Context, in *struct {
	ID string `path:"id" maxLength:"36" doc:"Token id"`
}) (*struct{}, error) {
	return nil, s.Delete(ctx, caller(ctx), in.ID)
}
