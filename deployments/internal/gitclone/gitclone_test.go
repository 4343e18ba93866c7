package gitclone

import (
	"context"
	"github.com/keelson-dev/keelson/platform/repourl"
	"net/netip"
	"strings"
	"testing"
)

// ParseRepo's locations for both runtimes: origin and port defaulted per
// scheme, http only with local repos allowed.
func TestParseRepo(t *testing.T) {
	for _, c := range []struct {
		raw        string
		allowLocal bool
		want       Source
		err        string
	}{
		{raw: "https://example.com/a/b.git", want: Source{URL: "https://example.com/a/b.git", Origin: "https://example.com/", Host: "example.com", Port: "443"}},
		{raw: "HTTPS://example.com:8443/a.git", want: Source{URL: "https://example.com:8443/a.git", Origin: "https://example.com:8443/", Host: "example.com", Port: "8443"}},
		{raw: "https://[2001:db8::1]/x.git", want: Source{URL: "https://[2001:db8::1]/x.git", Origin: "https://[2001:db8::1]/", Host: "2001:db8::1", Port: "443"}},
		{raw: "http://127.0.0.1:3000/a.git", allowLocal: true, want: Source{URL: "http://127.0.0.1:3000/a.git", Origin: "http://127.0.0.1:3000/", Host: "127.0.0.1", Port: "3000"}},
		{raw: "http://git.local/a.git", allowLocal: true, want: Source{URL: "http://git.local/a.git", Origin: "http://git.local/", Host: "git.local", Port: "80"}},
		{raw: "file:///srv/a.git", allowLocal: true, want: Source{URL: "file:///srv/a.git", Local: true}},
		{raw: "/srv/../srv/a.git", allowLocal: true, want: Source{URL: "/srv/a.git", Local: true}},
		{raw: "http://git.local/a.git", err: "repository URL: must be an https URL"},
		{raw: "http://u:p@git.local/a.git", allowLocal: true, err: "must not contain credentials"},
		{raw: "https:///a.git", err: "must have a host"},
		{raw: "file:///srv/a.git", err: "local repositories are not allowed on this server (KEELSON_ALLOW_LOCAL_REPOS)"},
		{raw: "/srv/a.git", err: "local repositories are not allowed"},
		{raw: "https://example.com/a\n.git", err: "control characters"},
	} {
		got, err := ParseRepo(c.raw, repourl.Allow{Local: c.allowLocal})
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseRepo(%q, %v): %v, want %q", c.raw, c.allowLocal, err, c.err)
			}
			continue
		}
		got.Raw, got.Key = "", "" // the projects module's; repourl's test checks them
		if err != nil || got != c.want {
			t.Errorf("ParseRepo(%q, %v) = %+v, %v; want %+v", c.raw, c.allowLocal, got, err, c.want)
		}
	}
}

// Pin pins only when neither local repos nor private hosts are allowed.
func TestPolicyPin(t *testing.T) {
	lookup := func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("2001:4860:4860::8888")}, nil
	}
	src := Source{URL: "https://example.com/a.git", Origin: "https://example.com/", Host: "example.com", Port: "443"}
	pin, err := Policy{LookupIP: lookup}.Pin(context.Background(), src)
	if err != nil || len(pin) != 2 || pin[0] != [2]string{"http.curloptResolve", "example.com:443:[2001:4860:4860::8888]"} {
		t.Fatalf("pin %v %v", pin, err)
	}
	for _, p := range []Policy{{AllowLocalRepos: true, LookupIP: lookup}, {AllowPrivateHosts: true, LookupIP: lookup}} {
		if pin, err := p.Pin(context.Background(), src); err != nil || pin != nil {
			t.Errorf("%+v: pin %v %v, want none", p, pin, err)
		}
	}
}
