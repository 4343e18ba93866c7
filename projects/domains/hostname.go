package domains

import (
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"golang.org/x/net/idna"
	"golang.org/x/net/publicsuffix"

	"github.com/keelson-dev/keelson/platform"
)

// maxHostnameInput bounds what Normalize reads (a host name is at most 253
// octets; a Unicode one may be longer before its conversion to ASCII).
const maxHostnameInput = 1024

// Normalize turns what a user typed into the hostname Keelson stores: lower
// case, IDNA (Punycode) for international names, no trailing dot, no port.
// It refuses IP literals, single-label names and names that are not valid
// host names, with a 400 naming the rule. It does not apply the server's own
// rules (the apps domain, the API's host): see Service.checkHostname.
func Normalize(raw string) (string, error) {
	h := strings.TrimSpace(raw)
	if h == "" {
		return "", platform.Invalid("hostname: required, e.g. www.example.com")
	}
	if len(h) > maxHostnameInput {
		return "", platform.Invalid("hostname: too long (a host name is at most 253 characters)")
	}
	if strings.Contains(h, "://") || strings.ContainsAny(h, "/?#@ ") {
		return "", platform.Invalid("hostname: give the host name only, e.g. www.example.com (no scheme, path, user or spaces)")
	}
	if strings.HasPrefix(h, "[") || strings.Count(h, ":") > 1 {
		return "", ipRefusal()
	}
	if name, port, ok := strings.Cut(h, ":"); ok {
		if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			return "", platform.Invalidf("hostname: %q is not a valid port", port)
		}
		h = name
	}
	h = strings.TrimSuffix(h, ".")
	if _, err := netip.ParseAddr(h); err == nil {
		return "", ipRefusal()
	}
	ascii, err := idna.Lookup.ToASCII(h)
	if err != nil {
		return "", platform.Invalidf("hostname: %q is not a valid domain name (%v)", raw, idnaReason(err))
	}
	ascii = strings.ToLower(ascii)
	if err := checkLabels(ascii); err != nil {
		return "", err
	}
	return ascii, nil
}

func ipRefusal() error {
	return platform.Invalid("hostname: IP addresses are not accepted; give a domain name, e.g. www.example.com")
}

// idnaReason shortens x/net/idna's error ("idna: invalid label ...").
func idnaReason(err error) string { return strings.TrimPrefix(err.Error(), "idna: ") }

// checkLabels applies DNS's length rules and refuses single-label names and
// names whose last label is numeric (which resolvers read as addresses).
func checkLabels(h string) error {
	if len(h) > 253 {
		return platform.Invalid("hostname: too long (a host name is at most 253 characters)")
	}
	labels := strings.Split(h, ".")
	if len(labels) < 2 {
		return platform.Invalidf("hostname: single-label names such as %q are not accepted; give a fully qualified domain name, e.g. www.example.com", h)
	}
	for _, l := range labels {
		if l == "" {
			return platform.Invalidf("hostname: %q has an empty label (two dots in a row, or a leading dot)", h)
		}
		if len(l) > 63 {
			return platform.Invalidf("hostname: the label %q is longer than 63 characters", l)
		}
		if strings.HasPrefix(l, "-") || strings.HasSuffix(l, "-") {
			return platform.Invalidf("hostname: the label %q starts or ends with a hyphen", l)
		}
	}
	if _, err := strconv.Atoi(labels[len(labels)-1]); err == nil {
		return platform.Invalidf("hostname: %q ends in a numeric label; IP addresses are not accepted", h)
	}
	return nil
}

// Display is the Unicode form of an IDNA hostname, for people ("" when it is
// the same as h).
func Display(h string) string {
	u, err := idna.Display.ToUnicode(h)
	if err != nil || u == h {
		return ""
	}
	return u
}

// isApex reports whether h is a registered domain itself (example.com,
// example.co.uk), which DNS does not let hold a CNAME.
func isApex(h string) bool {
	reg, err := publicsuffix.EffectiveTLDPlusOne(h)
	return err == nil && reg == h
}

// isPublicSuffix reports whether h is a suffix under which anyone registers
// names (com, co.uk, github.io), per the Public Suffix List.
func isPublicSuffix(h string) bool {
	ps, _ := publicsuffix.PublicSuffix(h)
	return ps == h && strings.Contains(h, ".")
}

// hostOf is the lower-case host of an http(s) URL ("" when none).
func hostOf(raw string) string {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
}

// checkHostname applies the server's rules to a normalised hostname: not the
// apps domain or a name under it, not the API's or the frontend's host, not a
// public suffix.
func (s *Service) checkHostname(h string) error {
	if apps := s.d.AppsDomain; h == apps || strings.HasSuffix(h, "."+apps) {
		return platform.Invalidf("hostname: %s is under the apps domain %s, which Keelson serves itself (every project already answers at <slug>.%s); add a domain of your own", h, apps, apps)
	}
	for _, r := range []struct{ host, what string }{
		{hostOf(s.d.PublicURL), "Keelson's API"},
		{hostOf(s.d.FrontendURL), "Keelson's web app"},
	} {
		if r.host != "" && h == r.host {
			return platform.Invalidf("hostname: %s is the host of %s and cannot be a project's domain", h, r.what)
		}
	}
	if isPublicSuffix(h) {
		return platform.Invalidf("hostname: %s is a public suffix (names are registered under it); add a domain registered under it", h)
	}
	return nil
}

// challengeName is where the ownership TXT record of h lives.
func challengeName(h string) string { return ChallengePrefix + h }

// ChallengePrefix starts the name of every ownership TXT record.
const ChallengePrefix = "_keelson-challenge."

// appHost is the name a custom domain's CNAME points at.
func (s *Service) appHost(slug string) string { return slug + "." + s.d.AppsDomain }
