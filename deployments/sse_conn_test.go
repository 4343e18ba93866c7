package deployments_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/deployments/internal/deploytest"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/keelson-dev/keelson/platform/platformtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
)

// openGate counts the streams it admitted and not yet released.
type openGate struct {
	mu   sync.Mutex
	open int
}

func (g *openGate) Acquire(context.Context, string) (func(), error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open++
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.open--
		})
	}, nil
}

func (g *openGate) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open
}

// An HTTP/1.1 stream leaves net/http after its headers (Connection: close,
// a chunked body written on the connection itself). A client hanging up is
// noticed without waiting for a heartbeat (an hour here), and closing the
// service ends every such stream with a well-formed end of body; TestMain's
// goleak check sees no stream goroutine left.
func TestTakenOverStreamEndsOnHangUpAndOnClose(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		gate := &openGate{}
		e := newEnv(t, bdb, envOpts{heartbeat: time.Hour, streams: gate})
		alice := platform.NewID()
		hold := e.rt.HoldBuild("held")
		id := e.trigger(alice, e.project(alice, "held"))
		hold.WaitEntered(t)
		defer hold.Release(nil)

		a := e.openLogs("/deployments/"+id+"/logs", alice, nil)
		require.Equal(t, "ready", a.nextEvent().Type)
		assert.True(t, a.res.Close, "Connection: close: the connection is not handed back to net/http")
		assert.Equal(t, []string{"chunked"}, a.res.TransferEncoding)
		require.Equal(t, 1, gate.count())
		a.close()
		platformtest.Eventually(t, 10*time.Second, "the hung-up stream to release its slot", func() bool { return gate.count() == 0 })

		b := e.openLogs("/deployments/"+id+"/logs", alice, nil)
		require.Equal(t, "ready", b.nextEvent().Type)
		require.Equal(t, 1, gate.count())
		e.close() // the service closes, as at a server shutdown
		var err error
		for err == nil {
			_, err = b.rd.ReadString('\n')
		}
		assert.ErrorIs(t, err, io.EOF, "the body ends with its last chunk, not a cut connection")
		assert.Equal(t, 0, gate.count())
	})
}

// The bytes on the wire: an HTTP/1.1 stream is chunked (each chunk whole SSE
// events), an HTTP/1.0 one (served by net/http, not taken over) is not.
func TestLogStreamWireFraming(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, envOpts{heartbeat: time.Hour})
		alice := platform.NewID()
		hold := e.rt.HoldBuild("wire")
		id := e.trigger(alice, e.project(alice, "wire"))
		hold.WaitEntered(t)
		defer hold.Release(nil)
		for _, proto := range []string{"HTTP/1.1", "HTTP/1.0"} {
			conn, err := net.Dial("tcp", strings.TrimPrefix(e.srv.URL, "http://"))
			require.NoError(t, err)
			_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
			_, err = io.WriteString(conn, "GET /deployments/"+id+"/logs "+proto+"\r\nHost: test\r\nAuthorization: Bearer "+deploytest.Token(alice)+"\r\n\r\n")
			require.NoError(t, err)
			rd := bufio.NewReader(conn)
			status, err := rd.ReadString('\n')
			require.NoError(t, err)
			assert.Equal(t, proto+" 200 OK\r\n", status)
			var head []string
			for {
				ln, err := rd.ReadString('\n')
				require.NoError(t, err)
				if ln == "\r\n" {
					break
				}
				head = append(head, strings.ToLower(strings.TrimSpace(ln)))
			}
			ready := "data: {\"type\":\"ready\"}\n\n"
			if proto == "HTTP/1.1" {
				assert.Contains(t, head, "transfer-encoding: chunked")
				size, err := rd.ReadString('\n')
				require.NoError(t, err)
				assert.Equal(t, fmt.Sprintf("%x\r\n", len(ready)), size, "one chunk holds the ready event")
			} else {
				assert.NotContains(t, head, "transfer-encoding: chunked")
			}
			buf := make([]byte, len(ready))
			_, err = io.ReadFull(rd, buf)
			require.NoError(t, err)
			assert.Equal(t, ready, string(buf), proto)
			conn.Close()
		}
	})
}
