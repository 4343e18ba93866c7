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
		<-holds[0].Entered()
		<-holds[1].Entered()
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
		<-holds[2].Entered() // her next one starts when one of hers ends
	})
}

// priorityShares gives the listed owners priority; everyone's cap is one.
type priorityShares map[string]bool

func (p priorityShares) BuildShare(_ context.Context, owner string) (int, bool, error) {
	return 1, p[owner], nil
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
		<-hold.Entered()
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
