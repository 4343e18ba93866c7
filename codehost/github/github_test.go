package github

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keelson-dev/keelson/codehost/githubfake"
	"github.com/keelson-dev/keelson/platform"
)

func TestNextLink(t *testing.T) {
	for h, want := range map[string]string{
		`<https://api.github.com/installation/repositories?per_page=100&page=2>; rel="next", <https://api.github.com/installation/repositories?per_page=100&page=5>; rel="last"`: "https://api.github.com/installation/repositories?per_page=100&page=2",
		`<https://api.github.com/x?page=1>; rel="prev", <https://api.github.com/x?page=1>; rel="first"`:                                                                          "",
		`<https://api.github.com/x?page=3>; rel="last next"`:                                                                                                                     "https://api.github.com/x?page=3",
		``:             "",
		`garbage`:      "",
		`<a>;rel=next`: "a",
	} {
		if got := nextLink(h); got != want {
			t.Errorf("nextLink(%q) = %q, want %q", h, got, want)
		}
	}
}

func TestParsePrivateKey(t *testing.T) {
	fake := githubfake.New(githubfake.Options{})
	defer fake.Close()
	pemText := fake.PrivateKeyPEM()
	path := filepath.Join(t.TempDir(), "app.pem")
	if err := os.WriteFile(path, []byte(pemText), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{
		"pem":           pemText,
		"@file":         "@" + path,
		"escaped lines": strings.ReplaceAll(pemText, "\n", `\n`),
	} {
		k, err := ParsePrivateKey(v)
		if err != nil || !k.Equal(fake.Key) {
			t.Errorf("%s: key %v, err %v", name, k != nil, err)
		}
	}
	for name, v := range map[string]string{"garbage": "not a key", "missing file": "@/nonexistent/key.pem"} {
		if _, err := ParsePrivateKey(v); err == nil {
			t.Errorf("%s: no error", name)
		} else if strings.Contains(err.Error(), "not a key") {
			t.Errorf("%s: error echoes the value: %v", name, err)
		}
	}
}

func TestAppJWTVerifiedByFake(t *testing.T) {
	fake := githubfake.New(githubfake.Options{})
	defer fake.Close()
	fake.AddInstallation(githubfake.Installation{ID: 5, Account: "acme", AccountType: "Organization"})
	c, err := New(Config{AppID: fake.AppID, AppSlug: fake.AppSlug, PrivateKey: fake.Key, APIURL: fake.URL, WebURL: fake.WebURL})
	if err != nil {
		t.Fatal(err)
	}
	in, err := c.Installation(context.Background(), 5)
	if err != nil || in.AccountLogin != "acme" || in.AccountType != "Organization" || in.Suspended {
		t.Fatalf("Installation = %+v, %v", in, err)
	}
	if _, err := c.Installation(context.Background(), 6); !errors.Is(err, platform.ErrNotFound) {
		t.Fatalf("unknown installation: %v, want ErrNotFound", err)
	}

	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]Config{
		"other key":    {AppID: fake.AppID, AppSlug: "x", PrivateKey: other, APIURL: fake.URL},
		"other app id": {AppID: fake.AppID + 1, AppSlug: "x", PrivateKey: fake.Key, APIURL: fake.URL},
	} {
		bad, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = bad.Installation(context.Background(), 5)
		var ae *APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized {
			t.Errorf("%s: err %v, want a 401 from the fake", name, err)
		}
		if _, _, err := bad.InstallationToken(context.Background(), 5); err == nil {
			t.Errorf("%s: minted a token", name)
		}
	}
	if fake.TokenMints(5) != 0 {
		t.Fatal("the fake minted a token for a bad JWT")
	}
}

func TestNewValidates(t *testing.T) {
	if _, err := New(Config{}); err == nil ||
		!strings.Contains(err.Error(), "AppID") || !strings.Contains(err.Error(), "PrivateKey") || !strings.Contains(err.Error(), "AppSlug") {
		t.Fatalf("New(empty) = %v", err)
	}
	if got := Missing("1", "", "key", ""); strings.Join(got, ",") != "KEELSON_CODEHOST_APP_SLUG,KEELSON_CODEHOST_WEBHOOK_SECRET" {
		t.Fatalf("Missing = %v", got)
	}
}

func TestParseEvent(t *testing.T) {
	fake := githubfake.New(githubfake.Options{})
	defer fake.Close()
	repo := &githubfake.Repository{ID: 3, Owner: "octocat", Name: "hello", DefaultBranch: "trunk"}
	fake.AddInstallation(githubfake.Installation{ID: 8, Account: "octocat", Repositories: []*githubfake.Repository{repo}})

	ev, err := ParseEvent("push", fake.PushPayload(githubfake.Push{Installation: 8, Repo: repo, Branch: "trunk", After: strings.Repeat("a", 40), Message: "hi [skip ci]"}))
	if err != nil {
		t.Fatal(err)
	}
	p := ev.Push
	if ev.InstallationID != 8 || p.Ref != "refs/heads/trunk" || p.After != strings.Repeat("a", 40) || p.Deleted ||
		p.HeadCommitMessage != "hi [skip ci]" || p.Repository.ID != 3 || p.Repository.DefaultBranch != "trunk" ||
		p.Repository.HTMLURL != fake.WebURL+"/octocat/hello" || p.Repository.CloneURL != fake.WebURL+"/octocat/hello.git" {
		t.Fatalf("push = %+v %+v", ev, p)
	}
	ev, err = ParseEvent("push", fake.PushPayload(githubfake.Push{Installation: 8, Repo: repo, Branch: "trunk", Deleted: true}))
	if err != nil || !ev.Push.Deleted || ev.Push.HeadCommitMessage != "" {
		t.Fatalf("deleted push = %+v, %v", ev.Push, err)
	}
	ev, err = ParseEvent("installation", fake.InstallationPayload("created", 8))
	if err != nil || ev.Action != "created" || ev.Installation.AccountLogin != "octocat" || len(ev.ReposAdded) != 1 || ev.ReposAdded[0].FullName != "octocat/hello" {
		t.Fatalf("installation = %+v, %v", ev, err)
	}
	ev, err = ParseEvent("installation_repositories", fake.InstallationRepositoriesPayload("removed", 8, nil, []*githubfake.Repository{repo}))
	if err != nil || ev.Action != "removed" || len(ev.ReposRemoved) != 1 || len(ev.ReposAdded) != 0 {
		t.Fatalf("installation_repositories = %+v, %v", ev, err)
	}
	for name, body := range map[string]string{
		"no repository": `{"ref":"refs/heads/main"}`,
		"wrong type":    `{"ref":1}`,
		"broken":        `{"ref":`,
	} {
		if _, err := ParseEvent("push", []byte(body)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := ParseEvent("installation", []byte(`{"action":"created"}`)); err == nil {
		t.Error("installation without installation: no error")
	}
}

// TestUserInstallations: GET /user/installations with the user's own token,
// as documented in "List app installations accessible to the user access
// token" (https://docs.github.com/en/rest/apps/installations#list-app-installations-accessible-to-the-user-access-token):
// {"total_count": N, "installations": [...]}, Link pagination, only the
// installations the user may access (their own account's and their
// organisations'), 401 for a bad token, 403 for a token that is not a GitHub
// App user token.
func TestUserInstallations(t *testing.T) {
	fake := githubfake.New(githubfake.Options{PageSize: 2})
	defer fake.Close()
	fake.AddInstallation(githubfake.Installation{ID: 1, Account: "octocat"})
	fake.AddInstallation(githubfake.Installation{ID: 2, Account: "acme", AccountType: "Organization", Members: []string{"octocat"}})
	fake.AddInstallation(githubfake.Installation{ID: 3, Account: "globex", AccountType: "Organization", Members: []string{"hank"}})
	fake.AddInstallation(githubfake.Installation{ID: 4, Account: "initech", AccountType: "Organization", Members: []string{"octocat"}, Suspended: true})
	fake.AddInstallation(githubfake.Installation{ID: 5, Account: "eve"})
	c, err := New(Config{AppID: fake.AppID, AppSlug: fake.AppSlug, PrivateKey: fake.Key, APIURL: fake.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	// The wire format first, as GitHub documents it.
	tok := fake.UserToken("octocat")
	req, _ := http.NewRequest(http.MethodGet, fake.URL+"/user/installations?per_page=2", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Accept", "application/vnd.github+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var page struct {
		TotalCount    *int `json:"total_count"`
		Installations []struct {
			ID      int64 `json:"id"`
			Account struct {
				Login string `json:"login"`
				Type  string `json:"type"`
			} `json:"account"`
			AppID      int64  `json:"app_id"`
			TargetType string `json:"target_type"`
		} `json:"installations"`
	}
	err = json.NewDecoder(resp.Body).Decode(&page)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || page.TotalCount == nil || *page.TotalCount != 3 || len(page.Installations) != 2 ||
		page.Installations[0].ID != 1 || page.Installations[0].Account.Login != "octocat" || page.Installations[1].TargetType != "Organization" ||
		page.Installations[1].AppID != fake.AppID || !strings.Contains(resp.Header.Get("Link"), `rel="next"`) {
		t.Fatalf("first page: %d %+v Link %q (%v)", resp.StatusCode, page, resp.Header.Get("Link"), err)
	}

	got, err := c.UserInstallations(ctx, tok)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, in := range got {
		ids = append(ids, in.ID)
	}
	if fmt.Sprint(ids) != "[1 2 4]" || got[1].AccountLogin != "acme" || got[1].AccountType != "Organization" || !got[2].Suspended {
		t.Fatalf("octocat's installations %v %+v", ids, got)
	}
	if n := fake.Calls("GET /user/installations"); n != 3 {
		t.Fatalf("%d requests, want 3 (2 pages by the client after 1 by hand)", n)
	}
	if got, err := c.UserInstallations(ctx, fake.UserToken("nobody")); err != nil || len(got) != 0 {
		t.Fatalf("a user with no installations: %v %v", got, err)
	}

	// A revoked, unknown or missing token: ErrUnauthorized, and it is never in the error.
	fake.RevokeUserToken(tok)
	for _, bad := range []string{tok, "ghu_made-up", ""} {
		_, err := c.UserInstallations(ctx, bad)
		if !errors.Is(err, platform.ErrUnauthorized) || (bad != "" && strings.Contains(err.Error(), bad)) {
			t.Fatalf("token %q: %v", bad, err)
		}
	}
	// An OAuth app's token (not a GitHub App user token): 403 from GitHub.
	gho := "gho_oauth-app-token"
	f2 := githubfake.New(githubfake.Options{UserLogin: func(t string) (string, bool) { return "octocat", t == gho }})
	defer f2.Close()
	c2, _ := New(Config{AppID: f2.AppID, AppSlug: f2.AppSlug, PrivateKey: f2.Key, APIURL: f2.URL})
	if _, err := c2.UserInstallations(ctx, gho); !errors.Is(err, platform.ErrForbidden) {
		t.Fatalf("OAuth app token: %v, want 403", err)
	}
}
