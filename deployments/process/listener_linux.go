package process

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/keelson-dev/keelson/deployments/internal/supervise"
)

// Whose is the listener on an app's port? The app's port is a loopback port
// of the machine: another process (a second server, anything) can bind it
// between the pick and the app's listen, and would then answer the health
// check. Linux tells which socket listens where (/proc/net/tcp, tcp6: local
// address, state, inode) and which process holds which socket
// (/proc/<pid>/fd links "socket:[inode]"); the app's processes are its
// group's members (contain.go).

// ownListener returns nil when every socket a connection to 127.0.0.1:port
// can reach is held by a process of g; an error wrapping
// supervise.ErrForeignListener when one is held by none of them; any other
// error when it cannot tell (/proc unreadable, no socket listens any more, a
// process of the app whose descriptors cannot be read).
func ownListener(port int, g *group) error {
	inodes, err := loopbackListeners(port)
	if err != nil {
		return fmt.Errorf("reading the sockets listening on port %d: %w", port, err)
	}
	if len(inodes) == 0 {
		return fmt.Errorf("no socket listens on port %d", port)
	}
	held := make(map[uint64]bool, len(inodes))
	for _, inode := range inodes {
		held[inode] = false
	}
	var unreadable error
	for _, p := range g.members(allProcs()) {
		if err := markHeld(p.pid, held); err != nil && unreadable == nil {
			unreadable = err
		}
	}
	for _, inode := range inodes {
		switch {
		case held[inode]:
		case unreadable != nil:
			return fmt.Errorf("socket %d on port %d is held by no process of the app that could be read (%w)", inode, port, unreadable)
		default:
			return fmt.Errorf("%w: its socket %d on port %d is held by no process of the app", supervise.ErrForeignListener, inode, port)
		}
	}
	return nil
}

// markHeld sets held[inode] for each socket among held that process pid
// holds. A process that ended meanwhile holds none.
func markHeld(pid int, held map[uint64]bool) error {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd/"
	f, err := os.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("reading %s: %w", dir, err)
	}
	for _, name := range names {
		link, err := os.Readlink(dir + name)
		if errors.Is(err, fs.ErrNotExist) {
			continue // closed meanwhile
		}
		if err != nil {
			return err
		}
		text, ok := strings.CutPrefix(link, "socket:[")
		if !ok {
			continue
		}
		inode, err := strconv.ParseUint(strings.TrimSuffix(text, "]"), 10, 64)
		if _, wanted := held[inode]; err == nil && wanted {
			held[inode] = true
		}
	}
	return nil
}

// loopbackListeners returns the inodes of the TCP sockets listening where a
// connection to 127.0.0.1:port can land: on 127.0.0.1 or 0.0.0.0, or on ::
// or ::ffff:127.0.0.1 (whether a socket on :: is IPv6-only cannot be read
// there, so it counts).
//
// The tables are the calling thread's network's (/proc/thread-self/net), the
// one the health check dials in. /proc/net is the main thread's: a thread
// that entered another network namespace and ended locked (as a test's
// second Docker engine's listener does) leaves the main thread there for
// good, and its tables would show none of the app's sockets.
func loopbackListeners(port int) ([]uint64, error) {
	dir := "/proc/thread-self/net/"
	if _, err := os.Stat(dir); err != nil {
		dir = "/proc/self/net/" // a kernel older than 3.17
	}
	v4, err := listenersIn(dir+"tcp", port)
	if err != nil {
		return nil, err
	}
	v6, err := listenersIn(dir+"tcp6", port)
	if errors.Is(err, fs.ErrNotExist) {
		return v4, nil // a kernel without IPv6
	}
	if err != nil {
		return nil, err
	}
	return append(v4, v6...), nil
}

// listenersIn reads one of /proc/net/tcp and tcp6.
func listenersIn(path string, port int) ([]uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var inodes []uint64
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		inode, ok, err := parseListener(sc.Text(), port)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if ok {
			inodes = append(inodes, inode)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return inodes, nil
}

// parseListener reads one line of /proc/net/tcp or tcp6:
//
//	sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode ...
//	0: 0100007F:5DC0 00000000:0000 0A 00000000:00000000 00:00000000 00000000 1000 0 123456 ...
//
// ok is whether it is a socket listening (st 0A) on port where a connection
// to 127.0.0.1 can land; its inode then.
func parseListener(line string, port int) (inode uint64, ok bool, err error) {
	f := strings.Fields(line)
	if len(f) < 10 {
		return 0, false, fmt.Errorf("unexpected line %q", line)
	}
	host, portHex, found := strings.Cut(f[1], ":")
	p, perr := strconv.ParseUint(portHex, 16, 16)
	if !found || perr != nil {
		return 0, false, fmt.Errorf("unexpected local address %q", f[1])
	}
	if f[3] != "0A" || int(p) != port {
		return 0, false, nil
	}
	addr, aok := procAddr(host)
	if !aok {
		return 0, false, fmt.Errorf("unexpected local address %q", f[1])
	}
	if a := addr.Unmap(); !a.IsUnspecified() && a != netip.AddrFrom4([4]byte{127, 0, 0, 1}) {
		return 0, false, nil
	}
	if inode, err = strconv.ParseUint(f[9], 10, 64); err != nil || inode == 0 {
		return 0, false, fmt.Errorf("unexpected inode %q", f[9])
	}
	return inode, true, nil
}

// procAddr decodes an address of /proc/net/tcp (8 hex digits) or tcp6 (32):
// the kernel prints each 32-bit word of the address, which is in network
// order, as a number in the machine's own byte order.
func procAddr(s string) (netip.Addr, bool) {
	raw, err := hex.DecodeString(s)
	if err != nil || len(raw) != 4 && len(raw) != 16 {
		return netip.Addr{}, false
	}
	b := make([]byte, len(raw))
	for i := 0; i < len(raw); i += 4 {
		binary.NativeEndian.PutUint32(b[i:], binary.BigEndian.Uint32(raw[i:]))
	}
	return netip.AddrFromSlice(b)
}
