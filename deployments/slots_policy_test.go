package deployments_test

import (
	"testing"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/stretchr/testify/assert"
)

var (
	freeShare = deployments.Share{Max: 2, Free: true}
	paidShare = deployments.Share{Max: 2}
	prioShare = deployments.Share{Max: 4, Priority: true}
)

func waiter(id, owner string, sh deployments.Share) deployments.SlotWaiter {
	return deployments.SlotWaiter{ID: id, Owner: owner, Share: sh}
}

// slotPolicyCases are TestSlotPolicyAssign's cases.
var slotPolicyCases = []struct {
	name    string
	policy  deployments.SlotPolicy
	use     deployments.SlotUse
	waiting []deployments.SlotWaiter
	start   []string
	waits   map[string]deployments.Wait
}{{
	name:    "two FREE accounts never hold every slot; a paid account goes before their extra builds",
	policy:  deployments.SlotPolicy{Slots: 4},
	waiting: []deployments.SlotWaiter{waiter("a1", "alice", freeShare), waiter("a2", "alice", freeShare), waiter("b1", "bob", freeShare), waiter("b2", "bob", freeShare), waiter("c1", "carol", paidShare)},
	start:   []string{"a1", "b1", "c1", "a2"},
	waits:   map[string]deployments.Wait{"b2": {Reason: deployments.WaitFree, Running: 3}},
}, {
	name:    "the FREE pool leaves the last slot empty while only FREE builds wait",
	policy:  deployments.SlotPolicy{Slots: 4},
	use:     deployments.SlotUse{Busy: 3, Owners: map[string]int{"alice": 2, "bob": 1}, Free: 3},
	waiting: []deployments.SlotWaiter{waiter("b2", "bob", freeShare), waiter("d1", "dave", freeShare)},
	waits:   map[string]deployments.Wait{"b2": {Reason: deployments.WaitFree, Running: 3}, "d1": {Reason: deployments.WaitFree, Running: 3}},
}, {
	name:    "another account's waiting build goes before an account's extra one, even a younger one",
	policy:  deployments.SlotPolicy{Slots: 2},
	use:     deployments.SlotUse{Busy: 1, Owners: map[string]int{"alice": 1}},
	waiting: []deployments.SlotWaiter{waiter("a2", "alice", paidShare), waiter("b1", "bob", paidShare)},
	start:   []string{"b1"},
	waits:   map[string]deployments.Wait{"a2": {Reason: deployments.WaitSlot, Position: 1}},
}, {
	name:    "an account at its share waits whatever is free",
	policy:  deployments.SlotPolicy{Slots: 8},
	use:     deployments.SlotUse{Busy: 2, Owners: map[string]int{"alice": 2}},
	waiting: []deployments.SlotWaiter{waiter("a3", "alice", paidShare), waiter("b1", "bob", paidShare)},
	start:   []string{"b1"},
	waits:   map[string]deployments.Wait{"a3": {Reason: deployments.WaitShare, Running: 2}},
}, {
	name:    "priority first, then fewest running, then oldest; positions in that order",
	policy:  deployments.SlotPolicy{Slots: 2},
	use:     deployments.SlotUse{Busy: 1, Owners: map[string]int{"frank": 1}},
	waiting: []deployments.SlotWaiter{waiter("a1", "alice", paidShare), waiter("b1", "bob", paidShare), waiter("f2", "frank", prioShare), waiter("a2", "alice", paidShare)},
	start:   []string{"f2"},
	waits: map[string]deployments.Wait{"a1": {Reason: deployments.WaitSlot, Position: 1}, "b1": {Reason: deployments.WaitSlot, Position: 2},
		"a2": {Reason: deployments.WaitSlot, Position: 3}},
}, {
	name:    "one slot: a FREE account may hold it",
	policy:  deployments.SlotPolicy{Slots: 1},
	waiting: []deployments.SlotWaiter{waiter("a1", "alice", freeShare)},
	start:   []string{"a1"},
}, {
	name:    "a FREE pool set lower",
	policy:  deployments.SlotPolicy{Slots: 4, FreeSlots: 1},
	waiting: []deployments.SlotWaiter{waiter("a1", "alice", freeShare), waiter("b1", "bob", freeShare), waiter("c1", "carol", paidShare)},
	start:   []string{"a1", "c1"},
	waits:   map[string]deployments.Wait{"b1": {Reason: deployments.WaitFree, Running: 1}},
}, {
	name:    "a share below 1 counts as 1",
	policy:  deployments.SlotPolicy{Slots: 4},
	waiting: []deployments.SlotWaiter{waiter("a1", "alice", deployments.Share{}), waiter("a2", "alice", deployments.Share{})},
	start:   []string{"a1"},
	waits:   map[string]deployments.Wait{"a2": {Reason: deployments.WaitShare, Running: 1}},
}}

// TestSlotPolicyAssign: the fair-share rules both engines use, case by case.
func TestSlotPolicyAssign(t *testing.T) {
	for _, c := range slotPolicyCases {
		t.Run(c.name, func(t *testing.T) {
			start, why := c.policy.Assign(&c.use, c.waiting)
			var got []string
			started := map[int]bool{}
			for _, i := range start {
				got = append(got, c.waiting[i].ID)
				started[i] = true
			}
			assert.Equal(t, c.start, got)
			waits := map[string]deployments.Wait{}
			for i, w := range c.waiting {
				if !started[i] {
					waits[w.ID] = why(i)
				}
			}
			if c.waits == nil {
				c.waits = map[string]deployments.Wait{}
			}
			assert.Equal(t, c.waits, waits)
		})
	}
}

// TestWaitNotes: the log lines of each wait, the same on both engines.
func TestWaitNotes(t *testing.T) {
	p := deployments.SlotPolicy{Slots: 4}
	assert.Equal(t, "queued: 2 of your deployments are running, as many as your plan runs at once; this one starts when one of them ends",
		deployments.Wait{Reason: deployments.WaitShare, Running: 2}.Note(p))
	assert.Equal(t, "queued: free-plan builds hold 3 of the 4 build slots, as many as they may hold together; this one starts when one of them ends",
		deployments.Wait{Reason: deployments.WaitFree, Running: 3}.Note(p))
	assert.Equal(t, "queued: position 2 for the next free build slot (4 run at once)",
		deployments.Wait{Reason: deployments.WaitSlot, Position: 2}.Note(p))
}
