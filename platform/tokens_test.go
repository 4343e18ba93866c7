package platform_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/humatest"
	"github.com/keelson-dev/keelson/platform"
)

func TestGrant(t *testing.T) {
	session := platform.WithPrincipal(context.Background(), platform.Principal{UserID: "u"})
	token := func(team string, scopes ...platform.Permission) context.Context {
		return platform.WithPrincipal(context.Background(), platform.Principal{UserID: "u", TokenID: "t", TeamID: team, Scopes: scopes})
	}
	hidden := platform.NotFound("project not found")
	for _, c := range []struct {
		name string
		ctx  context.Context
		team string
		role platform.MemberRole
		perm platform.Permission
		want string // "" allowed, else the error's text or code
	}{
		{"session, no role", session, "", "", platform.ProjectsRead, "project not found"},
		{"session, role too low", session, "A", platform.MemberViewer, platform.DeploymentsWrite, "ROLE_TOO_LOW"},
		{"session, role holds it", session, "A", platform.MemberDeveloper, platform.DeploymentsWrite, ""},
		{"background work", context.Background(), "A", platform.MemberDeveloper, platform.DeploymentsWrite, ""},
		{"token with the scope", token("", platform.DeploymentsWrite), "A", platform.MemberDeveloper, platform.DeploymentsWrite, ""},
		{"token without the scope", token("", platform.ProjectsRead), "A", platform.MemberOwner, platform.DeploymentsWrite, "SCOPE_MISSING"},
		{"a write scope implies its read", token("", platform.DeploymentsDelete), "A", platform.MemberAdmin, platform.DeploymentsRead, ""},
		{"teams:write reads the team", token("", platform.TeamsWrite), "A", platform.MemberOwner, platform.MembersRead, ""},
		{"a read scope implies no write", token("", platform.DeploymentsRead), "A", platform.MemberOwner, platform.DeploymentsWrite, "SCOPE_MISSING"},
		{"secrets:write implies no other read", token("", platform.SecretsWrite), "A", platform.MemberOwner, platform.ProjectsRead, "SCOPE_MISSING"},
		{"token: the creator's role still caps", token("", platform.DeploymentsWrite), "A", platform.MemberViewer, platform.DeploymentsWrite, "ROLE_TOO_LOW"},
		{"team-bound token, its team", token("A", platform.ProjectsRead), "A", platform.MemberViewer, platform.ProjectsRead, ""},
		{"team-bound token, another team", token("A", platform.ProjectsRead), "B", platform.MemberOwner, platform.ProjectsRead, "project not found"},
		{"team-bound token, a personal project", token("A", platform.ProjectsRead), "", platform.MemberOwner, platform.ProjectsRead, "project not found"},
	} {
		err := platform.Grant(c.ctx, c.team, c.role, c.perm, hidden)
		var pe *platform.Error
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v, want allowed", c.name, err)
		case c.want != "" && (!errors.As(err, &pe) || (pe.Code != c.want && pe.Message != c.want)):
			t.Errorf("%s: %v, want %s", c.name, err, c.want)
		}
	}
	if err := platform.Grant(session, "", "", platform.ProjectsRead, nil); !errors.Is(err, platform.ErrNotFound) {
		t.Errorf("no role, nil hidden: %v, want a 404", err)
	}
}

func TestTokenAccounts(t *testing.T) {
	accounts := []string{"u", "A", "B"}
	bound := platform.WithPrincipal(context.Background(), platform.Principal{UserID: "u", TokenID: "t", TeamID: "A"})
	if got := platform.TokenAccounts(bound, accounts); !slices.Equal(got, []string{"A"}) {
		t.Errorf("bound to A: %v", got)
	}
	if got := platform.TokenAccounts(bound, []string{"u", "B"}); len(got) != 0 {
		t.Errorf("bound to a team the user left: %v", got)
	}
	unbound := platform.WithPrincipal(context.Background(), platform.Principal{UserID: "u", TokenID: "t"})
	if got := platform.TokenAccounts(unbound, accounts); !slices.Equal(got, accounts) {
		t.Errorf("unbound: %v", got)
	}
}

// tokenAuthn answers every bearer with a token principal holding scopes.
type tokenAuthn struct {
	scopes []platform.Permission
	calls  atomic.Int64
}

func (a *tokenAuthn) Authenticate(_ context.Context, tok string) (platform.Principal, error) {
	a.calls.Add(1)
	if !platform.IsAPIToken(tok) {
		return platform.Principal{UserID: "u"}, nil
	}
	return platform.Principal{UserID: "u", TokenID: "t", Scopes: a.scopes}, nil
}

func tokenAPI(t *testing.T, authn platform.Authenticator, rules bool) humatest.TestAPI {
	_, api := humatest.New(t, platform.APIConfig("test", "1"))
	if rules {
		api.UseMiddleware(platform.TokenRules(api, func(op *huma.Operation) platform.TokenRule {
			switch op.OperationID {
			case "account":
				return platform.TokenRule{Refuse: "API tokens cannot use account routes"}
			case "list":
				return platform.TokenRule{Scope: platform.ProjectsRead}
			case "project":
				return platform.TokenRule{}
			}
			return platform.TokenRule{Refuse: "not for tokens"}
		}))
	}
	for _, id := range []string{"account", "list", "project", "other"} {
		huma.Register(api, huma.Operation{OperationID: id, Method: http.MethodGet, Path: "/" + id,
			Middlewares: huma.Middlewares{platform.RequireAuth(api, authn)}},
			func(ctx context.Context, _ *struct{}) (*struct{}, error) { return nil, nil })
	}
	return api
}

func TestTokenRules(t *testing.T) {
	authn := &tokenAuthn{scopes: []platform.Permission{platform.DeploymentsWrite}}
	api := tokenAPI(t, authn, true)
	for path, want := range map[string]string{
		"/account": "403 TOKEN_REFUSED API tokens cannot use account routes", "/other": "403 TOKEN_REFUSED not for tokens",
		"/list": "403 SCOPE_MISSING projects:read", "/project": "204",
	} {
		before := authn.calls.Load()
		resp := api.Get(path, "Authorization: Bearer kls_x")
		words := strings.Fields(want)
		if got := resp.Code; got != map[string]int{"403": 403, "204": 204}[words[0]] {
			t.Fatalf("%s: %d %s, want %s", path, got, resp.Body, want)
		}
		for _, w := range words[1:] {
			if !strings.Contains(resp.Body.String(), w) {
				t.Fatalf("%s: %s, want %q", path, resp.Body, w)
			}
		}
		if refused := strings.Contains(want, "TOKEN_REFUSED"); refused && authn.calls.Load() != before {
			t.Fatalf("%s: a refused token was authenticated", path)
		}
		// A session passes everywhere.
		if resp := api.Get(path, "Authorization: Bearer session"); resp.Code != http.StatusNoContent {
			t.Fatalf("%s with a session: %d", path, resp.Code)
		}
	}
	// Without TokenRules no route admits a token.
	bare := tokenAPI(t, authn, false)
	if resp := bare.Get("/project", "Authorization: Bearer kls_x"); resp.Code != http.StatusForbidden || !strings.Contains(resp.Body.String(), "TOKEN_REFUSED") {
		t.Fatalf("no rules: %d %s", resp.Code, resp.Body)
	}
}
