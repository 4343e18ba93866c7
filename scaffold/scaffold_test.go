package scaffold_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/danielgtaylor/huma/v2/humatest"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/scaffold"
)

// tokenAuth admits the single token "good". The real authenticator is the auth
// module's; the reference server's e2e tests exercise the two together.
type tokenAuth struct{}

func (tokenAuth) Authenticate(_ context.Context, tok string) (platform.Principal, error) {
	if tok != "good" {
		return platform.Principal{}, platform.ErrUnauthorized
	}
	return platform.Principal{UserID: platform.NewID(), Role: platform.RoleUser}, nil
}

func TestPlaceholders(t *testing.T) {
	t.Parallel()
	_, api := humatest.New(t, platform.APIConfig("test", "1"))
	svc, err := scaffold.New(scaffold.Deps{Auth: tokenAuth{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Register(api); err != nil {
		t.Fatal(err)
	}
	auth := "Authorization: Bearer good"
	want := map[string][]string{
		"/env-vars":        {"This action returns all envVars", "This action returns a #3 envVar", "This action adds a new envVar", "This action updates a #3 envVar", "This action removes a #3 envVar"},
		"/users":           {"This action returns all users", "This action returns a #3 user", "This action adds a new user", "This action updates a #3 user", "This action removes a #3 user"},
		"/workflow-engine": {"This action returns all workflowEngine", "This action returns a #3 workflowEngine", "This action adds a new workflowEngine", "This action updates a #3 workflowEngine", "This action removes a #3 workflowEngine"},
	}
	for _, r := range scaffold.Resources() {
		calls := []struct {
			method, path string
			status       int
		}{
			{http.MethodGet, r.Prefix, 200},
			{http.MethodGet, r.Prefix + "/3", 200},
			{http.MethodPost, r.Prefix, 201},
			{http.MethodPatch, r.Prefix + "/3", 200},
			{http.MethodDelete, r.Prefix + "/3", 200},
		}
		for i, c := range calls {
			var args []any
			args = append(args, auth)
			if c.method == http.MethodPost || c.method == http.MethodPatch {
				args = append(args, map[string]any{})
			}
			resp := api.Do(c.method, c.path, args...)
			if resp.Code != c.status {
				t.Fatalf("%s %s: status %d, body %s", c.method, c.path, resp.Code, resp.Body)
			}
			if ct := resp.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
				t.Errorf("%s %s: content type %q", c.method, c.path, ct)
			}
			if w, ok := want[r.Prefix]; ok && resp.Body.String() != w[i] {
				t.Errorf("%s %s: got %q want %q", c.method, c.path, resp.Body.String(), w[i])
			}
			if !strings.HasPrefix(resp.Body.String(), "This action ") {
				t.Errorf("%s %s: got %q", c.method, c.path, resp.Body.String())
			}
			// Without a token every route is a 401 in the error model.
			noauth := api.Do(c.method, c.path)
			if noauth.Code != 401 || !strings.Contains(noauth.Body.String(), `"statusCode":401`) {
				t.Errorf("%s %s without token: %d %s", c.method, c.path, noauth.Code, noauth.Body)
			}
			bad := api.Do(c.method, c.path, "Authorization: Bearer nope")
			if bad.Code != 401 {
				t.Errorf("%s %s with bad token: %d", c.method, c.path, bad.Code)
			}
		}
	}
	// An unknown field in the empty create body is refused with a 400.
	resp := api.Do(http.MethodPost, "/env-vars", auth, map[string]any{"role": "ADMIN"})
	if resp.Code != 400 {
		t.Fatalf("extra field: %d %s", resp.Code, resp.Body)
	}
}
