package deployments_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readCursors reads a stream's body until done and answers the cursors of
// its log events (an error instead if it ends otherwise).
func readCursors(res *http.Response) ([]int64, error) {
	defer res.Body.Close()
	var cursors []int64
	rd := bufio.NewReaderSize(res.Body, 64<<10)
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			return cursors, fmt.Errorf("stream ended before done: %w", err)
		}
		switch {
		case strings.HasPrefix(line, "id: "):
			n, err := strconv.ParseInt(strings.TrimSpace(line[4:]), 10, 64)
			if err != nil {
				return cursors, err
			}
			cursors = append(cursors, n)
		case strings.HasPrefix(line, `data: {"type":"done"`):
			return cursors, nil
		case strings.HasPrefix(line, `data: {"type":"error"`):
			return cursors, fmt.Errorf("error event: %s", line)
		}
	}
}

// TestDirectFanOutWithAStuckFollower: more followers than the fan-out
// splits over goroutines, written to directly by the log writer, and one
// that never reads (a tiny receive window, so its socket fills): every
// other follower gets every line once, in order, and the producer finishes.
func TestDirectFanOutWithAStuckFollower(t *testing.T) {
	t.Parallel()
	bdb := dbtest.SQLite(t, sets...)
	e := newEnv(t, bdb, envOpts{logsCfg: deployments.LogsConfig{SubscriberBuffer: 4}})
	alice := platform.NewID()
	hold := e.rt.HoldBuild("many")
	id := e.trigger(alice, e.project(alice, "many"))
	hold.WaitEntered(t)
	path := "/deployments/" + id + "/logs"

	// The stuck follower: its request written, nothing read.
	u, err := url.Parse(e.srv.URL)
	require.NoError(t, err)
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 2048) })
	}}
	stuck, err := d.Dial("tcp", u.Host)
	require.NoError(t, err)
	defer stuck.Close()
	_, err = fmt.Fprintf(stuck, "GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer token-%s\r\n\r\n", path, u.Host, alice)
	require.NoError(t, err)

	const followers = 300
	ready := make([]*http.Response, followers)
	for i := range ready {
		req, err := http.NewRequestWithContext(context.Background(), "GET", e.srv.URL+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer token-"+alice)
		ready[i], err = http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, ready[i].StatusCode)
	}
	results := make([][]int64, followers)
	errs := make([]error, followers)
	var wg sync.WaitGroup
	for i, res := range ready {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = readCursors(res)
		}()
	}
	sink, err := e.logs.Sink(context.Background(), id)
	require.NoError(t, err)
	msg := strings.Repeat("x", 1000)
	for i := range 1000 {
		sink.Log(deployments.StreamBuild, fmt.Sprintf("line %d %s", i, msg))
		if i%10 == 0 {
			require.NoError(t, e.logs.Flush(context.Background())) // many small events
		}
	}
	hold.Release(nil)
	e.waitStatus(id, deployments.StatusLive)
	wg.Wait()
	want := seqs(1, int64(len(e.lines(id))))
	for i := range followers {
		require.NoError(t, errs[i], "follower %d", i)
		assert.Equal(t, want, results[i], "follower %d: every line once, in order", i)
	}
}
