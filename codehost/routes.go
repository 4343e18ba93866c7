package codehost

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/keelson-dev/keelson/codehost/internal/store"
	"github.com/keelson-dev/keelson/platform"
	"github.com/uptrace/bun"
)

// MaxWebhookBytes is the body limit of the webhook route alone: the provider
// sends up to 25 MB.
const MaxWebhookBytes = 25 << 20

// Register adds the /codehost routes to api.
func (s *Service) Register(api huma.API) error {
	ops, err := platform.NewBearerOps("codehost", api, s.d.Auth, "Code host")
	if err != nil {
		return err
	}
	huma.Register(api, ops.Op("codehost-connect", http.MethodGet, "/codehost/connect",
		"Get the URL that installs the code-host app",
		"The URL carries a signed state bound to the caller, valid for 10 minutes and usable once. A caller without a usable code-host identity (none linked, or its token is no longer accepted) gets linkFirst=true and an installUrl that first links their code-host account through OAuth (bound to this browser by the cookie set here) and then continues to the install page; without the OAuth login configured that is a 409.", 0), s.connect)
	huma.Register(api, huma.Operation{
		OperationID: "codehost-app-callback", Method: http.MethodGet, Path: "/codehost/app/callback",
		Summary:     "Install callback of the code-host app",
		Description: "Validates the state, confirms the installation with the provider, checks with the provider, using the code-host token of the user who asked for the install URL, that this user may access the installation, links it, and redirects to the frontend's connected-accounts page with codehost=connected or codehost=error&reason=... (invalid_state, expired_state, state_already_used, installation_not_found, installation_suspended, installation_not_yours, installation_linked_to_another_user, codehost_account_not_linked, codehost_authorization_expired, codehost_unavailable). Nothing is linked on an error.",
		Tags:        ops.Tags, DefaultStatus: http.StatusFound,
	}, s.callback)
	huma.Register(api, ops.Op("codehost-repositories", http.MethodGet, "/codehost/repositories",
		"List the repositories of the caller's installations",
		"The repositories of the installations the caller linked that the code host, asked with the caller's own code-host token, lets the caller access (an organisation's outside collaborator sees the repositories they were added to, not the whole installation's). A linked installation the code host no longer lets the caller access is unlinked. 409 (code "+CodeRelink+"): the caller's code-host authorization is missing, expired or revoked; link it again through GET /codehost/connect. 404: no installation linked.", 0), s.repositories)
	huma.Register(api, huma.Operation{
		OperationID: "codehost-webhook", Method: http.MethodPost, Path: "/codehost/webhook",
		Summary:     "Receive a code-host webhook delivery",
		Description: "Authenticated by x-hub-signature-256 (sha256=HMAC of the raw body with the app's webhook secret) or, for a repository webhook of GitHub, Gitea/Forgejo or GitLab, by the webhookSecret of a project using the payload's repository (X-Hub-Signature-256, X-Gitea-Signature, X-Gitlab-Token); such a delivery acts on the projects whose secret signed it only. A repeated delivery id is acknowledged and not processed again.",
		Tags:        ops.Tags, MaxBodyBytes: MaxWebhookBytes,
	}, s.webhook)
	// Huma marks a raw body required and would answer an empty one 400 before
	// the handler runs; the signature check must judge every request first
	// (an unsigned empty body is a 401 like any other unsigned one). The
	// registered operation shares this RequestBody.
	// The body is read raw, but it is the provider's JSON as GitHub sends it
	// (application/json), or its form-encoded payload=; declare those, so
	// request validators accept real deliveries.
	if pi := api.OpenAPI().Paths["/codehost/webhook"]; pi != nil && pi.Post != nil && pi.Post.RequestBody != nil {
		pi.Post.RequestBody.Required = false
		pi.Post.RequestBody.Description = "The provider's event payload, verified by the signature over the raw bytes before it is parsed."
		pi.Post.RequestBody.Content = map[string]*huma.MediaType{
			"application/json": {Schema: &huma.Schema{Type: huma.TypeObject, AdditionalProperties: true,
				Description: "The event's JSON as the code host sends it (e.g. a GitHub push event)"}},
			"application/x-www-form-urlencoded": {Schema: &huma.Schema{Type: huma.TypeObject,
				Properties: map[string]*huma.Schema{"payload": {Type: huma.TypeString, Description: "The event's JSON"}},
				Required:   []string{"payload"}}},
		}
	}
	huma.Register(api, ops.Op("codehost-deliveries", http.MethodGet, "/codehost/deliveries",
		"List webhook deliveries and the decision taken for each matched project",
		"Newest first. A user sees the deliveries that came from a personal installation they linked (the provider confirmed it is their own account's) and, of an organisation's installation they linked, the pushes to the repositories the provider let them access at the link's last check, with the decisions about their own projects only; projectId narrows to one of their projects (another user's project is a 404). A repository URL typed into a project never makes its deliveries visible. The next page's cursor is in X-Next-Cursor.", 0), s.deliveries)
	return nil
}

type connectOutput struct {
	CacheControl string `header:"Cache-Control"`
	SetCookie    string `header:"Set-Cookie" doc:"With linkFirst: the HttpOnly cookie that binds the OAuth connect ticket in installUrl to this browser"`
	Body         connectBody
}

// connectBody is the answer of GET /codehost/connect.
type connectBody struct {
	InstallURL string    `json:"installUrl" doc:"Send the user's browser here to install the app"`
	ExpiresAt  time.Time `json:"expiresAt" doc:"When the state in installUrl stops being accepted"`
	LinkFirst  bool      `json:"linkFirst" doc:"true: the caller has no usable code-host identity, so installUrl first links it through the code host's OAuth (open it in this same browser: a cookie binds it), then continues to the install page"`
}

func (connectBody) SchemaName() string { return "CodeHostInstallLink" }

func (s *Service) connect(ctx context.Context, _ *struct{}) (*connectOutput, error) {
	if err := s.configured(); err != nil {
		return nil, err
	}
	p, _ := platform.PrincipalFrom(ctx)
	linked, err := s.identityUsable(ctx, p.UserID)
	if err != nil {
		return nil, err
	}
	now := s.now()
	state, err := newState(s.d.StateKey, p.UserID, now, s.d.StateTTL)
	if err != nil {
		return nil, err
	}
	out := &connectOutput{CacheControl: "no-store"}
	out.Body.InstallURL = s.d.Provider.InstallURL(state)
	out.Body.ExpiresAt = now.Add(s.d.StateTTL).Truncate(time.Second)
	if !linked {
		// Only the user's own code-host token can tell which installations
		// they may link: get one first, then go on to the install page.
		if s.d.Connector == nil {
			return nil, platform.Conflict(
				"link your code-host account first (POST /auth/codehost/connect, then open its connectUrl), then call GET /codehost/connect again")
		}
		u, cookie, err := s.d.Connector.ConnectFirst(ctx, p.UserID, out.Body.InstallURL)
		if err != nil {
			return nil, err
		}
		out.Body.InstallURL, out.Body.LinkFirst = u, true
		if cookie != nil {
			out.SetCookie = cookie.String()
		}
	}
	return out, nil
}

// identityUsable reports whether userID linked a code-host identity whose
// token the provider still accepts.
func (s *Service) identityUsable(ctx context.Context, userID string) (bool, error) {
	if s.d.Accounts == nil {
		return false, nil
	}
	tok, err := s.d.Accounts.CodehostAccessToken(ctx, userID)
	if err != nil || tok == "" {
		return false, wrap("linked account", err)
	}
	_, err = s.d.Provider.UserInstallations(ctx, tok)
	switch {
	case errors.Is(err, platform.ErrUnauthorized):
		return false, nil // expired or revoked: link again
	case err != nil:
		platform.Logger(ctx).ErrorContext(ctx, "codehost: list the user's installations", "err", err)
		return false, &platform.Error{Status: http.StatusBadGateway,
			Message: "the code host did not answer; try again later", Err: err}
	}
	return true, nil
}

type callbackInput struct {
	InstallationID int64  `query:"installation_id" required:"true" minimum:"1" doc:"The provider's installation id"`
	State          string `query:"state" required:"true" maxLength:"4096" doc:"The state from GET /codehost/connect"`
	SetupAction    string `query:"setup_action" maxLength:"32" doc:"install or update (sent by the provider)"`
}

type redirectOutput struct {
	Status       int
	Location     string `header:"Location"`
	CacheControl string `header:"Cache-Control"`
}

// Reasons the callback redirect names in ?reason=.
const (
	ReasonInvalidState        = "invalid_state"
	ReasonExpiredState        = "expired_state"
	ReasonStateUsed           = "state_already_used"
	ReasonNotFound            = "installation_not_found"
	ReasonSuspended           = "installation_suspended"
	ReasonNotYours            = "installation_not_yours"
	ReasonLinkedElsewhere     = "installation_linked_to_another_user"
	ReasonProviderUnavailable = "codehost_unavailable"
	// ReasonAccountNotLinked: the user has no code-host identity to ask the
	// provider with; GET /codehost/connect sends them through OAuth first.
	ReasonAccountNotLinked = "codehost_account_not_linked"
	// ReasonAuthorizationExpired: the provider no longer accepts the user's
	// code-host token; GET /codehost/connect links it again first.
	ReasonAuthorizationExpired = "codehost_authorization_expired"
)

func (s *Service) callback(ctx context.Context, in *callbackInput) (*redirectOutput, error) {
	if err := s.configured(); err != nil {
		return nil, err
	}
	reason := s.link(ctx, in.InstallationID, in.State)
	target := s.d.FrontendURL + "/settings/connected-accounts?codehost=connected"
	if reason != "" {
		target = s.d.FrontendURL + "/settings/connected-accounts?codehost=error&reason=" + url.QueryEscape(reason)
	}
	return &redirectOutput{Status: http.StatusFound, Location: target, CacheControl: "no-store"}, nil
}

// link validates a callback and links the installation. It returns "" on
// success or the reason it linked nothing.
func (s *Service) link(ctx context.Context, installationID int64, state string) string {
	log := platform.Logger(ctx)
	now := s.now()
	stateID, userID, exp, err := parseState(s.d.StateKey, state, now)
	switch {
	case errors.Is(err, errStateExpired):
		return ReasonExpiredState
	case err != nil:
		return ReasonInvalidState
	}
	if err := s.store.UseState(ctx, stateID, exp, now); err != nil {
		if store.IsConflict(err) {
			return ReasonStateUsed
		}
		log.ErrorContext(ctx, "codehost: record used state", "err", err)
		return ReasonProviderUnavailable
	}
	inst, err := s.d.Provider.Installation(ctx, installationID)
	switch {
	case errors.Is(err, platform.ErrNotFound):
		return ReasonNotFound
	case err != nil:
		log.ErrorContext(ctx, "codehost: confirm installation", "installation_id", installationID, "err", err)
		return ReasonProviderUnavailable
	case inst.Suspended:
		return ReasonSuspended
	}
	if reason := s.mayAccess(ctx, userID, inst); reason != "" {
		return reason
	}
	if inst.AccountType != "Organization" {
		others, err := s.store.OtherLinkedUsers(ctx, installationID, userID)
		if err != nil {
			log.ErrorContext(ctx, "codehost: installation links", "err", err)
			return ReasonProviderUnavailable
		}
		if len(others) > 0 {
			return ReasonLinkedElsewhere
		}
	}
	err = s.d.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		st := store.Store{DB: tx}
		if err := st.UpsertInstallation(ctx, inst, InstallationActive, now); err != nil {
			return err
		}
		return st.Link(ctx, userID, installationID, now)
	})
	if err != nil {
		log.ErrorContext(ctx, "codehost: link installation", "err", err)
		return ReasonProviderUnavailable
	}
	// Record what the user may reach through it (their delivery log shows
	// that much); every use checks again.
	if tok, err := s.userToken(ctx, userID); err == nil {
		_, err := s.checkLink(ctx, userID, tok, installationID)
		if errors.Is(err, errAccessLost) {
			return ReasonNotYours // unlinked again: listed, but none of it reachable
		}
		if err != nil {
			log.WarnContext(ctx, "codehost: first check of a new link", "installation_id", installationID, "err", err)
		}
	}
	return ""
}

// mayAccess asks the provider, with the user's own code-host token, whether
// the user may access inst: it must be among the installations the token
// lists (organisations and personal accounts alike), and an installation on a
// personal account must be the user's own account. It returns "" when so, or
// the reason to refuse. A state proves only who asked for the install URL,
// not what they may install: an installation id in a callback is the
// caller's word.
func (s *Service) mayAccess(ctx context.Context, userID string, inst *Installation) string {
	log := platform.Logger(ctx)
	if s.d.Accounts == nil {
		return ReasonAccountNotLinked
	}
	login, err := s.d.Accounts.CodehostLogin(ctx, userID)
	if err != nil {
		log.ErrorContext(ctx, "codehost: linked account", "err", err)
		return ReasonProviderUnavailable
	}
	tok, err := s.d.Accounts.CodehostAccessToken(ctx, userID)
	if err != nil {
		log.ErrorContext(ctx, "codehost: linked account token", "err", err)
		return ReasonProviderUnavailable
	}
	if login == "" || tok == "" {
		return ReasonAccountNotLinked
	}
	insts, err := s.d.Provider.UserInstallations(ctx, tok)
	switch {
	case errors.Is(err, platform.ErrUnauthorized):
		return ReasonAuthorizationExpired
	case err != nil:
		// A 403 here means the OAuth client is not the app's own (only a
		// GitHub App's user token may list installations).
		log.ErrorContext(ctx, "codehost: list the user's installations", "err", err)
		return ReasonProviderUnavailable
	}
	found := false
	for _, in := range insts {
		found = found || in.ID == inst.ID
	}
	if !found {
		log.WarnContext(ctx, "codehost: install callback for an installation the user cannot access",
			"installation_id", inst.ID, "user_id", userID)
		return ReasonNotYours
	}
	if inst.AccountType != "Organization" && !strings.EqualFold(login, inst.AccountLogin) {
		// A collaborator sees the owner's personal installation too, but its
		// token reaches every repository of that account.
		return ReasonNotYours
	}
	return ""
}

// RepositoryOut is one repository of GET /codehost/repositories.
type RepositoryOut struct {
	ID             int64  `json:"id" doc:"The provider's repository id (use its decimal string as a project's codehostRepositoryId)"`
	Name           string `json:"name"`
	FullName       string `json:"fullName" doc:"owner/name"`
	Owner          string `json:"owner"`
	Private        bool   `json:"private"`
	HTMLURL        string `json:"htmlUrl"`
	CloneURL       string `json:"cloneUrl" doc:"Use as a project's repoUrl"`
	DefaultBranch  string `json:"defaultBranch"`
	InstallationID int64  `json:"installationId"`
}

type repositoriesOutput struct {
	Body []RepositoryOut
}

// errNoInstallation is the message of the 404 of GET /codehost/repositories
// for a caller without an active installation.
const errNoInstallation = "no code-host installation linked; connect one with GET /codehost/connect"

func (s *Service) repositories(ctx context.Context, _ *struct{}) (*repositoriesOutput, error) {
	if err := s.configured(); err != nil {
		return nil, err
	}
	p, _ := platform.PrincipalFrom(ctx)
	insts, err := s.store.UserInstallations(ctx, p.UserID, InstallationActive)
	if err != nil {
		return nil, err
	}
	if len(insts) == 0 {
		return nil, platform.NotFound(errNoInstallation)
	}
	tok, err := s.userToken(ctx, p.UserID)
	if err != nil {
		return nil, err
	}
	out := &repositoriesOutput{Body: []RepositoryOut{}}
	usable := 0
	for _, in := range insts {
		// The caller's own view: an organisation's outside collaborator
		// gets the repositories they were added to, not the installation's.
		repos, err := s.checkLink(ctx, p.UserID, tok, in.InstallationID)
		switch {
		case errors.Is(err, errAccessLost):
			continue
		case errors.Is(err, errRelink):
			return nil, relinkError()
		case err != nil:
			platform.Logger(ctx).ErrorContext(ctx, "codehost: list the user's repositories", "installation_id", in.InstallationID, "err", err)
			return nil, unavailable("the repository listing", err)
		}
		usable++
		for _, r := range repos {
			out.Body = append(out.Body, RepositoryOut{
				ID: r.ID, Name: r.Name, FullName: r.FullName, Owner: r.Owner, Private: r.Private,
				HTMLURL: r.HTMLURL, CloneURL: r.CloneURL, DefaultBranch: r.DefaultBranch, InstallationID: in.InstallationID,
			})
		}
	}
	if usable == 0 {
		return nil, platform.NotFound(errNoInstallation)
	}
	sort.SliceStable(out.Body, func(i, j int) bool {
		if out.Body[i].FullName != out.Body[j].FullName {
			return out.Body[i].FullName < out.Body[j].FullName
		}
		return out.Body[i].InstallationID < out.Body[j].InstallationID
	})
	return out, nil
}

type deliveriesInput struct {
	platform.PageParams
	ProjectID string `query:"projectId" maxLength:"36" doc:"Only deliveries that matched this project"`
}

// DeliveryOut is one webhook delivery of the delivery log.
type DeliveryOut struct {
	ID             string        `json:"id"`
	DeliveryID     string        `json:"deliveryId" doc:"The provider's delivery id (X-GitHub-Delivery, X-Gitea-Delivery, X-Gitlab-Event-UUID; sha256:<hash of the body> when none)"`
	Source         string        `json:"source" enum:"app,github,gitea,gitlab" doc:"app: the code-host app; otherwise the host of a repository webhook authenticated by the project's webhookSecret"`
	Event          string        `json:"event"`
	Action         string        `json:"action,omitempty"`
	Repository     string        `json:"repository,omitempty" doc:"owner/name, for push events"`
	InstallationID int64         `json:"installationId,omitempty"`
	ReceivedAt     time.Time     `json:"receivedAt"`
	SignatureValid bool          `json:"signatureValid"`
	Status         string        `json:"status" enum:"pending,processed,failed"`
	Detail         string        `json:"detail,omitempty" doc:"What processing did, or why it failed"`
	Decisions      []DecisionOut `json:"decisions"`
}

// DecisionOut is what a delivery did for one project.
type DecisionOut struct {
	ProjectID    string `json:"projectId"`
	Decision     string `json:"decision" doc:"deployed, commit already deployed, branch mismatch, auto-deploy off, skipped by commit message, branch deleted, installation not linked, no repository access, quota exceeded, not a push, failed"`
	DeploymentID string `json:"deploymentId,omitempty"`
	Detail       string `json:"detail,omitempty"`
}

type deliveriesOutput struct {
	NextCursor string `header:"X-Next-Cursor"`
	Body       []DeliveryOut
}

func (s *Service) deliveries(ctx context.Context, in *deliveriesInput) (*deliveriesOutput, error) {
	p, _ := platform.PrincipalFrom(ctx)
	if in.ProjectID != "" && !platform.ValidID(in.ProjectID) {
		return nil, platform.Invalid("query.projectId: not a valid id")
	}
	if in.ProjectID != "" && !p.IsAdmin() {
		// Someone else's (or no) project is a 404, like every route naming a
		// project the caller cannot see.
		own, err := s.d.Projects.OwnsProject(ctx, p.UserID, in.ProjectID)
		if err != nil {
			return nil, err
		}
		if !own {
			return nil, platform.NotFound("project not found")
		}
	}
	cur, err := platform.DecodeCursor(in.Cursor)
	if err != nil {
		return nil, err
	}
	f := store.DeliveryFilter{UserID: p.UserID, All: p.IsAdmin(), ProjectID: in.ProjectID, Limit: in.Size() + 1}
	if cur != nil {
		f.AfterID = cur.ID
	}
	rows, err := s.store.ListDeliveries(ctx, f)
	if err != nil {
		return nil, err
	}
	rows, next := platform.TrimPage(rows, in.Size(), func(last store.DeliveryRow) platform.Cursor {
		return platform.Cursor{Time: last.ReceivedAt, ID: last.ID}
	})
	out := &deliveriesOutput{Body: make([]DeliveryOut, 0, len(rows)), NextCursor: next}
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	decs, err := s.store.DecisionsFor(ctx, ids, p.UserID, p.IsAdmin())
	if err != nil {
		return nil, err
	}
	byDelivery := map[string][]DecisionOut{}
	for _, d := range decs {
		byDelivery[d.DeliveryRowID] = append(byDelivery[d.DeliveryRowID], DecisionOut{
			ProjectID: d.ProjectID, Decision: d.Decision, DeploymentID: d.DeploymentID, Detail: d.Detail,
		})
	}
	for _, r := range rows {
		d := DeliveryOut{
			ID: r.ID, DeliveryID: r.DeliveryID, Source: r.Source, Event: r.Event, Action: r.Action, Repository: r.Repository,
			InstallationID: r.InstallationID, ReceivedAt: r.ReceivedAt.UTC(), SignatureValid: r.SignatureValid,
			Status: r.Status, Detail: r.Detail, Decisions: byDelivery[r.ID],
		}
		if d.Decisions == nil {
			d.Decisions = []DecisionOut{}
		}
		out.Body = append(out.Body, d)
	}
	return out, nil
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// SchemaName methods name these types in the OpenAPI document (platform.SchemaNamer).
func (RepositoryOut) SchemaName() string { return "Repository" }
func (DeliveryOut) SchemaName() string   { return "WebhookDelivery" }
func (DecisionOut) SchemaName() string   { return "DeliveryDecision" }
