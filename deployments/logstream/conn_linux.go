package logstream

import (
	"net"
	"syscall"
	"time"
)

// tcpUserTimeout is TCP_USER_TIMEOUT (linux/tcp.h; not in package syscall).
const tcpUserTimeout = 0x12

// setUserTimeout makes the kernel drop the connection when data sent on it
// (a heartbeat at the latest) stays unacknowledged for d: a client that
// vanished without closing (a crashed machine, a cut network) fails the
// stream's reader and ends it, instead of after TCP's 15 minutes of
// retransmissions. Best effort: a connection without a socket is left alone.
func setUserTimeout(conn net.Conn, d time.Duration) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	_ = raw.Control(func(fd uintptr) {
		_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout, int(d.Milliseconds()))
	})
}

// rawConn is the connection's socket for direct writes (direct.go); nil
// when it has none.
func rawConn(conn net.Conn) syscall.RawConn {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return raw
}

// tryWrite writes b to the stream's socket once, without waiting for room,
// and answers how many bytes it took (0 on any error).
func (s *stream) tryWrite(b []byte) int {
	n := 0
	err := s.raw.Write(func(fd uintptr) bool {
		for {
			var werr error
			n, werr = syscall.Write(int(fd), b)
			if werr != syscall.EINTR {
				return true
			}
		}
	})
	if err != nil {
		return 0
	}
	return max(n, 0)
}
