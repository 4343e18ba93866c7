package deployments_test

import (
	"errors"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/internal/deploytest"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/keelson-dev/keelson/platform/platformtest"
	"github.com/uptrace/bun"
)

// recorder is a deployments.Metrics that remembers what it was told.
type recorder struct {
	mu       sync.Mutex
	builds   map[deployments.BuildOutcome]int
	lines    int
	open     int
	maxOpen  int
	closures int
}

func (r *recorder) BuildFinished(o deployments.BuildOutcome, took time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if took < 0 {
		panic("negative build duration")
	}
	r.builds[o]++
}

func (r *recorder) LogLinesStored(n int) { r.mu.Lock(); r.lines += n; r.mu.Unlock() }
func (r *recorder) LogStreamOpened() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.open++
	r.maxOpen = max(r.maxOpen, r.open)
}
func (r *recorder) LogStreamClosed() { r.mu.Lock(); r.open--; r.closures++; r.mu.Unlock() }

// recorded is what a recorder heard so far.
type recorded struct {
	builds                       map[deployments.BuildOutcome]int
	lines, open, maxOpen, closes int
}

func (r *recorder) snapshot() recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := recorded{lines: r.lines, open: r.open, maxOpen: r.maxOpen, closes: r.closures, builds: map[deployments.BuildOutcome]int{}}
	for k, v := range r.builds {
		c.builds[k] = v
	}
	return c
}

// TestMetricsHooks: Deps.Metrics hears each build's outcome, exactly the
// lines stored, and each log stream's open and close.
func TestMetricsHooks(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		rec := &recorder{builds: map[deployments.BuildOutcome]int{}}
		rt := deploytest.NewRuntime()
		e := newEnv(t, bdb, envOpts{rt: rt, metrics: rec})
		owner := platform.NewID()
		ok := e.trigger(owner, e.project(owner, "ok"))
		e.waitStatus(ok, deployments.StatusLive)
		rt.FailBuild("bad", errors.New("exit status 2"))
		bad := e.trigger(owner, e.project(owner, "bad"))
		e.waitStatus(bad, deployments.StatusFailed)
		hold := rt.HoldBuild("held")
		held := e.trigger(owner, e.project(owner, "held"))
		hold.WaitEntered(t)
		code, _, body := e.do("POST", "/deployments/"+held+"/cancel", owner, nil, nil)
		if code != http.StatusOK {
			t.Fatalf("cancel: %d %s", code, body)
		}
		e.waitStatus(held, deployments.StatusCancelled)

		stored := len(e.lines(ok)) + len(e.lines(bad)) + len(e.lines(held)) // flushes the writer
		got := rec.snapshot()
		want := map[deployments.BuildOutcome]int{deployments.BuildSucceeded: 1, deployments.BuildFailed: 1, deployments.BuildCancelled: 1}
		for o, n := range want {
			if got.builds[o] != n {
				t.Errorf("builds %s = %d, want %d (all: %v)", o, got.builds[o], n, got.builds)
			}
		}
		if got.lines != stored {
			t.Errorf("LogLinesStored added up to %d, the store holds %d lines", got.lines, stored)
		}

		// A stream of the LIVE deployment replays and ends: opened, then closed.
		req, _ := http.NewRequest("GET", e.srv.URL+"/deployments/"+ok+"/logs", nil)
		req.Header.Set("Authorization", "Bearer "+deploytest.Token(owner))
		res, err := http.DefaultClient.Do(req)
		must(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		platformtest.Eventually(t, 10*time.Second, "the stream to be counted closed", func() bool {
			s := rec.snapshot()
			return s.closes == 1
		})
		if s := rec.snapshot(); s.maxOpen != 1 || s.open != 0 {
			t.Fatalf("streams: at most %d open, %d open now; want 1 then 0", s.maxOpen, s.open)
		}
	})
}
