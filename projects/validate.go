package projects

import (
	"crypto/rand"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/repourl"
)

// Limits of input sizes (also declared in the OpenAPI document).
const (
	MaxEnvVars = 100
	// MinSecretLen is the shortest secret env value accepted: shorter ones
	// cannot be masked in logs safely (masking "x" replaces every x of the
	// output while hiding nothing), so they are refused rather than stored
	// and shown. deployments.MinSecretLen is the same number.
	MinSecretLen     = 8
	MaxEnvKeyLen     = 128
	MaxEnvValueLen   = 16 << 10
	MaxEnvTotalBytes = 256 << 10
	MaxSlugLen       = 40
)

var (
	envKeyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	branchRE = regexp.MustCompile(`^[A-Za-z0-9._/-]+$`)
)

// DefaultReservedSlugs are slugs no project takes whatever the host adds:
// an app at api.<apps-domain> or www.<apps-domain> would pose as the
// platform itself, and on a parent domain shared with the API it could set
// cookies for the API's origin.
var DefaultReservedSlugs = []string{"api", "www", "admin", "app", "docs", "mail"}

// HostSlugs returns the slugs whose apps would answer at, or pose as, the
// hosts of urls (the API's and the frontend's): the first label of each host,
// and the label right before appsDomain when the host is under it. The host
// adds them to Deps.ReservedSlugs.
func HostSlugs(appsDomain string, urls ...string) []string {
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

// checkReservedSlug refuses a name whose slug is reserved.
func checkReservedSlug(name, slug string, reserved []string) error {
	if !slices.Contains(reserved, slug) {
		return nil
	}
	return platform.Invalidf("name: %q would give the app the reserved slug %q (reserved: %s, the names of the platform's own hosts); choose another name",
		name, slug, strings.Join(reserved, ", "))
}

// reservedEnv are keys the runtime sets itself.
var reservedEnv = map[string]string{
	"PORT": "PORT is reserved: the runtime sets it to the port it assigns the app",
}

// noNUL rejects strings the database and the process environment cannot hold.
func noNUL(field, v string) error {
	if strings.ContainsRune(v, 0) {
		return platform.Invalidf("%s: must not contain NUL characters", field)
	}
	return nil
}

// checkRepoURL validates raw and returns it (trimmed) and its normalized key.
func checkRepoURL(raw string, allowLocal bool) (repo, key string, err error) {
	u, err := repourl.Parse(raw, repourl.Allow{Local: allowLocal})
	if err != nil {
		return "", "", platform.Invalid("repoUrl: " + err.Error())
	}
	return u.Raw, u.Key, nil
}

// NormalizeRepoURL is the key ProjectsForRepository matches on: lower-case
// scheme and host, no trailing ".git" or "/". It returns "" for a URL it
// cannot parse.
func NormalizeRepoURL(raw string) string { return repourl.Normalize(raw) }

// checkBranch accepts git branch names that cannot be mistaken for options.
func checkBranch(field, b string) error {
	if b == "" {
		return nil
	}
	if !branchRE.MatchString(b) || strings.HasPrefix(b, "-") || strings.HasPrefix(b, "/") ||
		strings.HasSuffix(b, "/") || strings.HasSuffix(b, ".lock") || strings.HasSuffix(b, ".") ||
		strings.Contains(b, "..") || strings.Contains(b, "//") {
		return platform.Invalidf("%s: not a valid git branch name", field)
	}
	return nil
}

func (s *Service) checkRegion(r string) error {
	if slices.Contains(s.d.Regions, r) {
		return nil
	}
	return platform.Invalidf("region: must be one of %s", strings.Join(s.d.Regions, ", "))
}

// slugBase turns a name into [a-z0-9-], at most MaxSlugLen long.
func slugBase(name string) string {
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
	if len(s) > MaxSlugLen {
		s = strings.TrimRight(s[:MaxSlugLen], "-")
	}
	if s == "" {
		s = "project"
	}
	return s
}

// slugWithSuffix is base shortened to fit a "-xxxxxx" random suffix.
func slugWithSuffix(base string) string {
	const n = 6
	if len(base) > MaxSlugLen-n-1 {
		base = strings.TrimRight(base[:MaxSlugLen-n-1], "-")
	}
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return base + "-" + string(b)
}
