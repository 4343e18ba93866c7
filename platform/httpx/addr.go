package httpx

import (
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
)

// AddrKey names a client for every per-address limit (connections, body
// memory, rate limits): an IPv4 address as itself, an IPv6 address by its
// /64, the block one subscriber is usually given, so a client cannot get a
// fresh share for each of its 2^64 addresses. An invalid address is "".
func AddrKey(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	a = a.Unmap()
	if a.Is4() {
		return a.String()
	}
	return netip.PrefixFrom(a, 64).Masked().String()
}

// PeerAddr is the address of a host:port (a request's RemoteAddr, a
// connection's remote address); invalid when it is none.
func PeerAddr(hostport string) netip.Addr {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	a, _ := netip.ParseAddr(host)
	return a.Unmap()
}

// ClientAddr picks the client address of a request from its TCP peer
// (remoteAddr, host:port) and X-Forwarded-For (xff, comma-separated; several
// headers joined with commas), believing xff only as far as it was written by
// trusted proxies: the client is the rightmost address that is not a trusted
// proxy (what a client writes to the left of it is never reached). A peer
// that is not an address (a test's pipe) is answered as given.
func ClientAddr(remoteAddr, xff string, trusted []netip.Prefix) string {
	peer := PeerAddr(remoteAddr)
	if !peer.IsValid() {
		host := remoteAddr
		if h, _, err := net.SplitHostPort(remoteAddr); err == nil {
			host = h
		}
		if host == "" {
			return "unknown"
		}
		return host
	}
	return clientOf(peer, xff, trusted).String()
}

func clientOf(peer netip.Addr, xff string, trusted []netip.Prefix) netip.Addr {
	client := peer
	if !Trusted(peer, trusted) || xff == "" {
		return client
	}
	hops := strings.Split(xff, ",")
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			break // not written by a proxy of ours: the last address we trust stands
		}
		client = a.Unmap()
		if !Trusted(client, trusted) {
			break
		}
	}
	return client
}

// Trusted reports whether a is in one of the prefixes.
func Trusted(a netip.Addr, prefixes []netip.Prefix) bool {
	for _, p := range prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ForwardedFor joins every X-Forwarded-For line of a request, in order (a
// proxy may add its own line after the client's instead of appending to it),
// for ClientAddr; each walks the headers, as huma.Context.EachHeader does.
func ForwardedFor(each func(func(name, value string))) string {
	var xff []string
	each(func(name, value string) {
		if strings.EqualFold(name, "X-Forwarded-For") {
			xff = append(xff, value)
		}
	})
	return strings.Join(xff, ",")
}

// RequestClient is the client address of r (see ClientAddr): every
// X-Forwarded-For line, in order, is read (a proxy may add its own line after
// the client's instead of appending to it).
func RequestClient(r *http.Request, trusted []netip.Prefix) netip.Addr {
	peer := PeerAddr(r.RemoteAddr)
	if !peer.IsValid() {
		return peer
	}
	return clientOf(peer, strings.Join(r.Header.Values("X-Forwarded-For"), ","), trusted)
}

// EphemeralPortsStart is the first port of the kernel's ephemeral range
// (net.ipv4.ip_local_port_range, 32768 by default on Linux), which the
// kernel hands out for ":0" and outgoing connections; ok is false where it
// cannot be read. Ports picked below it are not taken by those meanwhile.
var EphemeralPortsStart = sync.OnceValues(func() (start int, ok bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, false
	}
	start, err = strconv.Atoi(f[0])
	return start, err == nil
})
