package projects

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/danielgtaylor/huma/v2"
	"github.com/keelson-dev/keelson/platform"
)

type projectOutput struct {
	Body *Project
}

// listOutput's Body writes an encoded []*Project (listcache.go); the
// operation's response schema says so (platform.EncodedResponses).
type listOutput struct {
	NextCursor string `header:"X-Next-Cursor" doc:"Cursor of the next page; empty when this is the last"`
	Body       func(huma.Context)
}

type idInput struct {
	ID string `path:"id" maxLength:"36" doc:"Project id (UUID)"`
}

type listInput struct {
	platform.PageParams
	Status string `query:"status" enum:"ACTIVE,DELETING,FAILED" doc:"Only projects in this state"`
}

type createInput struct {
	Body CreateInput
}

type settingsInput struct {
	ID   string `path:"id" maxLength:"36" doc:"Project id (UUID)"`
	Body SettingsInput
}

type deleteStatusOutput struct {
	Body *DeleteStatus
}

type usageOutput struct {
	Body *Usage
}

// Register adds the project routes and GET /usage to api; all need a bearer token.
func (s *Service) Register(api huma.API) error {
	if s.d.Auth == nil {
		return errors.New("projects: Deps.Auth is required to register routes")
	}
	mw := huma.Middlewares{platform.RequireAuth(api, s.d.Auth)}
	op := func(id, method, path, summary, desc string) huma.Operation {
		return huma.Operation{OperationID: id, Method: method, Path: path, Summary: summary, Description: desc,
			Tags: []string{"Projects"}, Security: platform.Bearer(), Middlewares: mw}
	}
	s.registerProjects(api, op)
	s.registerLifecycle(api, op)
	return nil
}

// caller is the signed-in user's id (the routes' middleware requires one).
func caller(ctx context.Context) string {
	p, _ := platform.PrincipalFrom(ctx)
	return p.UserID
}

// registerProjects adds create, list, get and the settings update.
func (s *Service) registerProjects(api huma.API, op func(id, method, path, summary, desc string) huma.Operation) {
	create := op("create-project", http.MethodPost, "/projects", "Create a project",
		"Creates a project of the caller, subject to the maxProjects quota of their account plan (403 when reached).")
	create.DefaultStatus = http.StatusCreated
	create.MaxBodyBytes = 64 << 10
	huma.Register(api, create, func(ctx context.Context, in *createInput) (*projectOutput, error) {
		return platform.Reply[projectOutput](s.Create(ctx, caller(ctx), in.Body))
	})

	list := op("list-projects", http.MethodGet, "/projects", "List the caller's projects",
		"Newest first; deleted projects are not listed. The next page's cursor is in X-Next-Cursor.")
	list.Responses = platform.EncodedResponses[[]*Project](api, "ListProjectsResponse")
	huma.Register(api, list, func(ctx context.Context, in *listInput) (*listOutput, error) {
		p, err := s.cachedList(ctx, caller(ctx), in)
		if err != nil {
			return nil, err
		}
		return &listOutput{NextCursor: p.next, Body: platform.WriteEncoded[[]*Project](api, p.body)}, nil
	})

	huma.Register(api, op("get-project", http.MethodGet, "/projects/{id}", "Get a project",
		"Another user's or a deleted project is 404."),
		func(ctx context.Context, in *idInput) (*projectOutput, error) {
			return platform.Reply[projectOutput](s.Get(ctx, caller(ctx), in.ID))
		})

	settings := op("update-project-settings", http.MethodPatch, "/projects/{id}/settings", "Update a project's settings",
		"region must be one of: "+strings.Join(s.d.Regions, ", ")+". planName must name an existing plan "+
			"whose tier is not above the caller's account plan (403 otherwise). envVars replaces the stored set; "+
			"a secret sent back as \"********\" keeps its stored value. Optional fields left out keep their value.")
	settings.MaxBodyBytes = 2 << 20
	huma.Register(api, settings, func(ctx context.Context, in *settingsInput) (*projectOutput, error) {
		return platform.Reply[projectOutput](s.UpdateSettings(ctx, caller(ctx), in.ID, in.Body))
	})

}

// registerLifecycle adds deletion, its status, and the account's usage.
func (s *Service) registerLifecycle(api huma.API, op func(id, method, path, summary, desc string) huma.Operation) {
	transfer := op("transfer-project", http.MethodPost, "/projects/{id}/transfer", "Move a project to a team or to your own account",
		"The caller must be admin or owner of the project and of the team it moves to; the new owner's maxProjects quota applies (403). "+
			"Deployments, domains and hooks move with it.")
	huma.Register(api, transfer, func(ctx context.Context, in *struct {
		ID   string `path:"id" maxLength:"36" doc:"Project id (UUID)"`
		Body TransferInput
	}) (*projectOutput, error) {
		return platform.Reply[projectOutput](s.Transfer(ctx, caller(ctx), in.ID, in.Body.TeamID))
	})

	huma.Register(api, op("get-project-delete-status", http.MethodGet, "/projects/{id}/delete-status",
		"Deletion state of a project",
		"ACTIVE, DELETING, DELETED or FAILED (with errorMessage). Resumes a teardown whose runner vanished before answering. "+
			"A deleted project's owner can still read DELETED here."),
		func(ctx context.Context, in *idInput) (*deleteStatusOutput, error) {
			return platform.Reply[deleteStatusOutput](s.GetDeleteStatus(ctx, caller(ctx), in.ID))
		})

	del := op("delete-project", http.MethodDelete, "/projects/{id}", "Delete a project",
		"Answers 202 {id, status: DELETING} and tears the project down in the background (apps, routes, "+
			"workspaces, logs); poll delete-status. After FAILED, DELETE again retries.")
	del.DefaultStatus = http.StatusAccepted
	huma.Register(api, del, func(ctx context.Context, in *idInput) (*deleteStatusOutput, error) {
		return platform.Reply[deleteStatusOutput](s.Delete(ctx, caller(ctx), in.ID))
	})

	usage := op("get-usage", http.MethodGet, "/usage", "The caller's use of their plan's quotas",
		"Account plan, projects used against maxProjects, deployments started this calendar month (UTC) per project against its plan's maxDeployments, "+
			"the account's stored deployment logs against its log budget, "+
			"and the bytes each project's hosts carried this month through the ingress against its plan's maxBandwidthGb.")
	usage.Tags = []string{"Plans"}
	huma.Register(api, usage, func(ctx context.Context, _ *struct{}) (*usageOutput, error) {
		return platform.Reply[usageOutput](s.Usage(ctx, caller(ctx)))
	})
}
