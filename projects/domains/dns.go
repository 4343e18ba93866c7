package domains

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
)

// newResolver asks servers (host:port) in turn, or the system's resolver
// when there are none.
func newResolver(servers []string) *net.Resolver {
	if len(servers) == 0 {
		return net.DefaultResolver
	}
	var n atomic.Uint32
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		addr := servers[int(n.Add(1)-1)%len(servers)]
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
}

// finding is what one check of a domain's records found.
type finding struct {
	ok bool
	// problem says what is wrong and what to do (empty when ok).
	problem string
	// transient: a lookup failed (timeout, server failure) and says nothing
	// about the records; nothing is changed on its account.
	transient bool
}

// transient reports whether a lookup error says nothing about the records.
// "No such host", and answers without the record, are definite.
func transient(err error) bool {
	if err == nil {
		return false
	}
	var de *net.DNSError
	if errors.As(err, &de) {
		return (de.IsTimeout || de.IsTemporary) && !de.IsNotFound
	}
	return true
}

func lookupFailed(what string, err error) finding {
	reason := "no answer"
	var de *net.DNSError
	if errors.As(err, &de) {
		reason = de.Err // the resolver's words, without its address
	} else if errors.Is(err, context.DeadlineExceeded) {
		reason = "timed out"
	}
	return finding{transient: true, problem: fmt.Sprintf("could not look up %s (%s); Keelson will try again", what, reason)}
}

func trimDot(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }

// checkOwnership looks for token in the TXT records at _keelson-challenge.<h>.
func (s *Service) checkOwnership(ctx context.Context, h, token string) finding {
	name := challengeName(h)
	vals, err := s.resolver.LookupTXT(ctx, name)
	if transient(err) {
		return lookupFailed("the TXT record at "+name, err)
	}
	if slices.ContainsFunc(vals, func(v string) bool { return strings.TrimSpace(v) == token }) {
		return finding{ok: true}
	}
	if len(vals) == 0 {
		return finding{problem: fmt.Sprintf("no TXT record at %s; create it with value %s", name, token)}
	}
	return finding{problem: fmt.Sprintf("the TXT record at %s holds %s, not %s; add a TXT record there with value %s",
		name, quoteSome(vals), token, token)}
}

// quoteSome quotes the first few of vals, shortened, for a message.
func quoteSome(vals []string) string {
	var q []string
	for i, v := range vals {
		if i == 3 {
			q = append(q, fmt.Sprintf("and %d more", len(vals)-3))
			break
		}
		if len(v) > 80 {
			v = v[:80] + "..."
		}
		q = append(q, fmt.Sprintf("%q", v))
	}
	return strings.Join(q, ", ")
}

// checkRouting reports whether h's traffic reaches Keelson: a CNAME (chain)
// ending at the app's host (or where the app's host itself points), or
// addresses that are all the ingress's (Deps.IngressIPs, or the app host's).
func (s *Service) checkRouting(ctx context.Context, h, slug string) finding {
	target := s.appHost(slug)
	cname, cerr := s.resolver.LookupCNAME(ctx, h)
	canon := trimDot(cname)
	hasCNAME := cerr == nil && canon != "" && canon != h
	if hasCNAME && canon == target {
		return finding{ok: true}
	}
	if hasCNAME {
		if tc, err := s.resolver.LookupCNAME(ctx, target); err == nil && trimDot(tc) == canon {
			return finding{ok: true}
		}
	}
	addrs, aerr := s.resolver.LookupNetIP(ctx, "ip", h)
	allowed := s.ingressAddrs(ctx, target)
	if aerr == nil && len(addrs) > 0 && len(allowed) > 0 &&
		!slices.ContainsFunc(addrs, func(a netip.Addr) bool { return !slices.Contains(allowed, a.Unmap()) }) {
		return finding{ok: true}
	}
	if transient(cerr) {
		return lookupFailed("the records of "+h, cerr)
	}
	if transient(aerr) && !hasCNAME {
		return lookupFailed("the addresses of "+h, aerr)
	}
	return finding{problem: s.routingProblem(h, target, canon, hasCNAME, addrs)}
}

// ingressAddrs are the addresses a routed domain may resolve to: the
// configured ingress addresses and the app host's own.
func (s *Service) ingressAddrs(ctx context.Context, target string) []netip.Addr {
	out := slices.Clone(s.d.IngressIPs)
	if as, err := s.resolver.LookupNetIP(ctx, "ip", target); err == nil {
		for _, a := range as {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// routingProblem says why h does not route to target, and what to create.
func (s *Service) routingProblem(h, target, canon string, hasCNAME bool, addrs []netip.Addr) string {
	fix := fmt.Sprintf("create a CNAME record at %s with value %s", h, target)
	if isApex(h) {
		fix = "point it at Keelson with the routing records listed for this domain"
	}
	switch {
	case hasCNAME:
		return fmt.Sprintf("CNAME at %s points at %s, not %s; change it to %s", h, canon, target, target)
	case len(addrs) > 0:
		shown := make([]string, 0, len(addrs))
		for i, a := range addrs {
			if i == 4 {
				shown = append(shown, "...")
				break
			}
			shown = append(shown, a.String())
		}
		return fmt.Sprintf("%s resolves to %s, which is not Keelson's ingress; %s", h, strings.Join(shown, ", "), fix)
	case isApex(h):
		return fmt.Sprintf("no A/AAAA record at %s; %s", h, fix)
	}
	return fmt.Sprintf("no CNAME record at %s; %s", h, fix)
}
