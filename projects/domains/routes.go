package domains

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"
	"github.com/keelson-dev/keelson/platform"
)

// Register adds the custom-domain routes to api; all need a bearer token and
// answer the project's owner only (404 for anyone else).
func (s *Service) Register(api huma.API) error {
	ops, err := platform.NewBearerOps("domains", api, s.d.Auth, "Domains")
	if err != nil {
		return err
	}
	op := func(id, method, path, summary, desc string) huma.Operation {
		return ops.Op(id, method, path, summary, desc, 0)
	}
	create := op("create-domain", http.MethodPost, "/projects/{id}/domains", "Add a custom domain to the project",
		"Answers 201 with the domain (pending) and the DNS records to create: a TXT record at _keelson-challenge.<hostname> proving ownership, "+
			"and a CNAME to <slug>.<apps-domain> (or, for an apex domain, A/AAAA records to the ingress addresses) routing its traffic. "+
			"400 names the rule a hostname breaks (the apps domain, Keelson's own hosts, IP addresses, single-label or invalid names); "+
			"403 when the project's plan has no customDomains, or the project has its maximum of domains; "+
			"409 when another account holds the hostname: the message gives a TXT token of your own, and adding the domain again once that record exists moves the hostname here (its old owner is told).")
	create.DefaultStatus = http.StatusCreated
	huma.Register(api, create, s.create)
	huma.Register(api, op("list-domains", http.MethodGet, "/projects/{id}/domains", "List the project's custom domains",
		"Newest first. The next page's cursor is in X-Next-Cursor."), s.list)
	huma.Register(api, op("get-domain", http.MethodGet, "/projects/{id}/domains/{domainId}", "Get a custom domain", ""), s.get)
	huma.Register(api, op("verify-domain", http.MethodPost, "/projects/{id}/domains/{domainId}/verify", "Check the domain's DNS records now",
		"Answers the domain with what was found: pending until the TXT record holds its token (lastError says what is missing), "+
			"verified once it does, active once its routing records point at Keelson. Keelson also checks every domain periodically."), s.verify)
	huma.Register(api, op("update-domain", http.MethodPatch, "/projects/{id}/domains/{domainId}", "Change a custom domain's settings",
		"hsts: HTTPS answers for the hostname carry Strict-Transport-Security: max-age=31536000 (never plain HTTP answers). "+
			"A field left out keeps its value. Needs admin."), s.update)
	del := op("delete-domain", http.MethodDelete, "/projects/{id}/domains/{domainId}", "Remove a custom domain", "")
	del.DefaultStatus = http.StatusNoContent
	huma.Register(api, del, s.delete)
	return nil
}

type createIn struct {
	ID   string `path:"id" maxLength:"36" doc:"Project id"`
	Body CreateDomainRequest
}

// CreateDomainRequest is the body of POST /projects/{id}/domains.
type CreateDomainRequest struct {
	Hostname string `json:"hostname" minLength:"1" maxLength:"1024" doc:"The host name, e.g. www.example.com (international names are accepted and stored in their ASCII form; a trailing dot or a port is dropped)"`
}

func (CreateDomainRequest) SchemaName() string { return "CreateDomainRequest" }

type updateIn struct {
	ID       string `path:"id" maxLength:"36" doc:"Project id"`
	DomainID string `path:"domainId" maxLength:"36" doc:"Domain id"`
	Body     UpdateDomainRequest
}

// UpdateDomainRequest is the body of PATCH /projects/{id}/domains/{domainId}.
type UpdateDomainRequest struct {
	HSTS *bool `json:"hsts,omitempty" doc:"Send Strict-Transport-Security (max-age one year) on the hostname's HTTPS answers. Browsers that saw it refuse plain HTTP to the hostname for that long: turn it on once HTTPS works"`
}

func (UpdateDomainRequest) SchemaName() string { return "UpdateDomainRequest" }

type domainOut struct {
	Body *Domain
}

type listIn struct {
	ID string `path:"id" maxLength:"36" doc:"Project id"`
	platform.PageParams
}

type listOut struct {
	NextCursor string `header:"X-Next-Cursor" doc:"Cursor of the next page; empty when this is the last"`
	Body       []*Domain
}

type domainIn struct {
	ID       string `path:"id" maxLength:"36" doc:"Project id"`
	DomainID string `path:"domainId" maxLength:"36" doc:"Domain id"`
}

func caller(ctx context.Context) string {
	p, _ := platform.PrincipalFrom(ctx)
	return p.UserID
}

func (s *Service) create(ctx context.Context, in *createIn) (*domainOut, error) {
	return platform.Reply[domainOut](s.Create(ctx, caller(ctx), in.ID, in.Body.Hostname))
}

func (s *Service) list(ctx context.Context, in *listIn) (*listOut, error) {
	after, err := platform.DecodeCursor(in.Cursor)
	if err != nil {
		return nil, err
	}
	ds, next, err := s.List(ctx, caller(ctx), in.ID, ListParams{Limit: in.Size(), After: after})
	if err != nil {
		return nil, err
	}
	return &listOut{NextCursor: next, Body: ds}, nil
}

func (s *Service) get(ctx context.Context, in *domainIn) (*domainOut, error) {
	return platform.Reply[domainOut](s.Get(ctx, caller(ctx), in.ID, in.DomainID))
}

func (s *Service) verify(ctx context.Context, in *domainIn) (*domainOut, error) {
	return platform.Reply[domainOut](s.Verify(ctx, caller(ctx), in.ID, in.DomainID))
}

func (s *Service) update(ctx context.Context, in *updateIn) (*domainOut, error) {
	return platform.Reply[domainOut](s.Update(ctx, caller(ctx), in.ID, in.DomainID, in.Body))
}

func (s *Service) delete(ctx context.Context, in *domainIn) (*struct{}, error) {
	return nil, s.Delete(ctx, caller(ctx), in.ID, in.DomainID)
}
