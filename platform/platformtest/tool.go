package platformtest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform/httpx"
)

// Tool is a server a test runs from a binary that a .ci script builds (the
// test image registry, ACME CA, DNS server).
type Tool struct {
	Name    string // the helper package, in failures: "registrytest"
	What    string // what it is, in skips: "an image registry (CNCF Distribution)"
	Env     string // names the binary: "KEELSON_TEST_REGISTRY"
	Require string // set to 1, a missing binary fails the test: "KEELSON_TEST_REQUIRE_REGISTRY"
	Script  string // builds the binary and prints its path: ".ci/registry.sh"
}

// RunTool starts tool for t with start, given the binary, and returns what
// start returns. Without the binary t skips (Skip), or fails when
// tool.Require is 1. start is tried three times, since a port picked free
// (FreePort) may be taken before the tool binds it; the last error fails t.
func RunTool[T any](t testing.TB, tool Tool, start func(bin string) (T, error)) T {
	t.Helper()
	bin := os.Getenv(tool.Env)
	if bin == "" {
		enable := fmt.Sprintf("export %s=$(bash %s)", tool.Env, tool.Script)
		if os.Getenv(tool.Require) == "1" {
			t.Fatalf("%s: %s is not set (%s=1); build it with `%s`", tool.Name, tool.Env, tool.Require, enable)
		}
		Skip(t, tool.What+": "+tool.Env+" is not set", enable)
	}
	var last error
	for range 3 {
		v, err := start(bin)
		if err == nil {
			return v
		}
		last = err
	}
	t.Fatalf("%s: %v", tool.Name, last)
	var zero T
	return zero
}

// FreePort is a port free for both TCP and UDP on loopback, just now, for a
// tool a test starts; picked as StablePort picks.
func FreePort() (int, error) {
	ports, err := FreePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// StablePort is a loopback TCP port free just now, for a server a test
// starts (and may kill and start again) that binds it later. It is picked
// below the kernel's ephemeral range when there is room (StablePorts): the
// kernel hands it to no ":0" listener and no outgoing connection of another
// test meanwhile, as it may a port the kernel picked for ":0" once closed.
func StablePort() (int, error) {
	l, err := listenStable()
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// listenStable listens on a free loopback TCP port in StablePorts, or on
// one the kernel picks when there is no room there.
func listenStable() (net.Listener, error) {
	if lo, hi := StablePorts(); lo > 0 {
		for range 64 {
			port := lo + rand.IntN(hi-lo+1)
			if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
				return l, nil
			}
		}
	}
	return net.Listen("tcp", "127.0.0.1:0")
}

// StablePorts is the range StablePort picks from: the 8,192 ports below the
// 8,192 just under the kernel's ephemeral range (ip_local_port_range; those
// are the process runtime's apps' ports), or 0, 0 when there is no room.
var StablePorts = sync.OnceValues(func() (lo, hi int) {
	eph, ok := httpx.EphemeralPortsStart()
	if !ok || eph-2*8192 < 10000 {
		return 0, 0
	}
	return eph - 2*8192, eph - 8192 - 1
})

// FreePorts are n different ports free for both TCP and UDP on loopback,
// just now, for the tools a test starts (Pebble, challtestsrv, a registry).
// They are picked as StablePort picks: a port the kernel picked for ":0" and
// that was closed again may go to another test's listener or connection
// before the tool binds it.
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for try := 0; len(ports) < n; try++ {
		if try == 64*n {
			return nil, errors.New("no loopback port free for both TCP and UDP found")
		}
		l, err := listenStable()
		if err != nil {
			return nil, err
		}
		defer l.Close() // each listener is held until all are picked, so they differ
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue // its UDP port is taken: another one
		}
		u.Close()
		ports = append(ports, port)
	}
	return ports, nil
}

// WaitReady is a ready function for StartTool: it polls ready every 50 ms
// until it returns true, and fails once the tool (name) exits or 20 s pass.
func WaitReady(name string, ready func() bool) func(exited <-chan error) error {
	return func(exited <-chan error) error {
		deadline := time.Now().Add(20 * time.Second)
		for {
			select {
			case err := <-exited:
				return fmt.Errorf("%s exited: %v", name, err)
			default:
			}
			if ready() {
				return nil
			}
			if time.Now().After(deadline) {
				return errors.New(name + " did not become ready within 20 s")
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
