package platformtest

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestStablePortIsBelowTheEphemeralRange: the ports StablePort gives are
// free, and none is one the kernel hands out for ":0" or a connection, nor
// one of the process runtime's app ports just below that range.
func TestStablePortIsBelowTheEphemeralRange(t *testing.T) {
	t.Parallel()
	eph := ephemeralStart(t)
	for range 100 {
		port, err := StablePort()
		if err != nil {
			t.Fatal(err)
		}
		if port >= eph-8192 || port < 10000 {
			t.Fatalf("port %d: want one below %d (the apps' ports, then the ephemeral range from %d)", port, eph-8192, eph)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			t.Fatalf("port %d is not free: %v", port, err)
		}
		l.Close()
	}
}

// TestFreePortsAreBelowTheEphemeralRange: the ports a tool is given
// (Pebble's, challtestsrv's) differ, are free for TCP and UDP, and are
// picked where StablePort picks, not by the kernel for ":0".
func TestFreePortsAreBelowTheEphemeralRange(t *testing.T) {
	t.Parallel()
	eph := ephemeralStart(t)
	for range 50 {
		ports, err := FreePorts(2)
		if err != nil {
			t.Fatal(err)
		}
		if ports[0] == ports[1] {
			t.Fatalf("ports %v: want two different ones", ports)
		}
		for _, port := range ports {
			if port >= eph-8192 || port < 10000 {
				t.Fatalf("port %d: want one below %d (the apps' ports, then the ephemeral range from %d)", port, eph-8192, eph)
			}
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
			if err != nil {
				t.Fatalf("port %d is not free for TCP: %v", port, err)
			}
			l.Close()
			u, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(port))
			if err != nil {
				t.Fatalf("port %d is not free for UDP: %v", port, err)
			}
			u.Close()
		}
	}
}

// ephemeralStart is the first port of the kernel's ephemeral range; t skips
// when it is unknown or leaves no room for the stable ports below it.
func ephemeralStart(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Skip("no ip_local_port_range here")
	}
	eph, err := strconv.Atoi(strings.Fields(string(b))[0])
	if err != nil || eph-2*8192 < 10000 {
		t.Skip("no room below the ephemeral range here")
	}
	return eph
}

// TestFindLeaksWaitsForEndingGoroutines: a goroutine that ends a second
// after the check starts (slow to be scheduled on a loaded machine) is no
// leak; goleak.Find alone gives up after half a second.
func TestFindLeaksWaitsForEndingGoroutines(t *testing.T) {
	stop := make(chan struct{})
	go func() { <-stop; time.Sleep(time.Second) }()
	close(stop)
	if err := FindLeaks(); err != nil {
		t.Fatalf("FindLeaks: %v", err)
	}
}
