package httpx

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// CORSConfig configures CORS.
type CORSConfig struct {
	// Origin is the one origin allowed to call the API from a browser, with
	// credentials: the frontend (KEELSON_FRONTEND_URL). A URL with a path is
	// reduced to its origin (scheme://host[:port]).
	Origin string
	// Methods allowed cross-origin. Default GET, POST, PUT, PATCH, DELETE.
	Methods []string
	// Headers a cross-origin request may send. Default Authorization,
	// Content-Type, Last-Event-ID (EventSource reconnects), X-Request-Id.
	Headers []string
	// ExposeHeaders the frontend may read. Default X-Next-Cursor (pagination),
	// X-Request-Id and Retry-After.
	ExposeHeaders []string
	// MaxAge is how long a browser may cache a preflight answer. Default 10 minutes.
	MaxAge time.Duration
}

// CORS lets the configured origin call next from a browser: its requests get
// Access-Control-Allow-Origin (that origin, never "*") and
// Access-Control-Allow-Credentials, and its preflights (OPTIONS with
// Access-Control-Request-Method) are answered 204 here. Any other origin gets
// no CORS headers at all, so the browser keeps the response from its page;
// its preflights are answered 204 without them. Responses vary on Origin.
func CORS(c CORSConfig, next http.Handler) http.Handler {
	origin := originOf(c.Origin)
	methods := c.Methods
	if len(methods) == 0 {
		methods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}
	}
	headers := c.Headers
	if len(headers) == 0 {
		headers = []string{"Authorization", "Content-Type", "Last-Event-ID", "X-Request-Id"}
	}
	expose := c.ExposeHeaders
	if len(expose) == 0 {
		expose = []string{"X-Next-Cursor", "X-Request-Id", "Retry-After"}
	}
	maxAge := c.MaxAge
	if maxAge <= 0 {
		maxAge = 10 * time.Minute
	}
	allowMethods := strings.Join(methods, ", ")
	allowHeaders := strings.Join(headers, ", ")
	exposeHeaders := strings.Join(expose, ", ")
	maxAgeSecs := strconv.Itoa(int(maxAge / time.Second))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Add("Vary", "Origin")
		reqOrigin := r.Header.Get("Origin")
		allowed := origin != "" && reqOrigin == origin
		if r.Method == http.MethodOptions && reqOrigin != "" && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Add("Vary", "Access-Control-Request-Method")
			h.Add("Vary", "Access-Control-Request-Headers")
			if allowed && slices.Contains(methods, r.Header.Get("Access-Control-Request-Method")) {
				h.Set("Access-Control-Allow-Origin", origin)
				h.Set("Access-Control-Allow-Credentials", "true")
				h.Set("Access-Control-Allow-Methods", allowMethods)
				h.Set("Access-Control-Allow-Headers", allowHeaders)
				h.Set("Access-Control-Max-Age", maxAgeSecs)
			}
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if allowed {
			h.Set("Access-Control-Allow-Origin", origin)
			h.Set("Access-Control-Allow-Credentials", "true")
			h.Set("Access-Control-Expose-Headers", exposeHeaders)
		}
		next.ServeHTTP(w, r)
	})
}

// originOf returns the origin of a URL as browsers serialize it (lower-case
// scheme and host, no default port, no path), or "" if it has none.
func originOf(raw string) string {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return ""
	}
	host := strings.ToLower(u.Hostname())
	port := u.Port()
	if (u.Scheme == "http" && port == "80") || (u.Scheme == "https" && port == "443") {
		port = ""
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port != "" {
		host += ":" + port
	}
	return strings.ToLower(u.Scheme) + "://" + host
}
