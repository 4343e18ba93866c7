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
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/keelson-dev/keelson/platform/platformtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
)

// storedBytes is the size of the deployment's stored messages, read line by line.
func (e *env) storedBytes(id string) int64 {
	var n int64
	for _, l := range e.lines(id) {
		n += int64(len(l.Message))
	}
	return n
}

// assertCounted checks that each deployment's LogBytes is the size of its stored lines.
func (e *env) assertCounted(ids ...string) {
	e.t.Helper()
	for _, id := range ids {
		assert.Equal(e.t, e.storedBytes(id), e.get(id).LogBytes, "LogBytes of %s", id)
	}
}

// budgetAccount gives alice, on e, a replaced deployment (CANCELLED, the
// oldest), a FAILED one, a LIVE one, and a build that runs (held: release
// it with the returned hold); bob has a FAILED one. Builds print lines so
// every log is a few KiB.
type budgetAccount struct {
	alice, bob                            string
	replaced, failed, live, running, bobs string
	release                               func()
}

func newBudgetAccount(e *env) *budgetAccount {
	e.t.Helper()
	e.rt.BuildLines = 200
	a := &budgetAccount{alice: platform.NewID(), bob: platform.NewID()}
	web := e.project(a.alice, "web")
	a.replaced = e.trigger(a.alice, web)
	e.waitStatus(a.replaced, deployments.StatusLive)
	e.rt.FailBuild("api", errors.New("exit status 1"))
	a.failed = e.trigger(a.alice, e.project(a.alice, "api"))
	e.waitStatus(a.failed, deployments.StatusFailed)
	a.live = e.trigger(a.alice, web)
	e.waitStatus(a.live, deployments.StatusLive)
	e.waitStatus(a.replaced, deployments.StatusCancelled)
	hold := e.rt.HoldBuild("worker")
	a.running = e.trigger(a.alice, e.project(a.alice, "worker"))
	hold.WaitEntered(e.t)
	a.release = func() { hold.Release(nil) }
	e.rt.FailBuild("bobs", errors.New("exit status 1"))
	a.bobs = e.trigger(a.bob, e.project(a.bob, "bobs"))
	e.waitStatus(a.bobs, deployments.StatusFailed)
	return a
}

// TestLogBudgetDeletesOldestEndedFirst: past the budget, the logs of the
// account's oldest ended deployment go first (one line says why, numbered
// after its last one), then the next; LIVE and running builds' logs are
// never deleted, even when the account stays over budget; another
// account's logs are not touched. LogBytes follows every change.
func TestLogBudgetDeletesOldestEndedFirst(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, envOpts{logsCfg: deployments.LogsConfig{AccountBudget: -1}})
		a := newBudgetAccount(e)
		defer a.release()
		ids := []string{a.replaced, a.failed, a.live, a.running, a.bobs}
		e.assertCounted(ids...)
		ctx := context.Background()
		total, err := e.store.LogBytesOwned(ctx, a.alice)
		require.NoError(t, err)
		require.Equal(t, e.storedBytes(a.replaced)+e.storedBytes(a.failed)+e.storedBytes(a.live)+e.storedBytes(a.running), total)
		replacedLast := e.lines(a.replaced)[len(e.lines(a.replaced))-1].Seq
		keep := map[string][]deployments.LogLine{a.failed: e.lines(a.failed), a.live: e.lines(a.live),
			a.running: e.lines(a.running), a.bobs: e.lines(a.bobs)}

		const note = "deleted for the budget"
		pruned, err := e.store.LogPruneOwner(ctx, a.alice, total-1, note)
		require.NoError(t, err)
		assert.Equal(t, []string{a.replaced}, pruned, "the oldest ended deployment goes first, and is enough")
		got := e.lines(a.replaced)
		require.Len(t, got, 1)
		assert.Equal(t, note, got[0].Message)
		assert.Equal(t, deployments.StreamSystem, got[0].Stream)
		assert.Equal(t, replacedLast+1, got[0].Seq, "numbered after the lines it replaces")
		assert.Equal(t, keep[a.failed], e.lines(a.failed))

		pruned, err = e.store.LogPruneOwner(ctx, a.alice, 0, note)
		require.NoError(t, err)
		assert.Equal(t, []string{a.failed}, pruned, "then the next ended one; a pruned one is not pruned again")
		for _, id := range []string{a.live, a.running, a.bobs} {
			assert.Equal(t, keep[id], e.lines(id), "LIVE, running and another account's logs stay")
		}
		left, err := e.store.LogBytesOwned(ctx, a.alice)
		require.NoError(t, err)
		assert.Equal(t, int64(2*len(note))+e.storedBytes(a.live)+e.storedBytes(a.running), left, "over budget while LIVE and running logs hold more")
		pruned, err = e.store.LogPruneOwner(ctx, a.alice, 0, note)
		require.NoError(t, err)
		assert.Empty(t, pruned, "nothing more may go")
		e.assertCounted(ids...)
	})
}

// TestLogBudgetEnforcedAsLinesArrive: with a budget smaller than one
// deployment's logs, the log writer's checks delete an ended deployment's
// logs on their own, while the LIVE deployment's and the running build's
// stay; GET-usage's figure (LogUsage) is what is stored.
func TestLogBudgetEnforcedAsLinesArrive(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, envOpts{logsCfg: deployments.LogsConfig{AccountBudget: 1000, BudgetCheckEvery: time.Millisecond}})
		a := newBudgetAccount(e)
		defer a.release()
		running := e.lines(a.running)
		live := e.lines(a.live)
		note := "the logs of this deployment were deleted: this account's stored logs passed their budget of 1000 bytes"
		for _, id := range []string{a.replaced, a.failed, a.bobs} {
			platformtest.Eventually(t, 20*time.Second, "the logs of ended deployment "+id+" to go", func() bool {
				ls := e.lines(id)
				return len(ls) == 1 && strings.HasPrefix(ls[0].Message, note)
			})
		}
		assert.Equal(t, running, e.lines(a.running), "a running build keeps its logs")
		assert.Equal(t, live, e.lines(a.live), "a LIVE deployment keeps its logs")
		used, budget, err := e.svc.LogUsage(context.Background(), a.alice)
		require.NoError(t, err)
		assert.Equal(t, int64(1000), budget)
		assert.Equal(t, e.storedBytes(a.replaced)+e.storedBytes(a.failed)+e.storedBytes(a.live)+e.storedBytes(a.running), used)
		assert.Greater(t, used, budget, "LIVE and running logs are never deleted for the budget")
		e.assertCounted(a.replaced, a.failed, a.live, a.running, a.bobs)
	})
}

// TestLogBudgetHourlyPass: EnforceLogBudgets (the hourly pass) finds every
// account over budget, here lines stored while there was no budget.
func TestLogBudgetHourlyPass(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, envOpts{logsCfg: deployments.LogsConfig{AccountBudget: -1}})
		a := newBudgetAccount(e)
		a.release()
		e.waitStatus(a.running, deployments.StatusLive)
		e.close()
		same := func(budget int64) envOpts { // the same projects and apps
			return envOpts{rt: e.rt, projects: e.projects, noStart: true, logsCfg: deployments.LogsConfig{AccountBudget: budget}}
		}
		e = newEnv(t, bdb, same(1<<20))
		n, err := e.svc.EnforceLogBudgets(context.Background())
		require.NoError(t, err)
		assert.Zero(t, n, "every account is within 1 MiB")
		e.close()
		e = newEnv(t, bdb, same(1))
		n, err = e.svc.EnforceLogBudgets(context.Background())
		require.NoError(t, err)
		assert.Equal(t, 3, n, "alice's replaced and failed deployments, bob's failed one")
		for _, id := range []string{a.replaced, a.failed, a.bobs} {
			assert.Len(t, e.lines(id), 1)
		}
		assert.Greater(t, len(e.lines(a.live)), 200)
		assert.Greater(t, len(e.lines(a.running)), 200, "LIVE now, kept")
	})
}

// TestLogBytesFollowTrimAndRetention: app trims and retention keep LogBytes
// equal to what is stored.
func TestLogBytesFollowTrimAndRetention(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, envOpts{logsCfg: deployments.LogsConfig{MaxAppLines: 100, AccountBudget: -1}})
		alice := platform.NewID()
		live := e.trigger(alice, e.project(alice, "chatty"))
		e.waitStatus(live, deployments.StatusLive)
		e.rt.FailBuild("broken", errors.New("exit status 1"))
		failed := e.trigger(alice, e.project(alice, "broken"))
		e.waitStatus(failed, deployments.StatusFailed)
		ctx := context.Background()
		sink, err := e.logs.Sink(ctx, live)
		require.NoError(t, err)
		for i := range 1000 {
			sink.Log(deployments.StreamApp, fmt.Sprintf("app line %d", i))
		}
		require.NoError(t, e.logs.Flush(ctx))
		assert.Less(t, len(e.lines(live)), 200, "trimmed")
		e.assertCounted(live, failed)
		_, err = e.store.LogDeleteFinished(ctx, time.Now().Add(time.Minute))
		require.NoError(t, err)
		assert.Empty(t, e.lines(failed))
		e.assertCounted(live, failed)
	})
}

// TestLogBytesCountedOnUpgrade: migration 0003 counts the lines a database
// stored before it (its column dropped and the migration run again).
func TestLogBytesCountedOnUpgrade(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, envOpts{})
		alice := platform.NewID()
		id := e.trigger(alice, e.project(alice, "old"))
		e.waitStatus(id, deployments.StatusLive)
		want := e.storedBytes(id)
		require.Positive(t, want)
		e.close()
		ctx := context.Background()
		_, err := bdb.ExecContext(ctx, "ALTER TABLE deployments DROP COLUMN log_bytes")
		require.NoError(t, err)
		_, err = bdb.ExecContext(ctx, "DELETE FROM keelson_migrations WHERE module = 'deployments' AND id = '0003_log_bytes'")
		require.NoError(t, err)
		require.NoError(t, db.Migrate(ctx, bdb, deployments.Migrations()))
		d, err := deployments.NewStore(bdb).DeploymentGet(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, want, d.LogBytes)
	})
}

// TestLogInsertIsAllOrNothing: LogInsert stores its lines and adds their
// bytes to each deployment's LogBytes together; a batch with a number
// already taken is refused as a conflict and stores none of its lines nor
// any of their bytes (Postgres sends the statements in one round trip).
func TestLogInsertIsAllOrNothing(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, envOpts{logsCfg: deployments.LogsConfig{AccountBudget: -1}})
		ctx := context.Background()
		alice := platform.NewID()
		pid := e.project(alice, "quiet")
		a := e.insertAt(pid, alice, "quiet", deployments.StatusBuilding, 1, nil)
		b := e.insertAt(pid, alice, "quiet", deployments.StatusBuilding, 2, nil)
		line := func(id string, seq int64, msg string) deployments.LogLine {
			return deployments.LogLine{DeploymentID: id, Seq: seq, Time: time.Now().UTC().Truncate(time.Microsecond), Stream: deployments.StreamBuild, Message: msg}
		}
		require.NoError(t, e.store.LogInsert(ctx, []deployments.LogLine{line(b, 1, "b's first"), line(a, 1, "a's first"), line(a, 2, "it's a '?' $1 line;")}))
		e.assertCounted(a, b)
		assert.Equal(t, int64(len("a's first")+len("it's a '?' $1 line;")), e.get(a).LogBytes)

		err := e.store.LogInsert(ctx, []deployments.LogLine{line(b, 2, "b's second"), line(a, 3, "a's third"), line(a, 2, "a's second again")})
		require.ErrorIs(t, err, platform.ErrConflict)
		stored := e.lines(a)
		assert.Len(t, stored, 2, "none of the refused batch's lines")
		if len(stored) == 2 { // quotes, placeholders and a semicolon come back as written
			assert.Equal(t, "it's a '?' $1 line;", stored[1].Message)
		}
		assert.Len(t, e.lines(b), 1, "none of the refused batch's lines")
		e.assertCounted(a, b)
	})
}
