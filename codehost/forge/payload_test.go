package forge

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
)

func TestSSHToHTTPS(t *testing.T) {
	for in, want := range map[string]string{
		"git@github.com:Codertocat/Hello-World.git":     "https://github.com/Codertocat/Hello-World.git",
		"ssh://gitea@localhost:2222/gitea/webhooks.git": "https://localhost/gitea/webhooks.git",
		"git@example.com:mike/diaspora.git":             "https://example.com/mike/diaspora.git",
		"https://github.com/a/b.git":                    "",
		"git://github.com/a/b.git":                      "",
		"github.com:a/b":                                "",
		"git@host:/abs/path":                            "",
	} {
		if got := SSHToHTTPS(in); got != want {
			t.Errorf("SSHToHTTPS(%q) = %q, want %q", in, got, want)
		}
	}
}

// The hosts' published examples (examples/server/testdata/webhooks) decode to
// the repository and push they describe.
func TestHookPayloadOfPublishedExamples(t *testing.T) {
	read := func(name string) *Payload {
		b, err := os.ReadFile("../../examples/server/testdata/webhooks/" + name)
		if err != nil {
			t.Fatal(err)
		}
		var p Payload
		if err := json.Unmarshal(b, &p); err != nil {
			t.Fatal(err)
		}
		return &p
	}
	for _, c := range []struct {
		file, url, id, ref, after, msg, branch, full string
	}{
		{"github-push.json", "https://github.com/Codertocat/Hello-World.git", "186853002", "refs/heads/master",
			"6113728f27ae82c7b1a177c8d03f9e96e0adf246", "Initial commit", "master", "Codertocat/Hello-World"},
		{"gitea-push.json", "http://localhost:3000/gitea/webhooks.git", "140", "refs/heads/develop",
			"bffeb74224043ba2feb48d137756c8a9331c449a", "Webhooks Yay!", "master", "gitea/webhooks"},
		{"gitlab-push.json", "http://example.com/mike/diaspora.git", "15", "refs/heads/master",
			"da1560886d4f094c3e6c9ef40349f7d38b5d27d7", "fixed readme", "master", "mike/diaspora"},
	} {
		p := read(c.file)
		urls, id := p.Identity()
		if len(urls) == 0 || urls[0] != c.url || id != c.id {
			t.Errorf("%s: identity %v %q", c.file, urls, id)
		}
		push := p.Push()
		if push.Ref != c.ref || push.After != c.after || push.HeadCommitMessage != c.msg || push.Deleted ||
			push.Repository.DefaultBranch != c.branch || push.Repository.FullName != c.full {
			t.Errorf("%s: push %+v", c.file, push)
		}
	}
	// A GitLab branch deletion: after is zeros, checkout_sha null.
	var del Payload
	if err := json.Unmarshal([]byte(`{"object_kind":"push","ref":"refs/heads/x","after":"0000000000000000000000000000000000000000","checkout_sha":null,"project":{"id":1,"git_http_url":"https://gitlab.example/a/b.git"}}`), &del); err != nil {
		t.Fatal(err)
	}
	if !del.Push().Deleted {
		t.Error("GitLab branch deletion not seen as deleted")
	}
}

// A repository URL longer than MaxURL decodes as absent, in every URL
// field, whether it arrives plain or escaped; one at the bound is kept.
func TestHookURLBoundedWhereDecoded(t *testing.T) {
	atBound := "https://example.com/" + strings.Repeat("a", MaxURL-len("https://example.com/"))
	over := atBound + "a"
	escaped := `"` + strings.Repeat(`\u0061`, MaxURL+1) + `"`
	for _, field := range []string{"clone_url", "html_url", "ssh_url", "git_http_url", "git_ssh_url"} {
		for raw, want := range map[string]int{strconv.Quote(atBound): 1, strconv.Quote(over): 0, escaped: 0} {
			var p Payload
			if err := json.Unmarshal([]byte(`{"repository":{"`+field+`":`+raw+`}}`), &p); err != nil {
				t.Fatal(err)
			}
			if urls, _ := p.Identity(); len(urls) != want {
				t.Errorf("%s of %d bytes: %d URLs, want %d", field, len(raw), len(urls), want)
			}
		}
	}
}
