// Package slugs makes project slugs: the URL-safe name a project's app
// answers at (<slug>.<apps-domain>), derived from its name, and the slugs no
// project may take because an app there would pose as the platform's own
// hosts. The projects module uses it; the host uses OfHosts to reserve the
// slugs of its API's and frontend's hosts.
package slugs

import (
	"crypto/rand"
	"net"
	"net/url"
	"slices"
	"strings"

	"github.com/keelson-dev/keelson/platform"
)

// MaxLen is the longest slug.
const MaxLen = 40

// DefaultReserved are slugs no project takes whatever the host adds:
// an app at api.<apps-domain> or www.<apps-domain> would pose as the
// platform itself, and on a parent domain shared with the API it could set
// cookies for the API's origin.
var DefaultReserved = []string{"api", "www", "admin", "app", "docs", "mail"}

// OfHosts returns the slugs whose apps would answer at, or pose as, the
// hosts of urls (the API's and the frontend's): the first label of each host,
// and the label right before appsDomain when the host is under it. The host
// adds them to the projects module's reserved slugs.
func OfHosts(appsDomain string, urls ...string) []string {
	var out []string
	suffix := "." + strings.TrimSuffix(strings.ToLower(appsDomain), ".")
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil || u.Hostname() == "" || net.ParseIP(u.Hostname()) != nil {
			continue
		}
		host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
		first, _, _ := strings.Cut(host, ".")
		out = append(out, first)
		if rest, ok := strings.CutSuffix(host, suffix); ok && rest != "" {
			labels := strings.Split(rest, ".")
			out = append(out, labels[len(labels)-1])
		}
	}
	return out
}

// CheckReserved refuses (400) a name whose slug is reserved.
func CheckReserved(name, slug string, reserved []string) error {
	if !slices.Contains(reserved, slug) {
		return nil
	}
	return platform.Invalidf("name: %q would give the app the reserved slug %q (reserved: %s, the names of the platform's own hosts); choose another name",
		name, slug, strings.Join(reserved, ", "))
}

// Base turns a name into [a-z0-9-], at most MaxLen long ("project" when
// nothing is left).
func Base(name string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(name) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	s := strings.Trim(b.String(), "-")
	if len(s) > MaxLen {
		s = strings.TrimRight(s[:MaxLen], "-")
	}
	if s == "" {
		s = "project"
	}
	return s
}

// WithSuffix is base shortened to fit a "-xxxxxx" random suffix.
func WithSuffix(base string) string {
	const n = 6
	if len(base) > MaxLen-n-1 {
		base = strings.TrimRight(base[:MaxLen-n-1], "-")
	}
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return base + "-" + string(b)
}
