package hosts_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/keelson-dev/keelson/deployments/hosts"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/platform/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// clock is a settable clock shared by the services of one test.
type clock struct{ at atomic.Int64 }

func (c *clock) Now() time.Time      { return time.Unix(0, c.at.Load()).UTC() }
func (c *clock) add(d time.Duration) { c.at.Add(int64(d)) }
func newClock() *clock {
	c := &clock{}
	c.at.Store(time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}

var _ platform.Clock = (*clock)(nil)

// machine is one worker's host: its service and what it was told.
type machine struct {
	svc  *hosts.Service
	apps atomic.Int64
	mu   sync.Mutex
	told []bool // Cordoned calls, in order
}

func (m *machine) calls() []bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]bool(nil), m.told...)
}

func join(t *testing.T, bdb *bun.DB, c platform.Clock, id string) *machine {
	t.Helper()
	m := &machine{}
	svc, err := hosts.New(hosts.Deps{DB: bdb, Clock: c, HeartbeatEvery: time.Hour, DownAfter: 30 * time.Second,
		Local: &hosts.Local{
			Host:      hosts.Host{ID: id, Queue: "q/worker/" + id, Name: "machine-" + id, Address: id + ":8081", MemoryMB: 2048, CPUs: 2, MaxApps: 40},
			CountApps: func(context.Context) (int, error) { return int(m.apps.Load()), nil },
			Cordoned: func(c bool) {
				m.mu.Lock()
				m.told = append(m.told, c)
				m.mu.Unlock()
			},
		}})
	require.NoError(t, err)
	m.svc = svc
	require.NoError(t, svc.Start(context.Background()))
	t.Cleanup(func() { _ = svc.Close(context.Background()) })
	return m
}

// Two workers register; the admin's view (a service with no local host)
// lists both with their capacity; heartbeats carry the app count; a host
// whose heartbeat stops is down after DownAfter and comes back with its
// next heartbeat.
func TestHostsRegisterHeartbeatAndDown(t *testing.T) {
	dbtest.Each(t, []db.MigrationSet{hosts.Migrations()}, func(t *testing.T, bdb *bun.DB) {
		ctx := context.Background()
		c := newClock()
		a, b := join(t, bdb, c, "a"), join(t, bdb, c, "b")
		admin, err := hosts.New(hosts.Deps{DB: bdb, Clock: c})
		require.NoError(t, err)

		hs, err := admin.List(ctx)
		require.NoError(t, err)
		require.Len(t, hs, 2)
		assert.Equal(t, "a", hs[0].ID)
		assert.Equal(t, hosts.StateActive, hs[0].State)
		assert.Equal(t, "q/worker/a", hs[0].Queue)
		assert.Equal(t, "a:8081", hs[0].Address)
		assert.Equal(t, int64(2048), hs[0].MemoryMB)
		assert.Equal(t, 40, hs[0].MaxApps)

		a.apps.Store(3)
		c.add(20 * time.Second)
		require.NoError(t, a.svc.Heartbeat(ctx))
		c.add(20 * time.Second) // b's last heartbeat is 40 s old, a's 20 s
		ha, err := admin.Get(ctx, "a")
		require.NoError(t, err)
		assert.Equal(t, hosts.StateActive, ha.State)
		assert.Equal(t, 3, ha.Apps)
		hb, err := admin.Get(ctx, "b")
		require.NoError(t, err)
		assert.Equal(t, hosts.StateDown, hb.State, "no heartbeat for 40 s")

		require.NoError(t, b.svc.Heartbeat(ctx))
		hb, err = admin.Get(ctx, "b")
		require.NoError(t, err)
		assert.Equal(t, hosts.StateActive, hb.State, "back with its heartbeat")

		_, err = admin.Get(ctx, "nope")
		assert.ErrorIs(t, err, platform.ErrNotFound)

		// What a pin's check of a rollback reads: a host's queue, or ""
		// for a host not in the register.
		q, err := hosts.QueueOf(ctx, bdb, "b")
		require.NoError(t, err)
		assert.Equal(t, "q/worker/b", q)
		q, err = hosts.QueueOf(ctx, bdb, "nope")
		require.NoError(t, err)
		assert.Empty(t, q)
	})
}

// A cordon set by an admin elsewhere reaches the host's worker at its next
// heartbeat, survives the worker starting again, and an uncordon reaches it
// the same way. The worker is told its state once at start.
func TestHostsCordonReachesTheWorker(t *testing.T) {
	dbtest.Each(t, []db.MigrationSet{hosts.Migrations()}, func(t *testing.T, bdb *bun.DB) {
		ctx := context.Background()
		c := newClock()
		a := join(t, bdb, c, "a")
		assert.Equal(t, []bool{false}, a.calls(), "told once at start")
		admin, err := hosts.New(hosts.Deps{DB: bdb, Clock: c})
		require.NoError(t, err)

		h, err := admin.SetCordoned(ctx, "a", true, "  disk replacement ")
		require.NoError(t, err)
		assert.Equal(t, hosts.StateCordoned, h.State)
		assert.Equal(t, "disk replacement", h.Reason)
		assert.Equal(t, []bool{false}, a.calls(), "not before its heartbeat")
		require.NoError(t, a.svc.Heartbeat(ctx))
		require.NoError(t, a.svc.Heartbeat(ctx))
		assert.Equal(t, []bool{false, true}, a.calls(), "told once of the change")

		// The worker starts again: still cordoned, and told so.
		require.NoError(t, a.svc.Close(ctx))
		again := join(t, bdb, c, "a")
		assert.Equal(t, []bool{true}, again.calls())

		_, err = admin.SetCordoned(ctx, "a", false, "")
		require.NoError(t, err)
		require.NoError(t, again.svc.Heartbeat(ctx))
		assert.Equal(t, []bool{true, false}, again.calls())

		_, err = admin.SetCordoned(ctx, "nope", true, "")
		assert.ErrorIs(t, err, platform.ErrNotFound)
	})
}

// Only a down host can be removed; a removed host that is in fact alive
// registers again at its next heartbeat.
func TestHostsRemoveOnlyDown(t *testing.T) {
	dbtest.Each(t, []db.MigrationSet{hosts.Migrations()}, func(t *testing.T, bdb *bun.DB) {
		ctx := context.Background()
		c := newClock()
		a := join(t, bdb, c, "a")
		admin, err := hosts.New(hosts.Deps{DB: bdb, Clock: c})
		require.NoError(t, err)

		err = admin.Remove(ctx, "a")
		var pe *platform.Error
		require.True(t, errors.As(err, &pe), "%v", err)
		assert.Equal(t, 409, pe.Status)
		assert.Contains(t, pe.Message, "only a down host")
		_, err = admin.Get(ctx, "a")
		require.NoError(t, err, "the refused remove left the host")

		c.add(time.Minute)
		require.NoError(t, admin.Remove(ctx, "a"))
		_, err = admin.Get(ctx, "a")
		assert.ErrorIs(t, err, platform.ErrNotFound)

		require.NoError(t, a.svc.Heartbeat(ctx))
		h, err := admin.Get(ctx, "a")
		require.NoError(t, err, "an alive host registers again")
		assert.Equal(t, hosts.StateActive, h.State)
	})
}

// The heartbeat loop stops with Close: no write after it.
func TestHostsCloseStopsTheHeartbeat(t *testing.T) {
	bdb := dbtest.SQLite(t, hosts.Migrations())
	var beats atomic.Int64
	svc, err := hosts.New(hosts.Deps{DB: bdb, HeartbeatEvery: 5 * time.Millisecond, Local: &hosts.Local{
		Host:      hosts.Host{ID: "a", Queue: "q/worker/a"},
		CountApps: func(context.Context) (int, error) { beats.Add(1); return 0, nil },
	}})
	require.NoError(t, err)
	require.NoError(t, svc.Start(context.Background()))
	for beats.Load() < 3 {
		time.Sleep(5 * time.Millisecond)
	}
	require.NoError(t, svc.Close(context.Background()))
	n := beats.Load()
	time.Sleep(50 * time.Millisecond)
	assert.Equal(t, n, beats.Load(), "a heartbeat after Close")
	require.NoError(t, svc.Close(context.Background()), "twice is fine")
}

// A host that stops its heartbeat is handed to Deps.HostDown once per
// outage, by one of the processes that look (two here), not by itself;
// a failed run is tried again; a host that comes back and dies again is
// handled again.
func TestHostsDownIsHandledOncePerOutage(t *testing.T) {
	dbtest.Each(t, []db.MigrationSet{hosts.Migrations()}, func(t *testing.T, bdb *bun.DB) {
		ctx := context.Background()
		c := newClock()
		b := join(t, bdb, c, "b")
		var mu sync.Mutex
		var handled []string
		fail := true
		watcher := func() *hosts.Service {
			svc, err := hosts.New(hosts.Deps{DB: bdb, Clock: c, HostDown: func(_ context.Context, h *hosts.Host) error {
				mu.Lock()
				defer mu.Unlock()
				if fail {
					fail = false
					return errors.New("no other host yet")
				}
				handled = append(handled, h.ID+":"+string(h.State))
				return nil
			}})
			require.NoError(t, err)
			return svc
		}
		w1, w2 := watcher(), watcher()
		got := func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), handled...) }

		require.NoError(t, w1.HandleDown(ctx))
		assert.Empty(t, got(), "b is alive")

		c.add(time.Minute)
		assert.Error(t, w1.HandleDown(ctx), "the first run fails")
		var wg sync.WaitGroup
		for _, w := range []*hosts.Service{w1, w2, w1, w2} {
			wg.Add(1)
			go func() { defer wg.Done(); assert.NoError(t, w.HandleDown(ctx)) }()
		}
		wg.Wait()
		assert.Equal(t, []string{"b:down"}, got(), "tried again, then once across both processes")

		require.NoError(t, b.svc.Heartbeat(ctx)) // back
		require.NoError(t, w2.HandleDown(ctx))
		assert.Len(t, got(), 1)
		c.add(time.Minute) // and down again
		require.NoError(t, w2.HandleDown(ctx))
		assert.Equal(t, []string{"b:down", "b:down"}, got())
	})
}

// Place takes the active host with room for the deployment's memory and
// CPU and the largest share of its memory free, then the fewest apps,
// counting what each host holds (Deps.Load: LIVE and placed, so a burst
// spreads out); cordoned, down, full and unpinned hosts are refused, each
// with its reason; with none left it fails closed (ErrNoRoom) naming them;
// with no host registered at all any worker takes it.
func TestHostsPlaceByMemoryAndCPU(t *testing.T) {
	dbtest.Each(t, []db.MigrationSet{hosts.Migrations()}, func(t *testing.T, bdb *bun.DB) {
		ctx := context.Background()
		c := newClock()
		loads := map[string]hosts.Load{}
		svc, err := hosts.New(hosts.Deps{DB: bdb, Clock: c, Load: func(context.Context) (map[string]hosts.Load, error) { return loads, nil }})
		require.NoError(t, err)
		q, why, err := svc.Place(ctx, hosts.Need{MemoryMi: 512, Pin: "a"})
		require.NoError(t, err)
		assert.Empty(t, q+why, "one machine: any worker")

		join(t, bdb, c, "a") // 2,048 MiB, 2 CPUs, 40 apps
		join(t, bdb, c, "b")
		need := hosts.Need{MemoryMi: 512, CPUm: 500}
		place := func() string {
			q, why, err := svc.Place(ctx, need)
			require.NoError(t, err)
			require.NotEmpty(t, why)
			l := loads[q]
			loads[q] = hosts.Load{Apps: l.Apps + 1, MemoryMi: l.MemoryMi + 512, CPUm: l.CPUm + 500}
			return q
		}
		// A tie goes to the first id, then each placement counts: the burst alternates.
		assert.Equal(t, "q/worker/a", place())
		for range 3 {
			place()
		}
		assert.Equal(t, hosts.Load{Apps: 2, MemoryMi: 1024, CPUm: 1000}, loads["q/worker/b"], "spread, not all on the emptiest")

		loads["q/worker/a"] = hosts.Load{Apps: 1, MemoryMi: 1536}
		loads["q/worker/b"] = hosts.Load{Apps: 3, MemoryMi: 512}
		q, why, err = svc.Place(ctx, need)
		require.NoError(t, err)
		assert.Equal(t, "q/worker/b", q, "the most memory free, not the fewest apps")
		assert.Equal(t, "placed on host b (3 apps, 512 of 2,048 MiB and 0 of 2,000 millicores held; needs 512 MiB, 500 millicores); others: a 1 apps, 1,536 of 2,048 MiB held", why)

		loads["q/worker/b"] = hosts.Load{Apps: 1, MemoryMi: 1024, CPUm: 1600}
		_, _, err = svc.Place(ctx, hosts.Need{MemoryMi: 1024, CPUm: 500})
		require.ErrorIs(t, err, hosts.ErrNoRoom)
		assert.Equal(t, "no host can take the deployment: a full: 1,536 of 2,048 MiB held, needs 1,024; b full: 1,600 of 2,000 millicores held, needs 500", err.Error())

		q, why, err = svc.Place(ctx, hosts.Need{MemoryMi: 512, Pin: "a"})
		require.NoError(t, err)
		assert.Equal(t, "q/worker/a", q, "pinned, though b has more room")
		assert.Contains(t, why, "pinned to it; others: b not the pinned host")
		_, err = svc.SetCordoned(ctx, "a", true, "")
		require.NoError(t, err)
		_, _, err = svc.Place(ctx, hosts.Need{Pin: "a"})
		assert.EqualError(t, err, "no host can take the deployment: a cordoned; b not the pinned host", "never elsewhere")
		_, _, err = svc.Place(ctx, hosts.Need{Pin: "gone"})
		assert.EqualError(t, err, `no host can take the deployment: the project is pinned to host "gone", which is not registered`)

		loads["q/worker/b"] = hosts.Load{Apps: 40}
		_, _, err = svc.Place(ctx, hosts.Need{})
		assert.EqualError(t, err, "no host can take the deployment: a cordoned; b full: 40 of 40 apps")
		c.add(time.Minute)
		_, _, err = svc.Place(ctx, hosts.Need{})
		assert.EqualError(t, err, "no host can take the deployment: a down; b down")
	})
}
