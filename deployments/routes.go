package deployments

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/keelson-dev/keelson/deployments/internal/opt"
	"github.com/keelson-dev/keelson/deployments/logstream"
	"github.com/keelson-dev/keelson/platform"
)

// StreamGate admits or refuses a log stream (logstream.Gate).
type StreamGate = logstream.Gate

type handlers struct {
	svc *Service
	api huma.API
}

// LogTokenScheme is the OpenAPI security scheme of the ?token= log-stream token.
const LogTokenScheme = logstream.TokenScheme

// Register adds the deployment routes of SPEC 4.5 (plus cancel, redeploy and
// log tokens) to api.
func (s *Service) Register(api huma.API) error {
	d := s.d
	h := &handlers{svc: s, api: api}
	auth := huma.Middlewares{platform.RequireAuth(api, d.Auth)}
	tags := []string{"Deployments"}
	op := func(id, method, path, summary string, status int) huma.Operation {
		return huma.Operation{OperationID: id, Method: method, Path: path, Summary: summary, Tags: tags,
			DefaultStatus: status, Security: platform.Bearer(), Middlewares: auth, MaxBodyBytes: 64 << 10}
	}
	huma.Register(api, op("create-deployment", http.MethodPost, "/deployments", "Trigger a deployment of a project", http.StatusCreated), h.create)
	list := op("list-deployments", http.MethodGet, "/deployments", "List your deployments, newest first", http.StatusOK)
	list.Responses = platform.EncodedResponses[[]View](api, "listOutputBody")
	huma.Register(api, list, h.list)
	huma.Register(api, op("get-deployment", http.MethodGet, "/deployments/{id}", "Get a deployment", http.StatusOK), h.get)
	huma.Register(api, op("get-deployment-status", http.MethodGet, "/deployments/{id}/status", "Sync a deployment's state from the workflow engine and return it", http.StatusOK), h.status)
	huma.Register(api, op("delete-deployment", http.MethodDelete, "/deployments/{id}", "Delete a deployment: stop its app, remove its route, workspace and logs", http.StatusOK), h.delete)
	huma.Register(api, op("cancel-deployment", http.MethodPost, "/deployments/{id}/cancel", "Cancel a queued or running deployment", http.StatusOK), h.cancel)
	huma.Register(api, op("redeploy-deployment", http.MethodPost, "/deployments/{id}/redeploy", "Deploy the same project and commit again", http.StatusCreated), h.redeploy)
	huma.Register(api, op("rollback-deployment", http.MethodPost, "/deployments/{id}/rollback", "Deploy a replaced deployment's kept build again: no clone and no build, then PROVISION and DNS", http.StatusCreated), h.rollback)
	logs := logstream.Route{Auth: d.Auth, Tokens: logstream.Tokens{Key: d.LogTokenKey}, TokenTTL: d.LogTokenTTL,
		Gate: d.Streams, Clock: d.Clock, Metrics: d.Metrics, Streams: s.streams, Operation: op,
		Deployment: func(ctx context.Context, userID, id string) (bool, error) {
			d, err := s.Get(ctx, userID, id)
			return err == nil && d.Status.Terminal(), err
		},
		LastSeq: s.store.LogMaxSeq}
	logs.RegisterToken(api)
	logs.RegisterStream(api)
	return nil
}

type idPath struct {
	ID string `path:"id" doc:"Deployment ID (UUID)"`
}

type createInput struct {
	Body createBody
}

// createBody is the body of POST /deployments.
type createBody struct {
	ProjectID string `json:"projectId" minLength:"1" maxLength:"64" doc:"The project to deploy"`
}

// TriggerResponse is the answer of POST /deployments and /redeploy.
type TriggerResponse struct {
	DeploymentID string `json:"deploymentId"`
	WorkflowName string `json:"workflowName"`
	Status       Status `json:"status" enum:"QUEUED,BUILDING,PROVISIONING,CONFIGURING_DNS,LIVE,FAILED,CANCELLED"`
}

type triggerOutput struct {
	Body TriggerResponse
}

func caller(ctx context.Context) string {
	p, _ := platform.PrincipalFrom(ctx)
	return p.UserID
}

func (h *handlers) create(ctx context.Context, in *createInput) (*triggerOutput, error) {
	if !platform.ValidID(in.Body.ProjectID) {
		return nil, platform.Invalid("body.projectId: must be a project ID (UUID)")
	}
	return triggered(h.svc.Trigger(ctx, TriggerParams{ProjectID: in.Body.ProjectID, OwnerID: caller(ctx), Reason: "manual"}))
}

// triggered answers the deployment a trigger (create, redeploy, rollback)
// started, or err.
func triggered(d *Deployment, err error) (*triggerOutput, error) {
	if err != nil {
		return nil, err
	}
	return &triggerOutput{Body: TriggerResponse{DeploymentID: d.ID, WorkflowName: d.WorkflowName, Status: d.Status}}, nil
}

// View is a deployment as the API answers it.
type View struct {
	ID            string     `json:"id"`
	ProjectID     string     `json:"projectId"`
	Status        Status     `json:"status" enum:"QUEUED,BUILDING,PROVISIONING,CONFIGURING_DNS,LIVE,FAILED,CANCELLED"`
	Steps         []Step     `json:"steps"`
	CommitSHA     *string    `json:"commitSha" doc:"The commit asked for, or once built, the commit built"`
	Reason        string     `json:"reason" doc:"Why the deployment was started"`
	DeployedURL   *string    `json:"deployedUrl"`
	ErrorMessage  *string    `json:"errorMessage"`
	BuildDuration *float64   `json:"buildDuration" doc:"Seconds the BUILD step ran"`
	Region        string     `json:"region"`
	WorkflowName  string     `json:"workflowName"`
	SupersededBy  *string    `json:"supersededBy" doc:"When a newer deployment of the project went LIVE and replaced this one (status CANCELLED): its ID"`
	ReplacedAt    *time.Time `json:"replacedAt"`
	RollbackOf    *string    `json:"rollbackOf" doc:"For a rollback: the deployment whose build it runs again"`
	BuildKept     bool       `json:"buildKept" doc:"A replaced deployment whose build is kept: POST /deployments/{id}/rollback can run it again"`
	Image         *string    `json:"image" doc:"The image in the server's registry, by digest (repository@sha256:...), when builds are pushed to one"`
	CreatedAt     time.Time  `json:"createdAt"`
	UpdatedAt     time.Time  `json:"updatedAt"`
	FinishedAt    *time.Time `json:"finishedAt" doc:"When it became LIVE, FAILED or CANCELLED"`
}

// StatusView is the answer of GET /deployments/{id}/status (DESIGN.md section 4).
type StatusView struct {
	ID            string   `json:"id"`
	Status        Status   `json:"status" enum:"QUEUED,BUILDING,PROVISIONING,CONFIGURING_DNS,LIVE,FAILED,CANCELLED"`
	Steps         []Step   `json:"steps"`
	DeployedURL   *string  `json:"deployedUrl"`
	ErrorMessage  *string  `json:"errorMessage"`
	BuildDuration *float64 `json:"buildDuration" doc:"Seconds the BUILD step ran"`
	Region        string   `json:"region"`
}

func buildSeconds(d *Deployment) *float64 {
	if d.Steps.Get(StepBuild) == nil || d.Steps.Get(StepBuild).Status != StepSucceeded {
		return nil
	}
	s := float64(d.BuildDurationMs) / 1000
	return &s
}

func utcSteps(steps Steps) []Step {
	out := make([]Step, len(steps))
	for i, s := range steps {
		out[i] = Step{Name: s.Name, Status: s.Status, StartedAt: opt.UTC(s.StartedAt), FinishedAt: opt.UTC(s.FinishedAt)}
	}
	return out
}

// ViewOf renders d for the API.
func ViewOf(d *Deployment) View {
	return View{
		ID: d.ID, ProjectID: d.ProjectID, Status: d.Status, Steps: utcSteps(d.Steps),
		CommitSHA: opt.Str(d.CommitSHA), Reason: d.Reason, DeployedURL: opt.Str(d.DeployedURL),
		ErrorMessage: opt.Str(d.ErrorMessage), BuildDuration: buildSeconds(d), Region: d.Region,
		WorkflowName: d.WorkflowName, SupersededBy: opt.Str(d.SupersededBy), ReplacedAt: opt.Time(d.ReplacedAt),
		RollbackOf: opt.Str(d.RollbackOf), BuildKept: d.BuildKept, Image: opt.Str(d.Image),
		CreatedAt: d.CreatedAt.UTC(), UpdatedAt: d.UpdatedAt.UTC(), FinishedAt: opt.Time(d.FinishedAt),
	}
}

// StatusViewOf renders d's status for the API.
func StatusViewOf(d *Deployment) StatusView {
	return StatusView{
		ID: d.ID, Status: d.Status, Steps: utcSteps(d.Steps), DeployedURL: opt.Str(d.DeployedURL),
		ErrorMessage: opt.Str(d.ErrorMessage), BuildDuration: buildSeconds(d), Region: d.Region,
	}
}

type listInput struct {
	platform.PageParams
	ProjectID string `query:"projectId" doc:"Only deployments of this project"`
}

// listOutput's Body writes an encoded []View (listpage.go); the operation's
// response schema says so (platform.EncodedResponses).
type listOutput struct {
	NextCursor string `header:"X-Next-Cursor" doc:"Cursor of the next page; empty on the last page"`
	Body       func(huma.Context)
}

func (h *handlers) list(ctx context.Context, in *listInput) (*listOutput, error) {
	if in.ProjectID != "" && !platform.ValidID(in.ProjectID) {
		return nil, platform.Invalid("query.projectId: must be a project ID (UUID)")
	}
	p, err := h.svc.listPage(ctx, ListParams{OwnerID: caller(ctx), ProjectID: in.ProjectID, Page: in.PageParams})
	if err != nil {
		return nil, err
	}
	return &listOutput{NextCursor: p.Next, Body: platform.WriteEncoded[[]View](h.api, p.Body)}, nil
}

type viewOutput struct{ Body View }

func (h *handlers) get(ctx context.Context, in *idPath) (*viewOutput, error) {
	d, err := h.svc.Get(ctx, caller(ctx), in.ID)
	if err != nil {
		return nil, err
	}
	return &viewOutput{Body: ViewOf(d)}, nil
}

type statusOutput struct{ Body StatusView }

func (h *handlers) status(ctx context.Context, in *idPath) (*statusOutput, error) {
	return statusReply(h.svc.Status(ctx, caller(ctx), in.ID))
}

// statusReply answers d's status (status, cancel), or err.
func statusReply(d *Deployment, err error) (*statusOutput, error) {
	if err != nil {
		return nil, err
	}
	return &statusOutput{Body: StatusViewOf(d)}, nil
}

type deleteOutput struct {
	Body deletedBody
}

// deletedBody is the answer of DELETE /deployments/{id}.
type deletedBody struct {
	ID      string `json:"id"`
	Deleted bool   `json:"deleted"`
}

func (deletedBody) SchemaName() string { return "DeploymentDeleted" }

func (h *handlers) delete(ctx context.Context, in *idPath) (*deleteOutput, error) {
	if err := h.svc.Delete(ctx, caller(ctx), in.ID); err != nil {
		return nil, err
	}
	out := &deleteOutput{}
	out.Body.ID, out.Body.Deleted = in.ID, true
	return out, nil
}

func (h *handlers) cancel(ctx context.Context, in *idPath) (*statusOutput, error) {
	return statusReply(h.svc.Cancel(ctx, caller(ctx), in.ID))
}

func (h *handlers) redeploy(ctx context.Context, in *idPath) (*triggerOutput, error) {
	return triggered(h.svc.Redeploy(ctx, caller(ctx), in.ID))
}

func (h *handlers) rollback(ctx context.Context, in *idPath) (*triggerOutput, error) {
	return triggered(h.svc.Rollback(ctx, caller(ctx), in.ID))
}

// SchemaName methods name these types in the OpenAPI document (platform.SchemaNamer).
func (View) SchemaName() string            { return "Deployment" }
func (createBody) SchemaName() string      { return "CreateDeploymentRequest" }
func (TriggerResponse) SchemaName() string { return "TriggeredDeployment" }
func (StatusView) SchemaName() string      { return "DeploymentStatusReport" }
