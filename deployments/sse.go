package deployments

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"
	"github.com/keelson-dev/keelson/deployments/logstream"
	"github.com/keelson-dev/keelson/platform"
)

// The log stream's route: GET /deployments/{id}/logs (the stream itself,
// its events and where it starts: deployments/logstream).

type logsInput struct {
	ID          string `path:"id" doc:"Deployment ID (UUID)"`
	After       string `query:"after" doc:"Resume after this log cursor (used only when since is not given)"`
	Since       string `query:"since" doc:"Replay lines logged at or after this RFC 3339 time"`
	LastEventID string `header:"Last-Event-ID" doc:"Cursor of the last event received; sent by a reconnecting EventSource, takes precedence over after and since"`
	Token       string `query:"token" doc:"Log token from POST /deployments/{id}/logs/token, instead of the Authorization header"`
}

func (h *handlers) registerLogs(api huma.API, auth platform.Authenticator) {
	oa := api.OpenAPI()
	if oa.Components == nil {
		oa.Components = &huma.Components{}
	}
	if oa.Components.SecuritySchemes == nil {
		oa.Components.SecuritySchemes = map[string]*huma.SecurityScheme{}
	}
	oa.Components.SecuritySchemes[LogTokenScheme] = &huma.SecurityScheme{
		Type: "apiKey", In: "query", Name: "token",
		Description: "Short-lived token from POST /deployments/{id}/logs/token, valid for that deployment's log stream only.",
	}
	schema := logstream.EventSchema(oa.Components.Schemas)
	huma.Register(api, huma.Operation{
		OperationID: "stream-deployment-logs", Method: http.MethodGet, Path: "/deployments/{id}/logs",
		Summary: "Stream a deployment's logs (Server-Sent Events)",
		Description: "Server-Sent Events (text/event-stream). Every event is unnamed (no event: line) and has one data: line " +
			"holding one JSON object, a DeploymentLogEvent: its type is ready, log, error or done. A log event also has an " +
			"id: line holding its cursor. Order: ready, then the backlog (after, since or Last-Event-ID), then live lines, " +
			"then done when the deployment is LIVE, FAILED or CANCELLED and every line was sent. Lines starting with a colon " +
			"(: ping) are heartbeats to ignore.",
		Tags:        []string{"Deployments"},
		Security:    []map[string][]string{{platform.SecurityScheme: {}}, {LogTokenScheme: {}}},
		Middlewares: huma.Middlewares{h.logsAuth(api, auth)},
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
	}, h.logs)
}

// logsAuth admits a valid ?token= for the deployment in the path, else
// requires a bearer token.
func (h *handlers) logsAuth(api huma.API, auth platform.Authenticator) func(huma.Context, func(huma.Context)) {
	bearer := platform.RequireAuth(api, auth)
	return func(ctx huma.Context, next func(huma.Context)) {
		tok := ctx.Query("token")
		if tok == "" {
			bearer(ctx, next)
			return
		}
		user, ok := h.tokens.Verify(tok, ctx.Param("id"), h.clock.Now())
		if !ok {
			_ = huma.WriteErr(api, ctx, http.StatusUnauthorized, "query.token: invalid or expired log token")
			return
		}
		next(huma.WithContext(ctx, platform.WithPrincipal(ctx.Context(), platform.Principal{UserID: user})))
	}
}

func (h *handlers) logs(ctx context.Context, in *logsInput) (*huma.StreamResponse, error) {
	user := caller(ctx)
	d, err := h.svc.Get(ctx, user, in.ID)
	if err != nil {
		return nil, err
	}
	start, err := logstream.ParseStart(in.After, in.Since, in.LastEventID)
	if err != nil {
		return nil, err
	}
	if start.Resume && d.Status.Terminal() {
		// A reconnecting EventSource would otherwise replay ready and done
		// every few seconds for as long as its token lasts: 204 is the one
		// answer that stops it (WHATWG HTML, "server-sent events").
		last, err := h.svc.store.LogMaxSeq(ctx, d.ID)
		if err != nil {
			return nil, err
		}
		if start.After >= last {
			return &huma.StreamResponse{Body: func(hctx huma.Context) { hctx.SetStatus(http.StatusNoContent) }}, nil
		}
	}
	release := func() {}
	if h.streams != nil {
		if release, err = h.streams.Acquire(ctx, user); err != nil {
			return nil, err
		}
	}
	return &huma.StreamResponse{Body: func(hctx huma.Context) {
		h.metrics.LogStreamOpened()
		end := func() { // when the stream ends, in whichever goroutine
			release()
			h.metrics.LogStreamClosed()
		}
		h.svc.streams.Serve(hctx, d.ID, start, end)
	}}, nil
}
