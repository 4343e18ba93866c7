package hosts

import (
	"context"
	"errors"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/keelson-dev/keelson/platform"
)

type hostOutput struct{ Body *Host }

type listOutput struct {
	Body []*Host
}

type idInput struct {
	ID string `path:"id" maxLength:"64" doc:"Host id"`
}

// CordonInput is why a host is cordoned.
type CordonInput struct {
	Reason string `json:"reason,omitempty" maxLength:"200" doc:"Why, for the other admins (shown on the host)"`
}

// SchemaName names CordonInput in the OpenAPI document.
func (CordonInput) SchemaName() string { return "CordonRequest" }

type cordonInput struct {
	ID   string `path:"id" maxLength:"64" doc:"Host id"`
	Body *CordonInput
}

// Register adds the admin routes: list, get, cordon, uncordon and remove hosts.
func (s *Service) Register(api huma.API) error {
	if s.d.Auth == nil {
		return errors.New("hosts: Deps.Auth is required to register routes")
	}
	tags := []string{"Hosts"}
	admin := huma.Middlewares{platform.RequireRole(api, s.d.Auth, platform.RoleAdmin)}
	op := func(id, method, path, summary, desc string) huma.Operation {
		return huma.Operation{OperationID: id, Method: method, Path: path, Tags: tags, Summary: summary,
			Description: "ADMIN only. " + desc, Security: platform.Bearer(), Middlewares: admin}
	}
	huma.Register(api, op("list-hosts", http.MethodGet, "/hosts", "List the hosts that run apps",
		"Every host a worker registered, by id, with its state, capacity, app count and last heartbeat."),
		func(ctx context.Context, _ *struct{}) (*listOutput, error) {
			return platform.Reply[listOutput](s.List(ctx))
		})
	huma.Register(api, op("get-host", http.MethodGet, "/hosts/{id}", "Get a host", "An unknown id is 404."),
		func(ctx context.Context, in *idInput) (*hostOutput, error) {
			h, err := s.Get(ctx, in.ID)
			return &hostOutput{Body: h}, err
		})
	huma.Register(api, op("cordon-host", http.MethodPost, "/hosts/{id}/cordon", "Cordon a host",
		"The host takes no new deployment (its worker stops taking builds within a heartbeat); the apps it runs keep running. Idempotent."),
		func(ctx context.Context, in *cordonInput) (*hostOutput, error) {
			reason := ""
			if in.Body != nil {
				reason = in.Body.Reason
			}
			h, err := s.SetCordoned(ctx, in.ID, true, reason)
			return &hostOutput{Body: h}, err
		})
	huma.Register(api, op("uncordon-host", http.MethodPost, "/hosts/{id}/uncordon", "Uncordon a host",
		"The host takes new deployments again. Idempotent."),
		func(ctx context.Context, in *idInput) (*hostOutput, error) {
			h, err := s.SetCordoned(ctx, in.ID, false, "")
			return &hostOutput{Body: h}, err
		})
	huma.Register(api, op("drain-host", http.MethodPost, "/hosts/{id}/drain", "Drain a host",
		"Cordons the host and deploys each of its LIVE apps again on other hosts (the same commit); each replaces its old deployment with the usual swap, the old app serving until the new one is LIVE. Answers once the new deployments are queued. A host that is down is drained by the register already."),
		func(ctx context.Context, in *idInput) (*hostOutput, error) {
			h, err := s.Drain(ctx, in.ID)
			return &hostOutput{Body: h}, err
		})
	del := op("delete-host", http.MethodDelete, "/hosts/{id}", "Remove a down host",
		"Forgets a host taken away for good. Only a down host (no heartbeat within the down-after setting) can be removed: 409 otherwise, as its worker would register it again.")
	del.DefaultStatus = http.StatusNoContent
	huma.Register(api, del, func(ctx context.Context, in *idInput) (*struct{}, error) {
		return nil, s.Remove(ctx, in.ID)
	})
	return nil
}
