package github

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
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
