// Package scaffold serves the eight placeholder modules of SPEC 4.7
// (/env-vars, /logstore, /workflow-engine, /admin, /users, /logs, /cluster,
// /notification). Each has the five CRUD routes of a freshly generated NestJS
// resource and answers its generator's placeholder text; none has behaviour.
// They require a bearer token (DESIGN.md section 4). One generic implementation
// serves all eight.
package scaffold

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/danielgtaylor/huma/v2"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
)

// Resource is one placeholder module: its path prefix and the names its
// generator would print for many and for one.
type Resource struct {
	Prefix   string // e.g. "/env-vars"
	Plural   string // e.g. "envVars"
	Singular string // e.g. "envVar"
	Tag      string // OpenAPI tag, e.g. "Env vars"
}

// Resources are SPEC 4.7's placeholder modules.
func Resources() []Resource {
	return []Resource{
		{"/env-vars", "envVars", "envVar", "Env vars (placeholder)"},
		{"/logstore", "logstore", "logstore", "Logstore (placeholder)"},
		{"/workflow-engine", "workflowEngine", "workflowEngine", "Workflow engine (placeholder)"},
		{"/admin", "admin", "admin", "Admin (placeholder)"},
		{"/users", "users", "user", "Users (placeholder)"},
		{"/logs", "logs", "log", "Logs (placeholder)"},
		{"/cluster", "cluster", "cluster", "Cluster (placeholder)"},
		{"/notification", "notification", "notification", "Notification (placeholder)"},
	}
}

// Deps are what the placeholder modules need.
type Deps struct {
	// Auth authenticates bearer tokens. Required.
	Auth platform.Authenticator
	// Resources to serve; default Resources().
	Resources []Resource
}

// Service is the placeholder modules, ready to register.
type Service struct {
	d Deps
}

// New validates d and applies its defaults. It never panics.
func New(d Deps) (*Service, error) {
	if d.Auth == nil {
		return nil, errors.New("scaffold: Deps.Auth is required")
	}
	if d.Resources == nil {
		d.Resources = Resources()
	}
	for _, r := range d.Resources {
		if !strings.HasPrefix(r.Prefix, "/") || r.Plural == "" || r.Singular == "" {
			return nil, fmt.Errorf("scaffold: bad resource %+v", r)
		}
	}
	return &Service{d: d}, nil
}

// Register adds the placeholder routes to api.
func (s *Service) Register(api huma.API) error {
	for _, r := range s.d.Resources {
		register(api, s.d.Auth, r)
	}
	return nil
}

// Migrations is empty: the placeholders store nothing. It is here so every
// module is wired the same way.
func Migrations() db.MigrationSet { return db.MigrationSet{Module: "scaffold"} }

// EmptyBody is the create and update body of a placeholder: an empty object.
type EmptyBody struct{}

type textOutput struct {
	ContentType string `header:"Content-Type"`
	Body        []byte
}

type idInput struct {
	ID string `path:"id" maxLength:"64" doc:"Resource id"`
}

type createInput struct {
	Body *EmptyBody
}

type updateInput struct {
	ID   string `path:"id" maxLength:"64" doc:"Resource id"`
	Body *EmptyBody
}

func text(s string) *textOutput {
	return &textOutput{ContentType: "text/plain; charset=utf-8", Body: []byte(s)}
}

func register(api huma.API, auth platform.Authenticator, r Resource) {
	slug := strings.Trim(strings.ReplaceAll(r.Prefix, "/", "-"), "-")
	mw := huma.Middlewares{platform.RequireAuth(api, auth)}
	op := func(method, path, id, summary string, status int) huma.Operation {
		return huma.Operation{
			OperationID: id + "-" + slug, Method: method, Path: path, Summary: summary,
			Tags: []string{r.Tag}, Security: platform.Bearer(), Middlewares: mw,
			DefaultStatus: status,
			Responses: map[string]*huma.Response{
				fmt.Sprint(status): {Description: "Placeholder text", Content: map[string]*huma.MediaType{
					"text/plain": {Schema: &huma.Schema{Type: "string"}},
				}},
			},
		}
	}
	one := r.Prefix + "/{id}"
	huma.Register(api, op(http.MethodPost, r.Prefix, "create", "Create (placeholder)", 201),
		func(ctx context.Context, _ *createInput) (*textOutput, error) {
			return text("This action adds a new " + r.Singular), nil
		})
	huma.Register(api, op(http.MethodGet, r.Prefix, "list", "List (placeholder)", 200),
		func(ctx context.Context, _ *struct{}) (*textOutput, error) {
			return text("This action returns all " + r.Plural), nil
		})
	huma.Register(api, op(http.MethodGet, one, "get", "Get one (placeholder)", 200),
		func(ctx context.Context, in *idInput) (*textOutput, error) {
			return text("This action returns a #" + in.ID + " " + r.Singular), nil
		})
	huma.Register(api, op(http.MethodPatch, one, "update", "Update (placeholder)", 200),
		func(ctx context.Context, in *updateInput) (*textOutput, error) {
			return text("This action updates a #" + in.ID + " " + r.Singular), nil
		})
	huma.Register(api, op(http.MethodDelete, one, "delete", "Delete (placeholder)", 200),
		func(ctx context.Context, in *idInput) (*textOutput, error) {
			return text("This action removes a #" + in.ID + " " + r.Singular), nil
		})
}

// SchemaName methods name these types in the OpenAPI document (platform.SchemaNamer).
func (EmptyBody) SchemaName() string { return "PlaceholderBody" }

var _ platform.Module = (*Service)(nil)

// Migrations returns the module's tables (the package's Migrations), for platform.Module.
func (s *Service) Migrations() db.MigrationSet { return Migrations() }

// Start and Close do nothing: the module has no background work.
func (s *Service) Start(context.Context) error { return nil }

func (s *Service) Close(context.Context) error { return nil }
