package ingress

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
)

// forwardHeader marks a request one ingress forwards to the ingress of the
// host that runs the app. Its value is a key every ingress of the
// installation derives from the same secret (Config.ForwardKey), so a
// client cannot pass for an ingress: a marked request keeps the client's
// X-Forwarded-* headers as the first ingress set them, and is never
// forwarded again (no loops). The header never reaches an app.
const forwardHeader = "Keelson-Ingress-Forward"

// remoteTable maps each slug another host serves to that host's ingress.
type remoteTable struct {
	routes atomic.Pointer[map[string]string] // slug -> host:port; replaced, never mutated
}

// SetRemote replaces the table of the slugs other hosts serve: slug -> the
// address (host:port) of the ingress of the host running its LIVE
// deployment. A request for a slug this ingress does not serve itself goes
// there. Entries for slugs it serves locally are ignored (the local route
// wins), and so is an address that is this ingress's own (Config.Self).
func (r *Router) SetRemote(routes map[string]string) error {
	if len(routes) > 0 && len(r.cfg.ForwardKey) == 0 {
		return errors.New("ingress: SetRemote needs Config.ForwardKey")
	}
	m := make(map[string]string, len(routes))
	for slug, addr := range routes {
		if addr != "" && addr != r.cfg.Self {
			m[strings.ToLower(slug)] = addr
		}
	}
	r.remote.routes.Store(&m)
	return nil
}

// Served reports whether host (as a request names it) leads to an app:
// its slug is routed here, or on another host (SetRemote).
func (r *Router) Served(host string) bool {
	slug := r.slugOf(host)
	if slug == "" {
		return false
	}
	if _, ok := (*r.table.Load())[slug]; ok {
		return true
	}
	_, ok := r.remoteAddr(slug)
	return ok
}

// remoteAddr returns the address of the ingress serving slug on another
// host (SetRemote).
func (r *Router) remoteAddr(slug string) (string, bool) {
	m := r.remote.routes.Load()
	if m == nil {
		return "", false
	}
	addr, ok := (*m)[slug]
	return addr, ok
}

// forwardToken is the value of forwardHeader for key.
func forwardToken(key []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte("keelson ingress forward v1"))
	return hex.EncodeToString(mac.Sum(nil))
}

// Forwarded reports whether req came from another ingress of the
// installation (which answers the client, and redirected or not already).
func (r *Router) Forwarded(req *http.Request) bool { return r.forwarded(req) }

// forwarded reports whether req came from another ingress of the installation.
func (r *Router) forwarded(req *http.Request) bool {
	v := req.Header.Get(forwardHeader)
	return v != "" && r.token != "" && hmac.Equal([]byte(v), []byte(r.token))
}

// remoteOf returns the ingress address serving slug elsewhere, unless req
// was itself forwarded (one hop only).
func (r *Router) remoteOf(slug string, req *http.Request) (string, bool) {
	if slug == "" || r.forwarded(req) {
		return "", false
	}
	return r.remoteAddr(slug)
}

type remoteKey struct{}

// newForwarder is the proxy to other hosts' ingresses: the public host, the
// client's X-Forwarded-* headers and the mark; bodies are not metered here
// (the serving host's ingress meters them).
func (r *Router) newForwarder() *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Transport: r.tr,
		Rewrite: func(pr *httputil.ProxyRequest) {
			addr := pr.In.Context().Value(remoteKey{}).(string)
			pr.SetURL(&url.URL{Scheme: "http", Host: addr})
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
			pr.Out.Header.Set(forwardHeader, r.token)
		},
		FlushInterval: r.proxy.FlushInterval,
		ErrorHandler: func(w http.ResponseWriter, req *http.Request, err error) {
			addr := req.Context().Value(remoteKey{}).(string)
			r.cfg.Logger.Warn("ingress: forwarding to another host failed", "host", req.Host, "ingress", addr, "err", err)
			plain(w, http.StatusBadGateway, fmt.Sprintf("the host serving %q is not answering\n", req.Host))
		},
		ErrorLog: r.proxy.ErrorLog,
	}
}

// setForwarded copies a forwarded request's X-Forwarded-* headers (set by
// the first ingress) to the app, or sets them from the client; the mark
// never reaches the app.
func (r *Router) setForwarded(pr *httputil.ProxyRequest) {
	pr.Out.Header.Del(forwardHeader)
	for k := range pr.Out.Header {
		if underscored(k) {
			delete(pr.Out.Header, k)
		}
	}
	if !r.forwarded(pr.In) {
		pr.SetXForwarded()
		return
	}
	for _, h := range []string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
		if v := pr.In.Header.Values(h); len(v) > 0 {
			pr.Out.Header[h] = v
		}
	}
}
