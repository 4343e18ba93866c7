package platform_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/humatest"
	"github.com/keelson-dev/keelson/platform"
)

type signupInput struct {
	Body struct {
		Email    string `json:"email" format:"email"`
		Password string `json:"password" minLength:"6"`
	}
}

type failInput struct {
	Kind string `path:"kind"`
}

func newAPI(t *testing.T, logs *bytes.Buffer) humatest.TestAPI {
	_, api := humatest.New(t, platform.APIConfig("test", "1"))
	log := slog.New(slog.NewTextHandler(logs, nil))
	api.UseMiddleware(func(ctx huma.Context, next func(huma.Context)) {
		next(huma.WithContext(ctx, platform.WithLogger(ctx.Context(), log)))
	})
	huma.Register(api, huma.Operation{OperationID: "signup", Method: "POST", Path: "/signup"},
		func(ctx context.Context, in *signupInput) (*struct{}, error) { return nil, nil })
	huma.Register(api, huma.Operation{OperationID: "fail", Method: "GET", Path: "/fail/{kind}"},
		func(ctx context.Context, in *failInput) (*struct{}, error) {
			var err error
			switch in.Kind {
			case "notfound":
				err = fmt.Errorf("store: %w", platform.ErrNotFound)
			case "conflict":
				err = platform.Conflict("email already registered")
			case "limited":
				err = platform.RateLimited("too many login attempts", 1500*time.Millisecond)
			case "coded":
				err = platform.Unauthorized("two-factor code required").WithCode("TWO_FACTOR_REQUIRED")
			default:
				err = errors.New("pq: connection to 10.0.0.7 refused (password=hunter2)")
			}
			return nil, err // mapped once for every handler (InstallErrorModel)
		})
	return api
}

func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return m
}

func TestValidationErrorsAre400NamingTheFieldWithoutEchoingValues(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	api := newAPI(t, &logs)
	resp := api.Post("/signup", map[string]any{"email": "nope", "password": "s3cr"})
	if resp.Code != http.StatusBadRequest {
		t.Fatalf("status %d: %s", resp.Code, resp.Body)
	}
	if ct := resp.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("content type %q", ct)
	}
	body := decode(t, resp.Body.Bytes())
	if body["statusCode"] != float64(400) || body["error"] != "Bad Request" {
		t.Fatalf("body %v", body)
	}
	msgs, ok := body["message"].([]any)
	if !ok || len(msgs) != 2 {
		t.Fatalf("message should list both violations: %v", body["message"])
	}
	joined := fmt.Sprint(msgs)
	if !strings.Contains(joined, "body.password") || !strings.Contains(joined, "body.email") {
		t.Errorf("messages do not name the fields: %s", joined)
	}
	if strings.Contains(resp.Body.String(), "s3cr") {
		t.Errorf("error body echoes the submitted password: %s", resp.Body)
	}
	// Unknown fields are refused (mass assignment).
	resp = api.Post("/signup", map[string]any{"email": "a@b.co", "password": "secret1", "role": "ADMIN"})
	if resp.Code != http.StatusBadRequest || !strings.Contains(resp.Body.String(), "role") {
		t.Fatalf("unknown field: %d %s", resp.Code, resp.Body)
	}
	// Malformed JSON is a 400 too.
	resp = api.Post("/signup", strings.NewReader(`{"email":`))
	if resp.Code != http.StatusBadRequest {
		t.Fatalf("malformed JSON: %d %s", resp.Code, resp.Body)
	}
}

func TestHTTPErrorMapsSentinelsAndHidesInternals(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	api := newAPI(t, &logs)
	cases := []struct {
		kind   string
		status int
		msg    string
	}{
		{"notfound", 404, "resource not found"},
		{"conflict", 409, "email already registered"},
		{"limited", 429, "too many login attempts"},
		{"coded", 401, "two-factor code required"},
		{"boom", 500, "internal server error"},
	}
	for _, c := range cases {
		resp := api.Get("/fail/" + c.kind)
		if resp.Code != c.status {
			t.Fatalf("%s: status %d: %s", c.kind, resp.Code, resp.Body)
		}
		body := decode(t, resp.Body.Bytes())
		if body["message"] != c.msg || body["statusCode"] != float64(c.status) {
			t.Errorf("%s: body %v", c.kind, body)
		}
		switch c.kind {
		case "limited":
			if got := resp.Header().Values("Retry-After"); len(got) != 1 || got[0] != "2" {
				t.Errorf("Retry-After %q, want one, 2", got)
			}
		case "coded":
			if body["code"] != "TWO_FACTOR_REQUIRED" {
				t.Errorf("code %v", body["code"])
			}
		case "boom":
			if strings.Contains(resp.Body.String(), "hunter2") || strings.Contains(resp.Body.String(), "10.0.0.7") {
				t.Errorf("500 leaks internals: %s", resp.Body)
			}
			if !strings.Contains(logs.String(), "connection to 10.0.0.7 refused") {
				t.Errorf("the cause of a 500 was not logged: %s", logs.String())
			}
		}
	}
}

func TestCursorRoundTripAndGarbage(t *testing.T) {
	t.Parallel()
	c := platform.Cursor{Time: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), ID: platform.NewID()}
	got, err := platform.DecodeCursor(c.Encode())
	if err != nil || !got.Time.Equal(c.Time) || got.ID != c.ID {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	if got, err := platform.DecodeCursor(""); got != nil || err != nil {
		t.Fatalf("empty cursor: %v %v", got, err)
	}
	for _, bad := range []string{"%%%", "bm90IGpzb24", "eyJ0IjoiMjAyNiJ9"} {
		_, err := platform.DecodeCursor(bad)
		var pe *platform.Error
		if !errors.As(err, &pe) || pe.Status != 400 || !strings.Contains(pe.Message, "cursor") {
			t.Errorf("%q: %v", bad, err)
		}
	}
	for in, want := range map[int]int{0: 20, -5: 20, 1: 1, 100: 100, 1 << 30: 100} {
		if got := (platform.PageParams{Limit: in}).Size(); got != want {
			t.Errorf("Size(%d) = %d, want %d", in, got, want)
		}
	}
}

func TestIDs(t *testing.T) {
	t.Parallel()
	a, b := platform.NewID(), platform.NewID()
	if a == b || !platform.ValidID(a) {
		t.Fatalf("ids %q %q", a, b)
	}
	for _, bad := range []string{"", "x", "123e4567-e89b-12d3-a456-42661417400", "{123e4567-e89b-12d3-a456-426614174000}"} {
		if platform.ValidID(bad) {
			t.Errorf("ValidID(%q) = true", bad)
		}
	}
}
