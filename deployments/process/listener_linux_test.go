package process

import (
	"net"
	"os"
	"os/exec"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The sockets a connection to 127.0.0.1:port can reach are read from
// /proc/net/tcp and tcp6 with their inodes, and found among the descriptors
// of the process that holds them. Real sockets of the test process.
func TestLoopbackListenersAreFoundWithTheirHolder(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	// A connection from the port's listener is not a listener.
	conn, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer conn.Close()

	inodes, err := loopbackListeners(port)
	require.NoError(t, err)
	require.Len(t, inodes, 1, "the one listener on 127.0.0.1:%d", port)
	held := map[uint64]bool{inodes[0]: false}
	require.NoError(t, markHeld(os.Getpid(), held))
	assert.True(t, held[inodes[0]], "the test process holds its listener's socket")
}

// A dual-stack listener on :: takes connections to 127.0.0.1 too: it counts.
func TestDualStackListenerIsCounted(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "[::]:0")
	if err != nil {
		t.Skipf("no IPv6 here: %v", err)
	}
	defer ln.Close()
	inodes, err := loopbackListeners(ln.Addr().(*net.TCPAddr).Port)
	require.NoError(t, err)
	assert.Len(t, inodes, 1, "the listener on [::]")
}

// A listener on another loopback address takes no connection to 127.0.0.1.
func TestListenerOnAnotherAddressIsNotCounted(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.2:0") // Linux routes all of 127.0.0.0/8 to lo
	require.NoError(t, err)
	defer ln.Close()
	inodes, err := loopbackListeners(ln.Addr().(*net.TCPAddr).Port)
	require.NoError(t, err)
	assert.Empty(t, inodes)
}

// leaderNetNSVar runs this package's tests with the main thread in a
// network namespace of its own (TestMain), as a test binary that started a
// second Docker engine may have it.
const leaderNetNSVar = "KEELSON_TEST_LEADER_NETNS"

func init() {
	if os.Getenv(leaderNetNSVar) != "" {
		runtime.LockOSThread() // TestMain runs on the main thread, and only it does
	}
}

// enterOwnNetNS moves the main thread (TestMain's, locked by init) into a
// new network namespace when leaderNetNSVar asks; the threads the tests run
// on stay where they were.
func enterOwnNetNS() {
	if os.Getenv(leaderNetNSVar) == "" {
		return
	}
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		os.Stderr.WriteString("unshare: " + err.Error() + "\n")
		os.Exit(3)
	}
}

// The main thread in another network namespace (a thread that entered one
// and ended locked leaves it there: the examples' second Docker engine
// does) changes /proc/net, which is the main thread's: the app's listener
// must still be found in the tables of the network the check dials in.
func TestListenersFoundWhileTheMainThreadIsInAnotherNetNS(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestLoopbackListenersAreFoundWithTheirHolder$", "-test.count", "1", "-test.v")
	cmd.Env = append(os.Environ(), leaderNetNSVar+"=1")
	out, err := cmd.CombinedOutput()
	if exit, ok := err.(*exec.ExitError); ok && exit.ExitCode() == 3 {
		t.Skipf("no network namespace of its own here: %s", out)
	}
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "--- PASS: TestLoopbackListenersAreFoundWithTheirHolder")
}
