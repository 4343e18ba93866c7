package ingress_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keelson-dev/keelson/deployments/ingress"
)

// sloppyApp is a real app server that answers a HEAD (and a 204 or 304)
// with a body, as a hand-written HEAD handler that reuses its GET does: the
// body is bytes of no answer on the connection. It answers every other
// request with its request URI.
func sloppyApp(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					// The stray body is itself an answer: whoever reads it as one gets it.
					stray := "HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\nanother's reply"
					switch req.URL.Path {
					case "/head":
						fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(stray), stray)
					case "/late": // the stray body a moment after the answer
						fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
						time.Sleep(20 * time.Millisecond)
						fmt.Fprint(c, stray)
					case "/204":
						fmt.Fprintf(c, "HTTP/1.1 204 No Content\r\nContent-Length: %d\r\n\r\n%s", len(stray), stray)
					default:
						fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(req.RequestURI), req.RequestURI)
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

// An app's bytes past the end of an answer without a body (HEAD, 204),
// whether they came with it or a moment later, never become the answer to
// the next request: that connection is not reused, so each client gets its
// own answer (request-response desync between the ingress and the app).
func TestStrayBytesAfterABodylessAnswerAreNotTheNextAnswer(t *testing.T) {
	r, srv := newRouter(t, ingress.Config{})
	require.NoError(t, r.Set("site", "d1", sloppyApp(t)))
	for _, first := range []string{http.MethodHead + " /head", http.MethodGet + " /204", http.MethodHead + " /late"} {
		method, path, _ := strings.Cut(first, " ")
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		req.Host = "site.localhost"
		res, err := srv.Client().Do(req)
		require.NoError(t, err)
		res.Body.Close()
		time.Sleep(100 * time.Millisecond) // the late stray body arrived
		code, body := get(t, srv, "site.localhost", "/mine")
		assert.Equal(t, http.StatusOK, code, "after %s", first)
		assert.Equal(t, "/mine", body, "after %s: the next client got another answer", first)
	}
}
