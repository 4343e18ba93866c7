package projects

import (
	"crypto/rand"
	"net"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"github.com/keelson-dev/keelson/platform"
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
	envKeyRE   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	hostnameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*\.?$`)
	numericRE  = regexp.MustCompile(`^(0x)?[0-9a-f]+$`)
	branchRE   = regexp.MustCompile(`^[A-Za-z0-9._/-]+$`)
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
	repo = strings.TrimSpace(raw)
	if repo == "" {
		return "", "", platform.Invalid("repoUrl: must not be empty")
	}
	if strings.IndexFunc(repo, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return "", "", platform.Invalid("repoUrl: must not contain spaces or control characters")
	}
	if strings.HasPrefix(repo, "/") || strings.HasPrefix(strings.ToLower(repo), "file:") {
		if !allowLocal {
			return "", "", platform.Invalid("repoUrl: local repositories are not allowed on this server; use an https URL")
		}
		p := repo
		if strings.HasPrefix(strings.ToLower(repo), "file:") {
			u, err := url.Parse(repo)
			if err != nil || (u.Host != "" && u.Host != "localhost") || u.Path == "" {
				return "", "", platform.Invalid("repoUrl: a file URL must look like file:///absolute/path")
			}
			p = u.Path
		}
		if !filepath.IsAbs(p) {
			return "", "", platform.Invalid("repoUrl: a local path must be absolute")
		}
		return repo, "file://" + strings.TrimSuffix(strings.TrimSuffix(filepath.Clean(p), "/"), ".git"), nil
	}
	u, err := url.Parse(repo)
	if err != nil {
		return "", "", platform.Invalid("repoUrl: not a valid URL")
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && allowLocal:
	default:
		return "", "", platform.Invalid("repoUrl: must be an https URL, e.g. https://github.com/owner/repo")
	}
	if u.User != nil {
		return "", "", platform.Invalid("repoUrl: must not contain credentials; private repositories authenticate through the code-host app")
	}
	if u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return "", "", platform.Invalid("repoUrl: must not have a query or fragment")
	}
	host := strings.ToLower(u.Hostname())
	if host == "" {
		return "", "", platform.Invalid("repoUrl: must have a host")
	}
	if ip := net.ParseIP(host); ip != nil {
		if !allowLocal && !publicIP(ip) {
			return "", "", platform.Invalid("repoUrl: host must not be a loopback, private or link-local address")
		}
	} else {
		if !hostnameRE.MatchString(host) {
			return "", "", platform.Invalid("repoUrl: host is not a valid host name")
		}
		labels := strings.Split(strings.TrimSuffix(host, "."), ".")
		local := host == "localhost" || strings.HasSuffix(strings.TrimSuffix(host, "."), ".localhost") ||
			numericRE.MatchString(labels[len(labels)-1]) // 2130706433, 0x7f.1: IPs in disguise
		if local && !allowLocal {
			return "", "", platform.Invalid("repoUrl: host must be a public domain name or IP address, not localhost")
		}
	}
	path := strings.TrimRight(u.EscapedPath(), "/")
	if path == "" {
		return "", "", platform.Invalid("repoUrl: must include the repository path, e.g. https://github.com/owner/repo")
	}
	hostport := host
	if port := u.Port(); port != "" {
		hostport = net.JoinHostPort(host, port)
	}
	return repo, u.Scheme + "://" + hostport + strings.TrimRight(strings.TrimSuffix(path, ".git"), "/"), nil
}

// NormalizeRepoURL is the key ProjectsForRepository matches on: lower-case
// scheme and host, no trailing ".git" or "/". It returns "" for a URL it
// cannot parse.
func NormalizeRepoURL(raw string) string {
	_, key, err := checkRepoURL(raw, true)
	if err != nil {
		return ""
	}
	return key
}

func publicIP(ip net.IP) bool {
	return !(ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified())
}

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
