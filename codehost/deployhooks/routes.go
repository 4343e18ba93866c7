package deployhooks

import (
	"context"
	"net/http"
	"strings"

	"github.com/danielgtaylor/huma/v2"
	"github.com/keelson-dev/keelson/platform"
)

// Register adds the deploy-hook routes to api.
func (s *Service) Register(api huma.API) error {
	ops, err := platform.NewBearerOps("deployhooks", api, s.d.Auth, "Deploy hooks")
	if err != nil {
		return err
	}
	huma.Register(api, ops.Op("create-deploy-hook", http.MethodPost, "/projects/{id}/deploy-hooks",
		"Create a deploy hook: a secret URL that deploys the project's branch head when POSTed to",
		"The URL is in this answer only; it is stored hashed. Anyone holding it can deploy the project (within its plan's quotas): keep it secret, delete the hook to revoke it.", http.StatusCreated), s.create)
	huma.Register(api, ops.Op("list-deploy-hooks", http.MethodGet, "/projects/{id}/deploy-hooks",
		"List the project's deploy hooks (a prefix of each URL token, never the URL)",
		"", 0), s.list)
	huma.Register(api, ops.Op("delete-deploy-hook", http.MethodDelete, "/projects/{id}/deploy-hooks/{hookId}",
		"Revoke a deploy hook", "", http.StatusNoContent), s.delete)
	huma.Register(api, huma.Operation{
		OperationID: "fire-deploy-hook", Method: http.MethodPost, Path: "/deploy-hooks/{token}",
		Summary:     "Deploy the hook's project at its branch head",
		Description: "No other authentication: the token in the URL is the credential. 404 for a revoked or unknown hook; 403 naming the quota when the plan allows no further deployment. A request body is ignored.",
		Tags:        ops.Tags, DefaultStatus: http.StatusCreated,
	}, s.fire)
	return nil
}

type projectIn struct {
	ID string `path:"id" maxLength:"36" doc:"Project id"`
}

type createIn struct {
	ID   string      `path:"id" maxLength:"36" doc:"Project id"`
	Body *createBody `required:"false"`
}

// createBody is the (optional) body of POST /projects/{id}/deploy-hooks.
type createBody struct {
	Name string `json:"name,omitempty" maxLength:"64" doc:"What the hook is for, e.g. nightly-rebuild"`
}

type createOut struct {
	CacheControl string `header:"Cache-Control"`
	Body         CreatedHook
}

// CreatedHook is a new hook with its URL, which is shown only once.
type CreatedHook struct {
	Hook
	URL string `json:"url" doc:"POST here to deploy; shown only now"`
}

func (s *Service) create(ctx context.Context, in *createIn) (*createOut, error) {
	p, _ := platform.PrincipalFrom(ctx)
	name := ""
	if in.Body != nil {
		name = strings.TrimSpace(in.Body.Name)
		if strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return nil, platform.Invalid("name: must not contain control characters")
		}
	}
	h, u, err := s.Create(ctx, p.UserID, in.ID, name)
	if err != nil {
		return nil, err
	}
	out := &createOut{CacheControl: "no-store"}
	out.Body.Hook, out.Body.URL = *h, u
	return out, nil
}

type listOut struct {
	Body []Hook
}

func (s *Service) list(ctx context.Context, in *projectIn) (*listOut, error) {
	p, _ := platform.PrincipalFrom(ctx)
	return platform.Reply[listOut](s.List(ctx, p.UserID, in.ID))
}

type deleteIn struct {
	ID     string `path:"id" maxLength:"36" doc:"Project id"`
	HookID string `path:"hookId" maxLength:"36" doc:"Deploy hook id"`
}

func (s *Service) delete(ctx context.Context, in *deleteIn) (*struct{}, error) {
	p, _ := platform.PrincipalFrom(ctx)
	if err := s.Delete(ctx, p.UserID, in.ID, in.HookID); err != nil {
		return nil, err
	}
	return nil, nil
}

type fireIn struct {
	Token string `path:"token" maxLength:"100" doc:"The hook's token (the last segment of its URL)"`
}

type fireOut struct {
	Body FireResponse
}

// FireResponse is the answer of POST /deploy-hooks/{token}: the queued deployment.
type FireResponse struct {
	DeploymentID string `json:"deploymentId"`
	Status       string `json:"status" doc:"QUEUED"`
}

// SchemaName methods name these types in the OpenAPI document (platform.SchemaNamer).
func (createBody) SchemaName() string   { return "CreateDeployHookRequest" }
func (CreatedHook) SchemaName() string  { return "CreatedDeployHook" }
func (FireResponse) SchemaName() string { return "DeployHookTrigger" }
func (Hook) SchemaName() string         { return "DeployHook" }

func (s *Service) fire(ctx context.Context, in *fireIn) (*fireOut, error) {
	id, err := s.Fire(ctx, in.Token)
	if err != nil {
		return nil, err
	}
	out := &fireOut{}
	out.Body.DeploymentID, out.Body.Status = id, "QUEUED"
	return out, nil
}
