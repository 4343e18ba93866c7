package logstream

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/keelson-dev/keelson/deployments/logstream/internal/wire"
	"github.com/keelson-dev/keelson/platform"
)

// Tokens issues and verifies log tokens (internal/wire/token.go).
type Tokens = wire.Tokens

// The log stream's routes, GET /deployments/{id}/logs and POST
// /deployments/{id}/logs/token, registered by the deployments module with
// what they need of it (Route).

// TokenScheme is the OpenAPI security scheme of the ?token= log-stream token.
const TokenScheme = "logToken"

// Gate admits or refuses a log stream. Acquire returns a release function
// called when the stream ends, or an error (e.g. platform.RateLimited).
type Gate interface {
	Acquire(ctx context.Context, userID string) (release func(), err error)
}

// StreamMetrics are told when each stream starts and ends.
type StreamMetrics interface {
	LogStreamOpened()
	LogStreamClosed()
}

// Route is what the log routes need of the module.
type Route struct {
	Auth     platform.Authenticator
	Tokens   Tokens
	TokenTTL time.Duration
	Gate     Gate // optional
	Clock    platform.Clock
	Metrics  StreamMetrics
	Streams  *Streams
	// Deployment checks that the user may read deployment id's logs and
	// reports whether it ended (LIVE, FAILED or CANCELLED); an error (404)
	// otherwise.
	Deployment func(ctx context.Context, userID, id string) (ended bool, err error)
	// LastSeq is the cursor of the deployment's last stored line.
	LastSeq func(ctx context.Context, id string) (int64, error)
	// Operation is the module's operation template (tags, auth, limits).
	Operation func(id, method, path, summary string, status int) huma.Operation
}

type idPath struct {
	ID string `path:"id" doc:"Deployment ID (UUID)"`
}

type logsInput struct {
	ID          string `path:"id" doc:"Deployment ID (UUID)"`
	After       string `query:"after" doc:"Resume after this log cursor (used only when since is not given)"`
	Since       string `query:"since" doc:"Replay lines logged at or after this RFC 3339 time"`
	LastEventID string `header:"Last-Event-ID" doc:"Cursor of the last event received; sent by a reconnecting EventSource, takes precedence over after and since"`
	Token       string `query:"token" doc:"Log token from POST /deployments/{id}/logs/token, instead of the Authorization header"`
}

type logTokenOutput struct {
	Body struct {
		Token     string    `json:"token" doc:"Pass as ?token= to GET /deployments/{id}/logs"`
		ExpiresAt time.Time `json:"expiresAt"`
	}
}

// RegisterToken adds POST /deployments/{id}/logs/token.
func (r Route) RegisterToken(api huma.API) {
	huma.Register(api, r.Operation("create-deployment-log-token", http.MethodPost, "/deployments/{id}/logs/token",
		"Issue a short-lived token to open this deployment's log stream without an Authorization header (EventSource)",
		http.StatusCreated), r.logToken)
}

// RegisterStream adds GET /deployments/{id}/logs.
func (r Route) RegisterStream(api huma.API) {
	oa := api.OpenAPI()
	if oa.Components == nil {
		oa.Components = &huma.Components{}
	}
	if oa.Components.SecuritySchemes == nil {
		oa.Components.SecuritySchemes = map[string]*huma.SecurityScheme{}
	}
	oa.Components.SecuritySchemes[TokenScheme] = &huma.SecurityScheme{
		Type: "apiKey", In: "query", Name: "token",
		Description: "Short-lived token from POST /deployments/{id}/logs/token, valid for that deployment's log stream only.",
	}
	schema := EventSchema(oa.Components.Schemas)
	huma.Register(api, huma.Operation{
		OperationID: "stream-deployment-logs", Method: http.MethodGet, Path: "/deployments/{id}/logs",
		Summary: "Stream a deployment's logs (Server-Sent Events)",
		Description: "Server-Sent Events (text/event-stream). Every event is unnamed (no event: line) and has one data: line " +
			"holding one JSON object, a DeploymentLogEvent: its type is ready, log, error or done. A log event also has an " +
			"id: line holding its cursor. Order: ready, then the backlog (after, since or Last-Event-ID), then live lines, " +
			"then done when the deployment is LIVE, FAILED or CANCELLED and every line was sent. Lines starting with a colon " +
			"(: ping) are heartbeats to ignore.",
		Tags:        []string{"Deployments"},
		Security:    []map[string][]string{{platform.SecurityScheme: {}}, {TokenScheme: {}}},
		Middlewares: huma.Middlewares{r.auth(api)},
		// Declared errors (with the 200 and 204 below Huma would add no default one).
		Errors: []int{http.StatusBadRequest, http.StatusUnauthorized, http.StatusNotFound, http.StatusUnprocessableEntity,
			http.StatusTooManyRequests, http.StatusInternalServerError},
		Responses: map[string]*huma.Response{
			"200": {
				Description: "A stream of events; the schema is that of one event's data: line (framing: id: <cursor> for log events, data: <JSON>, a blank line).",
				Content:     map[string]*huma.MediaType{"text/event-stream": {Schema: schema}},
			},
			"204": {
				Description: "A resume (after or Last-Event-ID) at or past the last line of a deployment that is LIVE, FAILED or CANCELLED: nothing more will come on this stream, and 204 is what makes a browser's EventSource stop reconnecting. No body.",
			},
		},
	}, r.logs)
}

func caller(ctx context.Context) string {
	p, _ := platform.PrincipalFrom(ctx)
	return p.UserID
}

func (r Route) logToken(ctx context.Context, in *idPath) (*logTokenOutput, error) {
	user := caller(ctx)
	if _, err := r.Deployment(ctx, user, in.ID); err != nil {
		return nil, err
	}
	exp := r.Clock.Now().UTC().Add(r.TokenTTL).Truncate(time.Second)
	out := &logTokenOutput{}
	out.Body.Token, out.Body.ExpiresAt = r.Tokens.Issue(in.ID, user, exp), exp
	return out, nil
}

// auth admits a valid ?token= for the deployment in the path, else
// requires a bearer token.
func (r Route) auth(api huma.API) func(huma.Context, func(huma.Context)) {
	bearer := platform.RequireAuth(api, r.Auth)
	return func(ctx huma.Context, next func(huma.Context)) {
		tok := ctx.Query("token")
		if tok == "" {
			bearer(ctx, next)
			return
		}
		user, ok := r.Tokens.Verify(tok, ctx.Param("id"), r.Clock.Now())
		if !ok {
			_ = huma.WriteErr(api, ctx, http.StatusUnauthorized, "query.token: invalid or expired log token")
			return
		}
		next(huma.WithContext(ctx, platform.WithPrincipal(ctx.Context(), platform.Principal{UserID: user})))
	}
}

func (r Route) logs(ctx context.Context, in *logsInput) (*huma.StreamResponse, error) {
	user := caller(ctx)
	ended, err := r.Deployment(ctx, user, in.ID)
	if err != nil {
		return nil, err
	}
	start, err := ParseStart(in.After, in.Since, in.LastEventID)
	if err != nil {
		return nil, err
	}
	if start.Resume && ended {
		// A reconnecting EventSource would otherwise replay ready and done
		// every few seconds for as long as its token lasts: 204 is the one
		// answer that stops it (WHATWG HTML, "server-sent events").
		last, err := r.LastSeq(ctx, in.ID)
		if err != nil {
			return nil, err
		}
		if start.After >= last {
			return &huma.StreamResponse{Body: func(hctx huma.Context) { hctx.SetStatus(http.StatusNoContent) }}, nil
		}
	}
	release := func() {}
	if r.Gate != nil {
		if release, err = r.Gate.Acquire(ctx, user); err != nil {
			return nil, err
		}
	}
	return &huma.StreamResponse{Body: func(hctx huma.Context) {
		r.Metrics.LogStreamOpened()
		end := func() { // when the stream ends, in whichever goroutine
			release()
			r.Metrics.LogStreamClosed()
		}
		r.Streams.Serve(hctx, in.ID, start, end)
	}}, nil
}
