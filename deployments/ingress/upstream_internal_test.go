package ingress

import (
	"bufio"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// alive tells an open idle connection from one the app closed or wrote to.
func TestAliveSeesTheAppsClose(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	pair := func() (*upConn, net.Conn) {
		c, err := net.Dial("tcp", l.Addr().String())
		require.NoError(t, err)
		s, err := l.Accept()
		require.NoError(t, err)
		return &upConn{conn: c, br: bufio.NewReader(c)}, s
	}
	open, s1 := pair()
	defer open.conn.Close()
	defer s1.Close()
	assert.True(t, alive(open))

	closed, s2 := pair()
	defer closed.conn.Close()
	require.NoError(t, s2.Close())
	assert.Eventually(t, func() bool { return !alive(closed) }, 5e9, 1e6) // the FIN arrives asynchronously

	stray, s3 := pair()
	defer stray.conn.Close()
	defer s3.Close()
	_, err = s3.Write([]byte("x"))
	require.NoError(t, err)
	assert.Eventually(t, func() bool { return !alive(stray) }, 5e9, 1e6)
}
