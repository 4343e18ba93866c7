package deployments_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/internal/deploytest"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/keelson-dev/keelson/platform/platformtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
)

// TestOneTenantCannotHoldEveryBuildSlot: alice queues four slow builds on a
// server running four at once; only her share (2) runs, her others wait with
// a line saying why, and bob's deployment goes LIVE meanwhile.
func TestOneTenantCannotHoldEveryBuildSlot(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, envOpts{maxConc: 4})
		alice, bob := platform.NewID(), platform.NewID()
		var holds []*deploytest.Hold
		var ids []string
		for _, slug := range []string{"a1", "a2", "a3", "a4"} {
			holds = append(holds, e.rt.HoldBuild(slug))
			ids = append(ids, e.trigger(alice, e.project(alice, slug)))
		}
		t.Cleanup(func() {
			for _, h := range holds {
				select {
				case <-h.Entered():
					h.Release(nil)
				default:
				}
			}
		})
		holds[0].WaitEntered(t)
		holds[1].WaitEntered(t)
		platformtest.Eventually(t, 30*time.Second, "alice's third deployment to say why it waits", func() bool {
			return strings.Contains(e.logText(ids[2]), "queued: 2 of your deployments are running")
		})
		bobs := e.trigger(bob, e.project(bob, "b1"))
		e.waitStatus(bobs, deployments.StatusLive)
		for _, id := range ids[2:] {
			assert.Equal(t, deployments.StatusQueued, e.get(id).Status, "alice's deployments past her share wait")
		}
		platformtest.Eventually(t, 30*time.Second, "the engine to count alice's two waiting deployments", func() bool {
			return e.eng.QueueDepth() == 2
		})
		select {
		case <-holds[2].Entered():
			t.Fatal("alice's third build started while two of hers ran")
		default:
		}
		holds[0].Release(nil)
		holds[2].WaitEntered(t) // her next one starts when one of hers ends
	})
}

// priorityShares gives the listed owners priority; everyone's cap is one.
type priorityShares map[string]bool

func (p priorityShares) BuildShare(_ context.Context, owner string) (deployments.Share, error) {
	return deployments.Share{Max: 1, Priority: p[owner]}, nil
}

// planShares answers the listed owners' shares; others are on a paid plan
// running two at once.
type planShares map[string]deployments.Share

func (p planShares) BuildShare(_ context.Context, owner string) (deployments.Share, error) {
	if sh, ok := p[owner]; ok {
		return sh, nil
	}
	return deployments.Share{Max: 2}, nil
}

// holdAll holds the next build of each slug and triggers a deployment of a
// new project of owner for each; the holds are released when t ends.
func (e *env) holdAll(owner string, slugs ...string) (ids []string, holds []*deploytest.Hold) {
	for _, slug := range slugs {
		holds = append(holds, e.rt.HoldBuild(slug))
		ids = append(ids, e.trigger(owner, e.project(owner, slug)))
	}
	e.t.Cleanup(func() {
		for _, h := range holds {
			select {
			case <-h.Entered():
				h.Release(nil)
			default:
			}
		}
	})
	return ids, holds
}

// TestFreeAccountsCannotHoldEveryBuildSlot: two FREE accounts with builds
// that never end hold 3 of the 4 slots (the FREE pool), not 4: bob's second
// waits with a line saying why, and carol, on a paid plan, builds and goes
// LIVE meanwhile. When one FREE build ends, bob's starts.
func TestFreeAccountsCannotHoldEveryBuildSlot(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		alice, bob, carol := platform.NewID(), platform.NewID(), platform.NewID()
		free := deployments.Share{Max: 2, Free: true}
		e := newEnv(t, bdb, envOpts{maxConc: 4, shares: planShares{alice: free, bob: free}})
		_, as := e.holdAll(alice, "a1", "a2")
		as[0].WaitEntered(t)
		as[1].WaitEntered(t)
		bobs, bs := e.holdAll(bob, "b1", "b2")
		bs[0].WaitEntered(t)
		platformtest.Eventually(t, 30*time.Second, "bob's second deployment to say why it waits", func() bool {
			return strings.Contains(e.logText(bobs[1]), "queued: free-plan builds hold 3 of the 4 build slots")
		})
		carols := e.trigger(carol, e.project(carol, "c1"))
		e.waitStatus(carols, deployments.StatusLive)
		assert.Equal(t, deployments.StatusQueued, e.get(bobs[1]).Status)
		select {
		case <-bs[1].Entered():
			t.Fatal("a fourth FREE build started")
		default:
		}
		as[0].Release(nil)
		bs[1].WaitEntered(t) // a FREE slot freed: bob's second starts
	})
}

// TestWaitingAccountGoesBeforeExtraBuilds: with both slots held by alice
// and her third deployment queued first, bob's deployment queued after it
// takes the first slot that frees; hers waits with its position.
func TestWaitingAccountGoesBeforeExtraBuilds(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		alice, bob := platform.NewID(), platform.NewID()
		e := newEnv(t, bdb, envOpts{maxConc: 2, shares: planShares{alice: {Max: 3}}})
		alices, as := e.holdAll(alice, "a1", "a2", "a3")
		as[0].WaitEntered(t)
		as[1].WaitEntered(t)
		platformtest.Eventually(t, 30*time.Second, "alice's third deployment to wait for a slot", func() bool {
			return strings.Contains(e.logText(alices[2]), "queued: position 1 for the next free build slot (2 run at once)")
		})
		bobs, bh := e.holdAll(bob, "b1")
		platformtest.Eventually(t, 30*time.Second, "bob's deployment to queue ahead of alice's third", func() bool {
			return strings.Contains(e.logText(bobs[0]), "queued: position 1 for the next free build slot")
		})
		as[0].Release(nil)
		bh[0].WaitEntered(t)
		// alice's first two started together (two slots), in either order;
		// the third build to start is bob's, not alice's older third.
		builds := e.rt.Builds()
		require.Len(t, builds, 3, "builds started: %v", builds)
		assert.ElementsMatch(t, []string{alices[0], alices[1]}, builds[:2])
		assert.Equal(t, bobs[0], builds[2], "bob's build before alice's older third")
		platformtest.Eventually(t, 30*time.Second, "alice's third deployment to be next", func() bool {
			return strings.Contains(e.logText(alices[2]), "queued: position 1 for the next free build slot (2 run at once)") &&
				strings.Count(e.logText(alices[2]), "queued: position") == 3
		})
		as[1].Release(nil)
		as[2].WaitEntered(t)
	})
}

// TestPriorityBuildsGoFirst: with one slot taken, a deployment of a priority
// owner queued after another owner's starts first, and the other one's log
// shows its position.
func TestPriorityBuildsGoFirst(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		dave, erin, frank := platform.NewID(), platform.NewID(), platform.NewID()
		e := newEnv(t, bdb, envOpts{maxConc: 1, shares: priorityShares{frank: true}})
		hold := e.rt.HoldBuild("d1")
		e.trigger(dave, e.project(dave, "d1"))
		hold.WaitEntered(t)
		erins := e.trigger(erin, e.project(erin, "e1"))
		franks := e.trigger(frank, e.project(frank, "f1"))
		platformtest.Eventually(t, 30*time.Second, "erin's deployment to show its position", func() bool {
			return strings.Contains(e.logText(erins), "queued: position 2 for the next free build slot")
		})
		hold.Release(nil)
		e.waitStatus(franks, deployments.StatusLive)
		e.waitStatus(erins, deployments.StatusLive)
		builds := e.rt.Builds()
		require.Len(t, builds, 3)
		assert.Equal(t, []string{franks, erins}, builds[1:], "frank's priority build ran before erin's older one")
	})
}

// logText is the deployment's stored log, one line per line.
func (e *env) logText(id string) string {
	var b strings.Builder
	for _, l := range e.lines(id) {
		b.WriteString(l.Message)
		b.WriteByte('\n')
	}
	return b.String()
}
