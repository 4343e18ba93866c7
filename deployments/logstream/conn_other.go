//go:build !linux

package logstream

import (
	"net"
	"time"
)

// setUserTimeout is Linux only (TCP_USER_TIMEOUT); elsewhere a vanished
// client is noticed when a write times out.
func setUserTimeout(net.Conn, time.Duration) {}
