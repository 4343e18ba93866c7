package platform

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/danielgtaylor/huma/v2"
)

// Sentinels that stores and services return. HTTPError maps each to its status.
var (
	ErrNotFound     = errors.New("not found")
	ErrConflict     = errors.New("conflict")
	ErrForbidden    = errors.New("forbidden")
	ErrUnauthorized = errors.New("unauthorized")
	ErrInvalid      = errors.New("invalid input")
	ErrRateLimited  = errors.New("rate limited")
	ErrUnavailable  = errors.New("unavailable")
	ErrTooLarge     = errors.New("too large")
)

// Error is an error meant for the client: a status, a public message, an
// optional machine-readable code, and an internal cause that is logged but
// never sent. errors.Is(e, ErrNotFound) and friends work through Unwrap.
type Error struct {
	Status     int
	Message    string
	Code       string
	RetryAfter time.Duration
	Err        error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Message + ": " + e.Err.Error()
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// NotFound is a 404 with msg. Use it for "absent or not yours" alike.
func NotFound(msg string) *Error { return &Error{Status: 404, Message: msg, Err: ErrNotFound} }

// Conflict is a 409 with msg.
func Conflict(msg string) *Error { return &Error{Status: 409, Message: msg, Err: ErrConflict} }

// Forbidden is a 403 with msg.
func Forbidden(msg string) *Error { return &Error{Status: 403, Message: msg, Err: ErrForbidden} }

// Unauthorized is a 401 with msg.
func Unauthorized(msg string) *Error { return &Error{Status: 401, Message: msg, Err: ErrUnauthorized} }

// Invalid is a 400 with msg; msg should name the offending field.
func Invalid(msg string) *Error { return &Error{Status: 400, Message: msg, Err: ErrInvalid} }

// Invalidf is Invalid with fmt.Sprintf.
func Invalidf(format string, a ...any) *Error { return Invalid(fmt.Sprintf(format, a...)) }

// RateLimited is a 429 telling the client to retry after d.
func RateLimited(msg string, d time.Duration) *Error {
	return &Error{Status: 429, Message: msg, RetryAfter: d, Err: ErrRateLimited}
}

// Unavailable is a 503 with msg (for example a provider that is not configured).
func Unavailable(msg string) *Error { return &Error{Status: 503, Message: msg, Err: ErrUnavailable} }

// WithCode sets the machine-readable code and returns e.
func (e *Error) WithCode(code string) *Error { e.Code = code; return e }

// HTTPError turns any error into the error a Huma handler returns. A *Error keeps
// its status and message; a bare sentinel becomes its status with a generic
// message; anything else is logged with its cause (through the logger in ctx)
// and answered as a bare 500 with no internal text.
func HTTPError(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	var se huma.StatusError
	var pe *Error
	switch {
	case errors.As(err, &pe):
		return toAPIError(pe)
	case errors.As(err, &se):
		return se
	case errors.Is(err, context.Canceled):
		return &APIError{StatusCode: 499, Message: "request cancelled", ErrorText: "Client Closed Request"}
	}
	for _, s := range []struct {
		err    error
		status int
		msg    string
	}{
		{ErrNotFound, 404, "resource not found"},
		{ErrConflict, 409, "resource already exists or was changed concurrently"},
		{ErrForbidden, 403, "forbidden"},
		{ErrUnauthorized, 401, "unauthorized"},
		{ErrInvalid, 400, "invalid input"},
		{ErrRateLimited, 429, "too many requests"},
		{ErrUnavailable, 503, "service unavailable"},
		{ErrTooLarge, 413, "request too large"},
	} {
		if errors.Is(err, s.err) {
			return newAPIError(s.status, s.msg)
		}
	}
	Logger(ctx).ErrorContext(ctx, "internal error", "err", err)
	return newAPIError(http.StatusInternalServerError, "internal server error")
}

func toAPIError(e *Error) *APIError {
	status := e.Status
	if status == 0 {
		status = 500
	}
	ae := newAPIError(status, e.Message)
	ae.Code = e.Code
	ae.headers = e.GetHeaders()
	return ae
}

// GetHeaders makes e a huma.HeadersError: a rate limit's Retry-After (whole
// seconds, rounded up) goes out with the answer a handler's *Error becomes.
func (e *Error) GetHeaders() http.Header {
	if e.RetryAfter <= 0 {
		return nil
	}
	secs := int((e.RetryAfter + time.Second - 1) / time.Second)
	return http.Header{"Retry-After": {strconv.Itoa(secs)}}
}

// APIError is the JSON error body of DESIGN.md section 4, NestJS-compatible:
// {"statusCode":400,"message":"...","error":"Bad Request"}. For validation
// failures Message is an array of strings, one per violated rule, and Errors
// lists them by location.
type APIError struct {
	StatusCode int          `json:"statusCode" doc:"HTTP status code"`
	Message    any          `json:"message" doc:"What went wrong: a string, or an array of strings for validation failures"`
	ErrorText  string       `json:"error" doc:"HTTP status text"`
	Code       string       `json:"code,omitempty" doc:"Machine-readable code, e.g. TWO_FACTOR_REQUIRED"`
	Errors     []FieldError `json:"errors,omitempty" doc:"Validation failures by location"`
	headers    http.Header
}

// TransformSchema types message in the OpenAPI document: a string, or an
// array of strings (validation failures), as NestJS answers it.
func (APIError) TransformSchema(r huma.Registry, s *huma.Schema) *huma.Schema {
	if m := s.Properties["message"]; m != nil {
		s.Properties["message"] = &huma.Schema{
			Description: m.Description,
			OneOf: []*huma.Schema{
				{Type: huma.TypeString},
				{Type: huma.TypeArray, Items: &huma.Schema{Type: huma.TypeString}, MinItems: ptrInt(1)},
			},
		}
	}
	return s
}

func ptrInt(i int) *int { return &i }

// FieldError is one violated validation rule.
type FieldError struct {
	Location string `json:"location,omitempty" doc:"Where the error is, e.g. body.password"`
	Message  string `json:"message" doc:"The rule that was violated"`
}

func newAPIError(status int, msg string) *APIError {
	text := http.StatusText(status)
	if text == "" {
		text = "Error"
	}
	return &APIError{StatusCode: status, Message: msg, ErrorText: text}
}

func (e *APIError) Error() string {
	if s, ok := e.Message.(string); ok {
		return s
	}
	return fmt.Sprint(e.Message)
}

// GetStatus implements huma.StatusError.
func (e *APIError) GetStatus() int { return e.StatusCode }

// GetHeaders implements huma.HeadersError (Retry-After on 429).
func (e *APIError) GetHeaders() http.Header { return e.headers }

// ContentType answers plain JSON rather than problem+json, as NestJS clients expect.
func (e *APIError) ContentType(string) string { return "application/json" }

var installOnce sync.Once

// InstallErrorModel makes Huma produce APIError bodies for its own errors
// (validation, body parsing) and for the errors handlers return, mapped by
// HTTPError, so a handler returns its error as it is. Huma keeps its error
// constructor in a package variable, so this is process-wide; it is idempotent
// and every host and test that serves Keelson modules should call it (NewAPI does).
// Validation failures become 400 (Huma's default is 422), field values are never
// echoed back (they may be passwords), and 5xx causes are logged, not sent.
//
// It also makes body validation case-sensitive (huma.ValidateStrictCasing):
// by default Huma matches "NAME" to the property "name" as encoding/json
// does, and validates only one of {"name":"ok","Name":"..."} while
// encoding/json stores the other, so a value could skip its schema checks.
// And arrays are not nullable in schemas (huma.DefaultArrayNullable): the
// modules answer [] for an empty list.
func InstallErrorModel() {
	installOnce.Do(func() {
		huma.ValidateStrictCasing = true
		huma.DefaultArrayNullable = false // see APIConfig
		huma.NewErrorWithContext = func(hctx huma.Context, status int, msg string, errs ...error) huma.StatusError {
			var ctx context.Context = context.Background()
			if hctx != nil {
				ctx = hctx.Context()
			}
			// A handler's own error (Huma wraps it as a 500 "unexpected
			// error occurred") is mapped here, once for every handler: a
			// *Error keeps its status and message, a sentinel its status,
			// anything else is logged and answered as a bare 500.
			if status == http.StatusInternalServerError && len(errs) == 1 && errs[0] != nil {
				var se huma.StatusError
				if errors.As(HTTPError(ctx, errs[0]), &se) {
					return se
				}
			}
			return buildError(ctx, status, msg, errs...)
		}
		huma.NewError = func(status int, msg string, errs ...error) huma.StatusError {
			return buildError(context.Background(), status, msg, errs...)
		}
	})
}

func buildError(ctx context.Context, status int, msg string, errs ...error) huma.StatusError {
	if status == http.StatusUnprocessableEntity {
		status = http.StatusBadRequest
	}
	if status >= 500 {
		if len(errs) > 0 {
			Logger(ctx).ErrorContext(ctx, "internal error", "msg", msg, "err", errors.Join(errs...))
		}
		if status == 500 {
			msg = "internal server error"
		}
		return newAPIError(status, msg)
	}
	ae := newAPIError(status, msg)
	var msgs []string
	for _, err := range errs {
		if err == nil {
			continue
		}
		var d huma.ErrorDetailer
		if errors.As(err, &d) {
			det := d.ErrorDetail()
			fe := FieldError{Location: det.Location, Message: det.Message}
			ae.Errors = append(ae.Errors, fe)
			if fe.Location != "" {
				msgs = append(msgs, fe.Location+": "+fe.Message)
			} else {
				msgs = append(msgs, fe.Message)
			}
			continue
		}
		// Plain errors here come from Huma's parsers (e.g. bad JSON); their text
		// describes the input, not our internals.
		ae.Errors = append(ae.Errors, FieldError{Message: err.Error()})
		msgs = append(msgs, err.Error())
	}
	if len(msgs) > 0 {
		ae.Message = msgs
	}
	return ae
}

type loggerKey struct{}

// WithLogger returns ctx carrying l; Logger reads it back.
func WithLogger(ctx context.Context, l *slog.Logger) context.Context {
	return context.WithValue(ctx, loggerKey{}, l)
}

// Logger returns the logger in ctx (request-scoped, carrying the request id),
// or a logger that discards everything: the library never writes to stdout.
func Logger(ctx context.Context) *slog.Logger {
	if ctx != nil {
		if l, ok := ctx.Value(loggerKey{}).(*slog.Logger); ok && l != nil {
			return l
		}
	}
	return discard
}

var discard = slog.New(slog.DiscardHandler)

// Wrap prefixes err for the logs (a module's "projects: create"), but passes
// nil and an *Error, already an answer, as they are.
func Wrap(prefix string, err error) error {
	if err == nil {
		return nil
	}
	var pe *Error
	if errors.As(err, &pe) {
		return err
	}
	return fmt.Errorf("%s: %w", prefix, err)
}
