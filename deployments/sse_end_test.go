package deployments_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
)

// deploymentReads counts queries that read the deployments table.
type deploymentReads struct{ n atomic.Int64 }

func (h *deploymentReads) BeforeQuery(ctx context.Context, ev *bun.QueryEvent) context.Context {
	if strings.HasPrefix(strings.TrimSpace(ev.Query), "SELECT") && strings.Contains(ev.Query, `FROM "deployments"`) {
		h.n.Add(1)
	}
	return ctx
}
func (h *deploymentReads) AfterQuery(context.Context, *bun.QueryEvent) {}

// An open stream's heartbeats read nothing from the database; a deployment
// that ends without this process being told (an engine elsewhere, a lost
// notification: here the row is changed behind the service's back) ends its
// streams at the writer's next end check, and a deleted one gets an error.
func TestIdleStreamHeartbeatsDoNotQueryAndEndsAreNoticed(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		reads := &deploymentReads{}
		bdb.AddQueryHook(reads)
		// No other reader of the table: the writer's end checks and the log
		// budget's checks (both read deployments after lines are stored).
		e := newEnv(t, bdb, envOpts{heartbeat: 5 * time.Millisecond, logsCfg: deployments.LogsConfig{EndCheckEvery: time.Hour, AccountBudget: -1}})
		alice := platform.NewID()
		hold := e.rt.HoldBuild("quiet")
		id := e.trigger(alice, e.project(alice, "quiet"))
		hold.WaitEntered(t)
		defer hold.Release(nil)
		s := e.openLogs("/deployments/"+id+"/logs", alice, nil)
		require.Equal(t, "ready", s.nextEvent().Type)
		// Past the stream's opening reads: count only what 20 heartbeats cost.
		for pings := 0; pings < 2; {
			if s.next().Comment == "ping" {
				pings++
			}
		}
		before := reads.n.Load()
		require.Positive(t, before, "the hook sees the stream's opening reads")
		for pings := 0; pings < 20; {
			if s.next().Comment == "ping" {
				pings++
			}
		}
		assert.Equal(t, before, reads.n.Load(), "deployments reads during 20 heartbeats of an idle stream")
	})
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, envOpts{heartbeat: time.Hour, logsCfg: deployments.LogsConfig{EndCheckEvery: 20 * time.Millisecond}})
		alice := platform.NewID()
		hold := e.rt.HoldBuild("elsewhere")
		pid := e.project(alice, "elsewhere")
		ended, deleted := e.trigger(alice, pid), e.trigger(alice, pid)
		defer hold.Release(nil)
		hold.WaitEntered(t)
		a := e.openLogs("/deployments/"+ended+"/logs", alice, nil)
		b := e.openLogs("/deployments/"+deleted+"/logs", alice, nil)
		require.Equal(t, "ready", a.nextEvent().Type)
		require.Equal(t, "ready", b.nextEvent().Type)
		ctx := context.Background()
		_, err := bdb.NewUpdate().Table("deployments").Set("status = ?", deployments.StatusFailed).Where("id = ?", ended).Exec(ctx)
		require.NoError(t, err)
		_, err = bdb.NewDelete().Table("deployments").Where("id = ?", deleted).Exec(ctx)
		require.NoError(t, err)
		a.logsUntilDone() // fails the test if the stream ends without done (30 s client deadline)
		for {
			ev := b.nextEvent()
			if ev.Type == "log" {
				continue
			}
			assert.Equal(t, "error", ev.Type)
			assert.Equal(t, "the deployment was deleted", ev.Message)
			break
		}
	})
}
