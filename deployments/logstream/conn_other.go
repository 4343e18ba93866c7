//go:build !linux

package logstream

import (
	"net"
	"syscall"
	"time"
)

// setUserTimeout is Linux only (TCP_USER_TIMEOUT); elsewhere a vanished
// client is noticed when a write times out.
func setUserTimeout(net.Conn, time.Duration) {}

// rawConn: direct writes (direct.go) are Linux only.
func rawConn(net.Conn) syscall.RawConn { return nil }

func (s *stream) tryWrite([]byte) int { return 0 }
