package ingress

import (
	"net/http"
	"strings"
)

// scopeCookies keeps an app's cookies to itself: a Set-Cookie whose Domain
// attribute is the apps domain, or a domain above it, would reach every
// other tenant's app (and the hosts beside them, such as the API's), which
// could then read it or have its own overwritten (cookie tossing). Such a
// Domain attribute is removed, so the cookie stays host-only: set, and sent
// back, for the app's own host alone. A Domain of the app's own host or
// below, or of a custom domain's zone, is left as the app wrote it.
func (r *Router) scopeCookies(h http.Header) {
	vv := h["Set-Cookie"] // the app's response's own header, parsed here
	for i, v := range vv {
		if s, ok := r.scopedCookie(v); ok {
			vv[i] = s
		}
	}
}

// scopedCookie returns the Set-Cookie value v without its Domain attributes
// that reach beyond an app (shared), and whether it removed any.
func (r *Router) scopedCookie(v string) (string, bool) {
	lower := strings.ToLower(v)
	if !strings.Contains(lower, "domain") {
		return v, false
	}
	parts := strings.Split(v, ";")
	kept := parts[:1] // name=value
	for _, p := range parts[1:] {
		k, val, _ := strings.Cut(strings.TrimSpace(p), "=")
		if strings.EqualFold(strings.TrimSpace(k), "domain") && r.shared(val) {
			continue
		}
		kept = append(kept, p)
	}
	if len(kept) == len(parts) {
		return v, false
	}
	return strings.Join(kept, ";"), true
}

// shared reports whether a cookie of domain d would reach apps of other
// tenants: d is the apps domain or one of its parents.
func (r *Router) shared(d string) bool {
	d = strings.TrimSuffix(strings.TrimPrefix(strings.ToLower(strings.TrimSpace(d)), "."), ".")
	apps := r.cfg.AppsDomain
	return d != "" && (d == apps || strings.HasSuffix(apps, "."+d))
}
