package deployments_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
)

// TestBuildLogCap: a build printing far more than the cap still reaches
// LIVE; the stored build output stops at the cap (lines, then bytes), with
// one system line saying so, and the deployment's own lines after it are
// still stored.
func TestBuildLogCap(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		for _, c := range []struct {
			name string
			cfg  deployments.LogsConfig
			want int // build lines stored
		}{
			{"lines", deployments.LogsConfig{MaxBuildLines: 1000}, 1000},
			// "build line N" is 12-15 bytes: 20,000 bytes hold fewer than 1,500.
			{"bytes", deployments.LogsConfig{MaxBuildBytes: 20_000}, -1},
		} {
			e := newEnv(t, bdb, envOpts{logsCfg: c.cfg})
			e.rt.BuildLines = 5000
			alice := platform.NewID()
			id := e.trigger(alice, e.project(alice, "loud-"+c.name))
			e.waitStatus(id, deployments.StatusLive)
			var build, bytes, capLines int
			var afterCap bool
			for _, l := range e.lines(id) {
				switch {
				case l.Stream == deployments.StreamBuild:
					build++
					bytes += len(l.Message)
					assert.False(t, afterCap, "a build line after the cap line: %q", l.Message)
				case strings.Contains(l.Message, "build output reached the log cap"):
					capLines++
					afterCap = true
				}
			}
			assert.Equal(t, 1, capLines, c.name)
			if c.want > 0 {
				assert.Equal(t, c.want, build, c.name)
			} else {
				assert.LessOrEqual(t, bytes, 20_000, c.name)
				assert.Greater(t, bytes, 20_000-20, c.name)
			}
			last := e.lines(id)[len(e.lines(id))-1]
			assert.Equal(t, deployments.StreamSystem, last.Stream, "the deployment's own lines go on after the cap")
		}
	})
}

// TestAppLogKeepsTheNewestLines: app output rolls: only about the newest
// MaxAppLines lines stay stored (the oldest are deleted), and one system line
// says so.
func TestAppLogKeepsTheNewestLines(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, envOpts{logsCfg: deployments.LogsConfig{MaxAppLines: 100}})
		id := platform.NewID()
		ctx := context.Background()
		sink, err := e.logs.Sink(ctx, id)
		require.NoError(t, err)
		for i := 1; i <= 1000; i++ {
			sink.Log(deployments.StreamApp, fmt.Sprintf("app line %d", i))
		}
		require.NoError(t, e.logs.Flush(ctx))
		var app []string
		notes := 0
		for _, l := range e.lines(id) {
			if l.Stream == deployments.StreamApp {
				app = append(app, l.Message)
			} else if strings.Contains(l.Message, "older app lines are deleted") {
				notes++
			}
		}
		assert.Equal(t, 1, notes)
		assert.GreaterOrEqual(t, len(app), 100)
		assert.LessOrEqual(t, len(app), 111, "at most the cap and a tenth")
		assert.Equal(t, "app line 1000", app[len(app)-1], "the newest line is kept")
		assert.NotContains(t, app, "app line 1", "the oldest line is gone")
	})
}

// TestLogDeleteFinished: only the logs of deployments that ended FAILED or
// CANCELLED before the cutoff go; a LIVE deployment's and a recent one's stay.
func TestLogDeleteFinished(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, envOpts{})
		alice := platform.NewID()
		e.rt.FailBuild("broken", errors.New("exit status 1"))
		failed := e.trigger(alice, e.project(alice, "broken"))
		e.waitStatus(failed, deployments.StatusFailed)
		live := e.trigger(alice, e.project(alice, "fine"))
		e.waitStatus(live, deployments.StatusLive)
		liveLines := len(e.lines(live))
		ctx := context.Background()
		n, err := e.store.LogDeleteFinished(ctx, time.Now().Add(-time.Hour))
		require.NoError(t, err)
		assert.Zero(t, n, "nothing ended before the cutoff")
		n, err = e.store.LogDeleteFinished(ctx, time.Now().Add(time.Minute))
		require.NoError(t, err)
		assert.Positive(t, n)
		assert.Empty(t, e.lines(failed))
		assert.Len(t, e.lines(live), liveLines, "a LIVE deployment keeps its logs")
	})
}
