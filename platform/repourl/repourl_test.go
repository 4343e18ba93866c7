package repourl

import (
	"strings"
	"testing"
)

// One parser for the projects module and the clone: what each accepts, its
// key and what git fetches, and why it refuses.
func TestParse(t *testing.T) {
	for _, c := range []struct {
		raw        string
		allowLocal bool
		private    bool
		key, fetch string
		err        string
	}{
		{raw: " https://GitHub.com/Owner/Repo.git/ ", key: "https://github.com/Owner/Repo", fetch: "https://GitHub.com/Owner/Repo.git/"},
		{raw: "https://example.com:8443/a.git", key: "https://example.com:8443/a", fetch: "https://example.com:8443/a.git"},
		{raw: "https://[2001:db8::1]/x.git", key: "https://2001:db8::1/x", fetch: "https://[2001:db8::1]/x.git"},
		{raw: "http://127.0.0.1:3000/a.git", allowLocal: true, key: "http://127.0.0.1:3000/a", fetch: "http://127.0.0.1:3000/a.git"},
		{raw: "file:///srv/../srv/a.git", allowLocal: true, key: "file:///srv/a", fetch: "file:///srv/a.git"},
		{raw: "/srv/a.git/", allowLocal: true, key: "file:///srv/a", fetch: "/srv/a.git"},
		{raw: "https://10.0.0.1/a.git", private: true, key: "https://10.0.0.1/a", fetch: "https://10.0.0.1/a.git"},
		{raw: "https://[fe80::1%25eth0]/x.git", private: true, key: "https://fe80::1%eth0/x", fetch: "https://[fe80::1%25eth0]/x.git"},
		{raw: "", err: "must not be empty"},
		{raw: "https://example.com/a b", err: "spaces or control characters"},
		{raw: "https://example.com/a\n.git", err: "spaces or control characters"},
		{raw: "http://example.com/a.git", err: "must be an https URL"},
		{raw: "git@github.com:a/b.git", err: "not a valid URL; use an https URL"},
		{raw: "https://u:p@example.com/a.git", err: "must not contain credentials"},
		{raw: "https://example.com/a.git?x=1", err: "must not have a query or fragment"},
		{raw: "https:///a.git", err: "must have a host"},
		{raw: "https://10.0.0.1/a.git", err: "loopback, private or link-local"},
		{raw: "https://[::ffff:127.0.0.1]/a.git", err: "loopback, private or link-local"},
		{raw: "https://[fe80::1%25eth0]/a.git", err: "loopback, private or link-local"},
		{raw: "http://10.0.0.1/a.git", private: true, err: "must be an https URL"},
		{raw: "https://localhost/a.git", err: "not localhost"},
		{raw: "https://2130706433/a.git", err: "not localhost"},
		{raw: "https://exa_mple.com/a.git", err: "not a valid host name"},
		{raw: "https://example.com/", err: "must include the repository path"},
		{raw: "/srv/a.git", err: "local repositories are not allowed"},
		{raw: "file://remote/srv/a.git", allowLocal: true, err: "file:///absolute/path"},
	} {
		got, err := Parse(c.raw, Allow{Local: c.allowLocal, PrivateHosts: c.private})
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("Parse(%q): %v, want %q", c.raw, err, c.err)
			}
			continue
		}
		if err != nil || got.Key != c.key || got.URL != c.fetch || got.Raw != strings.TrimSpace(c.raw) {
			t.Errorf("Parse(%q) = %+v, %v; want key %q, fetch %q", c.raw, got, err, c.key, c.fetch)
		}
	}
	if k := Normalize("not a url"); k != "" {
		t.Errorf("Normalize of a non-URL = %q", k)
	}
}
