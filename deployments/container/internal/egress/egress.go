package egress

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/keelson-dev/keelson/deployments/internal/gitclone"
)

// Config is what tenant code (RUN steps of builds, running apps) may reach.
// By default the public internet and nothing else: Keelson keeps iptables
// rules for its own bridges (apps' and builds') that refuse new connections
// to this host (any of its addresses, the bridges' gateways), to loopback,
// private (RFC 1918), CGNAT, link-local (cloud metadata), multicast and
// reserved addresses, the host's own subnets and all IPv6, and let replies
// through. Containers on one bridge cannot talk to each other either
// (inter-container traffic is off). The rules sit in chains of Keelson's own
// (KEELSON-FWD-<id>, KEELSON-IN-<id>) jumped to from the engine's DOCKER-USER
// chain and from INPUT, installed as the runtime starts and removed by its
// Close.
type Config struct {
	// Open leaves tenant code's traffic alone: it reaches whatever the host
	// reaches (KEELSON_EGRESS=open). Only for single-tenant use.
	Open bool
	// AllowCIDRs are private networks tenant code may reach all the same
	// (a database on the LAN, a package mirror; KEELSON_EGRESS_ALLOW_CIDRS).
	AllowCIDRs []netip.Prefix
	// IPTables is the iptables command. Default: whichever of iptables,
	// iptables-nft and iptables-legacy holds the engine's DOCKER-USER chain.
	IPTables string
}

// blocked4 are the IPv4 ranges that are not the public internet.
var blocked4 = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
}

// Public reports whether a is an address tenant code may reach by
// default: public unicast, none of blocked4.
func Public(a netip.Addr) bool {
	a = a.Unmap()
	if !gitclone.PublicAddr(a) {
		return false
	}
	for _, p := range blocked4 {
		if p.Contains(a) {
			return false
		}
	}
	return !a.Is6() || !netip.MustParsePrefix("fc00::/7").Contains(a)
}

// Firewall is the rules of one instance's bridges.
type Firewall struct {
	ipt, ip6t string // commands; ip6t "" when the host has no IPv6
	iface     string // iptables interface pattern of the bridges ("kls<id>+")
	fwd, in   string // chain names
	allow     []netip.Prefix
}

// BridgeID is the short id in the bridge and chain names of an instance
// (interface names hold 15 bytes, chain names 28).
func BridgeID(instance string) string {
	sum := sha256.Sum256([]byte(instance))
	return hex.EncodeToString(sum[:4])
}

func AppBridge(instance string) string   { return "kls" + BridgeID(instance) + "a" }
func BuildBridge(instance string) string { return "kls" + BridgeID(instance) + "b" }

// OpenHint is how an operator accepts open egress instead.
const OpenHint = "run Keelson as root on the engine's host with iptables, or set KEELSON_EGRESS=open to let builds and apps reach the host's networks (single-tenant only)"

// New finds the iptables the engine uses; it changes nothing.
func New(ctx context.Context, instance string, e Config) (*Firewall, error) {
	id := BridgeID(instance)
	f := &Firewall{iface: "kls" + id + "+", fwd: "KEELSON-FWD-" + id, in: "KEELSON-IN-" + id, allow: e.AllowCIDRs}
	cands := []string{"iptables", "iptables-nft", "iptables-legacy"}
	if e.IPTables != "" {
		cands = []string{e.IPTables}
	}
	var tried []string
	for _, c := range cands {
		path, err := exec.LookPath(c)
		if err != nil {
			tried = append(tried, c+": not found")
			continue
		}
		out, err := run(ctx, path, "-S", "DOCKER-USER")
		if err != nil {
			tried = append(tried, c+": "+out)
			continue
		}
		f.ipt = path
		break
	}
	if f.ipt == "" {
		return nil, fmt.Errorf("no iptables holds the engine's DOCKER-USER chain (%s); the engine must run on this host with its iptables rules on", strings.Join(tried, "; "))
	}
	if _, err := os.Stat("/proc/net/if_inet6"); err == nil {
		six := strings.Replace(f.ipt, "iptables", "ip6tables", 1)
		if out, err := run(ctx, six, "-S", "INPUT"); err != nil {
			return nil, fmt.Errorf("the host has IPv6 but %s does not work: %s", six, out)
		}
		f.ip6t = six
	}
	return f, nil
}

func run(ctx context.Context, cmd string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, cmd, append([]string{"-w"}, args...)...)
	c.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}
	out, err := c.CombinedOutput()
	text := strings.TrimSpace(string(out))
	// Say nothing about the other backend's tables.
	var keep []string
	for _, l := range strings.Split(text, "\n") {
		if !strings.HasPrefix(l, "# Warning: ") {
			keep = append(keep, l)
		}
	}
	text = strings.Join(keep, "\n")
	if err != nil && text == "" {
		text = err.Error()
	}
	return text, err
}

// rules are the rules of the forward and input chains of one family (IPv6
// when six), as iptables -S prints them.
func (f *Firewall) rules(six bool) (fwd, in [][]string) {
	est := []string{"-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "RETURN"}
	reject := []string{"-j", "REJECT", "--reject-with", "icmp-admin-prohibited"}
	if six {
		reject = []string{"-j", "REJECT", "--reject-with", "icmp6-adm-prohibited"}
	}
	fwd = append(fwd, est)
	in = append(in, est)
	for _, p := range f.allow {
		if p.Addr().Is6() == six {
			r := []string{"-d", p.Masked().String(), "-j", "RETURN"}
			fwd, in = append(fwd, r), append(in, r)
		}
	}
	if !six {
		// The engine forwards the containers' DNS queries to the host's
		// name servers from the containers' own network.
		for _, ns := range nameservers() {
			for _, proto := range []string{"udp", "tcp"} {
				fwd = append(fwd, []string{"-d", ns.String() + "/32", "-p", proto, "-m", proto, "--dport", "53", "-j", "RETURN"})
			}
		}
		for _, p := range blockedNets() {
			fwd = append(fwd, append([]string{"-d", p.String()}, reject...))
		}
	} else {
		fwd = append(fwd, reject) // the bridges have no IPv6: nothing goes out that way
	}
	in = append(in, reject) // the host itself, whichever of its addresses
	return fwd, in
}

// blockedNets are blocked4 and the host's own IPv4 subnets.
func blockedNets() []netip.Prefix {
	out := slices.Clone(blocked4)
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		p, err := netip.ParsePrefix(n.String())
		if err != nil || !p.Addr().Is4() {
			continue
		}
		p = p.Masked()
		covered := false
		for _, b := range out {
			if b.Bits() <= p.Bits() && b.Contains(p.Addr()) {
				covered = true
			}
		}
		if !covered {
			out = append(out, p)
		}
	}
	return out
}

// nameservers are the IPv4 name servers the engine hands containers'
// queries to (loopback ones it never uses).
func nameservers() []netip.Addr {
	var out []netip.Addr
	for _, file := range []string{"/etc/resolv.conf", "/run/systemd/resolve/resolv.conf"} {
		fh, err := os.Open(file)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) >= 2 && f[0] == "nameserver" {
				if a, err := netip.ParseAddr(f[1]); err == nil && a.Is4() && !a.IsLoopback() && !slices.Contains(out, a) {
					out = append(out, a)
				}
			}
		}
		fh.Close()
	}
	return out
}

// install puts the chains in place (unchanged when they already hold
// these rules) and the jumps to them.
func (f *Firewall) Install(ctx context.Context) error {
	for _, six := range []bool{false, true} {
		ipt := f.ipt
		if six {
			if ipt = f.ip6t; ipt == "" {
				continue
			}
		}
		fwd, in := f.rules(six)
		parent := "DOCKER-USER"
		if six {
			parent = "FORWARD" // the engine makes no IPv6 DOCKER-USER for bridges without IPv6
		}
		for _, c := range []struct {
			name, parent string
			rules        [][]string
		}{{f.fwd, parent, fwd}, {f.in, "INPUT", in}} {
			if err := f.chain(ctx, ipt, c.name, c.rules); err != nil {
				return err
			}
			jump := []string{c.parent, "-i", f.iface, "-j", c.name}
			if _, err := run(ctx, ipt, append([]string{"-C"}, jump...)...); err != nil {
				if out, err := run(ctx, ipt, append([]string{"-I", c.parent, "1"}, jump[1:]...)...); err != nil {
					return fmt.Errorf("%s -I %s: %s", ipt, c.parent, out)
				}
			}
		}
	}
	return nil
}

// chain makes name hold exactly rules.
func (f *Firewall) chain(ctx context.Context, ipt, name string, rules [][]string) error {
	want := []string{"-N " + name}
	for _, r := range rules {
		want = append(want, "-A "+name+" "+strings.Join(r, " "))
	}
	got, err := run(ctx, ipt, "-S", name)
	if err == nil && got == strings.Join(want, "\n") {
		return nil
	}
	if err != nil {
		if out, err := run(ctx, ipt, "-N", name); err != nil {
			return fmt.Errorf("%s -N %s: %s", ipt, name, out)
		}
	} else if out, err := run(ctx, ipt, "-F", name); err != nil {
		return fmt.Errorf("%s -F %s: %s", ipt, name, out)
	}
	for _, r := range rules {
		if out, err := run(ctx, ipt, append([]string{"-A", name}, r...)...); err != nil {
			return fmt.Errorf("%s -A %s %s: %s", ipt, name, strings.Join(r, " "), out)
		}
	}
	return nil
}

// Remove deletes the jumps and the chains.
func (f *Firewall) Remove(ctx context.Context) error {
	var errs []error
	for _, six := range []bool{false, true} {
		ipt, parent := f.ipt, "DOCKER-USER"
		if six {
			ipt, parent = f.ip6t, "FORWARD"
		}
		if ipt == "" {
			continue
		}
		for _, c := range [][2]string{{parent, f.fwd}, {"INPUT", f.in}} {
			for range 10 { // a jump inserted twice by a crashed start goes too
				if _, err := run(ctx, ipt, "-D", c[0], "-i", f.iface, "-j", c[1]); err != nil {
					break
				}
			}
			if _, err := run(ctx, ipt, "-S", c[1]); err != nil {
				continue
			}
			_, _ = run(ctx, ipt, "-F", c[1])
			if out, err := run(ctx, ipt, "-X", c[1]); err != nil {
				errs = append(errs, fmt.Errorf("%s -X %s: %s", ipt, c[1], out))
			}
		}
	}
	return errors.Join(errs...)
}

// Allowed reports whether a is in one of the allowed networks.
func (e Config) Allowed(a netip.Addr) bool {
	for _, p := range e.AllowCIDRs {
		if p.Contains(a.Unmap()) {
			return true
		}
	}
	return false
}
