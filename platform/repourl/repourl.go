// Package repourl is the one parser of a project's repository URL: the
// projects module checks it (and keys projects by it) when a project is
// created or changed, and the runtimes' clone parses it again with the same
// rules before git runs.
package repourl

import (
	"errors"
	"net"
	"net/netip"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

// URL is a parsed repository location.
type URL struct {
	Raw    string // as given, trimmed
	Key    string // what projects are matched on: lower-case scheme and host, no trailing ".git" or "/"
	URL    string // what git fetches from
	Origin string // scheme://host[:port]/ for http(s), "" for local repositories
	Host   string // the host name or address (no port, no brackets) for http(s)
	Port   string // the port, defaulted from the scheme, for http(s)
	Local  bool   // an absolute path or a file:// URL
}

var (
	hostnameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*\.?$`)
	numericRE  = regexp.MustCompile(`^(0x)?[0-9a-f]+$`)
)

// Allow widens what Parse accepts.
type Allow struct {
	// Local (KEELSON_ALLOW_LOCAL_REPOS) admits http://, loopback and private
	// hosts, file:// URLs and absolute paths.
	Local bool
	// PrivateHosts (KEELSON_ALLOW_PRIVATE_REPO_HOSTS) admits loopback,
	// private and link-local addresses as https hosts.
	PrivateHosts bool
}

// Parse checks raw: an https URL of a public host with a repository path,
// no credentials, query or fragment, widened by allow. The error says what
// is wrong in words for the user.
func Parse(raw string, allow Allow) (URL, error) {
	allowLocal := allow.Local
	repo := strings.TrimSpace(raw)
	if repo == "" {
		return URL{}, errors.New("must not be empty")
	}
	if strings.IndexFunc(repo, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return URL{}, errors.New("must not contain spaces or control characters")
	}
	if strings.HasPrefix(repo, "/") || strings.HasPrefix(strings.ToLower(repo), "file:") {
		return parseLocal(repo, allowLocal)
	}
	u, err := url.Parse(repo)
	if err != nil {
		return URL{}, errors.New("not a valid URL; use an https URL, e.g. https://github.com/owner/repo")
	}
	scheme, port := strings.ToLower(u.Scheme), "443"
	switch {
	case scheme == "https":
	case scheme == "http" && allowLocal:
		port = "80"
	default:
		return URL{}, errors.New("must be an https URL, e.g. https://github.com/owner/repo")
	}
	if u.User != nil {
		return URL{}, errors.New("must not contain credentials; private repositories authenticate through the code-host app")
	}
	if u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return URL{}, errors.New("must not have a query or fragment")
	}
	host := strings.ToLower(u.Hostname())
	if err := checkHost(host, allow); err != nil {
		return URL{}, err
	}
	path := strings.TrimRight(u.EscapedPath(), "/")
	if path == "" {
		return URL{}, errors.New("must include the repository path, e.g. https://github.com/owner/repo")
	}
	hostport := host
	if p := u.Port(); p != "" {
		hostport, port = net.JoinHostPort(host, p), p
	}
	return URL{
		Raw:    repo,
		Key:    scheme + "://" + hostport + strings.TrimRight(strings.TrimSuffix(path, ".git"), "/"),
		URL:    u.String(),
		Origin: scheme + "://" + u.Host + "/",
		Host:   u.Hostname(),
		Port:   port,
	}, nil
}

func parseLocal(repo string, allowLocal bool) (URL, error) {
	if !allowLocal {
		return URL{}, errors.New("local repositories are not allowed on this server (KEELSON_ALLOW_LOCAL_REPOS); use an https URL")
	}
	p := repo
	if strings.HasPrefix(strings.ToLower(repo), "file:") {
		u, err := url.Parse(repo)
		if err != nil || (u.Host != "" && u.Host != "localhost") || u.Path == "" {
			return URL{}, errors.New("a file URL must look like file:///absolute/path")
		}
		p = u.Path
	}
	if !filepath.IsAbs(p) {
		return URL{}, errors.New("a local path must be absolute")
	}
	clean := filepath.Clean(p)
	fetch := clean
	if p != repo {
		fetch = "file://" + clean
	}
	return URL{Raw: repo, Key: "file://" + strings.TrimSuffix(strings.TrimSuffix(clean, "/"), ".git"), URL: fetch, Local: true}, nil
}

// checkHost refuses an empty or malformed host, and unless allowed a
// loopback, private or link-local one (also spelled as a number).
func checkHost(host string, allow Allow) error {
	if host == "" {
		return errors.New("must have a host")
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if !allow.Local && !allow.PrivateHosts && !publicIP(net.IP(ip.Unmap().AsSlice())) {
			return errors.New("host must not be a loopback, private or link-local address")
		}
		return nil
	}
	if !hostnameRE.MatchString(host) {
		return errors.New("host is not a valid host name")
	}
	labels := strings.Split(strings.TrimSuffix(host, "."), ".")
	local := host == "localhost" || strings.HasSuffix(strings.TrimSuffix(host, "."), ".localhost") ||
		numericRE.MatchString(labels[len(labels)-1]) // 2130706433, 0x7f.1: IPs in disguise
	if local && !allow.Local {
		return errors.New("host must be a public domain name or IP address, not localhost")
	}
	return nil
}

func publicIP(ip net.IP) bool {
	return !(ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified())
}

// Normalize is raw's Key, or "" when raw is not a repository URL (local
// repositories included).
func Normalize(raw string) string {
	u, err := Parse(raw, Allow{Local: true})
	if err != nil {
		return ""
	}
	return u.Key
}
