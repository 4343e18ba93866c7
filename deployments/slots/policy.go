// Package slots is the build-slot policy both deployment engines follow and
// the queue the Temporal engine keeps in the database (deployment_build_slots)
// to apply it across workers. It knows nothing of deployments but their ids,
// owners and, in the queue's one query, which statuses still hold a slot.
package slots

import (
	"context"
	"fmt"
)

// Fair build slots: the rules both engines follow (the embedded engine over
// its runs in memory, the Temporal engine over deployment_build_slots).
//
//   - An account runs at most its Share.Max deployments at once.
//   - Accounts on a FREE plan (Share.Free) together hold at most
//     Policy.FreeSlots of the Slots (by default all but one), so FREE
//     builds that sleep to their timeout cannot hold every slot: the rest is
//     kept for the other plans.
//   - When a slot frees, the waiting deployment taken is, among those whose
//     account is under its share (and under the FREE pool for FREE
//     accounts): an account with priority builds first, then the account
//     with the fewest deployments running, then the oldest. So another
//     account's waiting build goes before an account's extra builds.

// Share is an account's part of the build slots, from its plan.
type Share struct {
	// Max is how many of the account's deployments may run at once
	// (less than 1 counts as 1).
	Max int
	// Priority: the account's builds are taken before others'.
	Priority bool
	// Free: the account is on a FREE-tier plan; FREE accounts together hold
	// at most Policy.FreeSlots.
	Free bool
}

// Shares says each account's Share (the reference server answers from the
// account plan). An engine that cannot read one uses its default share,
// counted as FREE.
type Shares interface {
	BuildShare(ctx context.Context, ownerID string) (Share, error)
}

// DefaultShare is the share of an account whose plan an engine cannot read
// (no Shares, or it failed): max at once, counted as FREE (fails closed).
func DefaultShare(max int) Share { return Share{Max: max, Free: true} }

// Policy is how many build slots there are and how many of them FREE
// accounts may hold together.
type Policy struct {
	Slots int
	// FreeSlots is at most Slots-1 when there are two slots or more (0 or out
	// of range: Slots-1); with one slot, FREE accounts may hold it.
	FreeSlots int
}

// normal fills the defaults.
func (p Policy) normal() Policy {
	p.Slots = max(p.Slots, 1)
	if p.FreeSlots <= 0 || p.FreeSlots >= p.Slots {
		p.FreeSlots = max(p.Slots-1, 1)
	}
	return p
}

// Use is what holds the slots now.
type Use struct {
	Busy   int            // slots taken (builds, and anything else the engine counts)
	Owners map[string]int // builds running per account
	Free   int            // builds of FREE accounts running
}

// Waiter is a deployment waiting for a build slot.
type Waiter struct {
	ID, Owner string
	Share     Share
}

// WaitReason says why a deployment waits.
type WaitReason int

// Reasons to wait.
const (
	WaitShare WaitReason = iota + 1 // its account runs its Share.Max
	WaitFree                        // FREE builds hold the FREE pool
	WaitSlot                        // every slot is taken
)

// Wait is why a waiter was not given a slot.
type Wait struct {
	Reason WaitReason
	// Running is the account's deployments running (WaitShare) or the FREE
	// builds running (WaitFree).
	Running int
	// Position is the waiter's rank for the next free slot (WaitSlot), 1 first.
	Position int
}

// Note is the log line of a deployment that waits for w, with p's figures.
func (w Wait) Note(p Policy) string {
	p = p.normal()
	switch w.Reason {
	case WaitShare:
		return fmt.Sprintf("queued: %d of your deployments are running, as many as your plan runs at once; this one starts when one of them ends", w.Running)
	case WaitFree:
		return fmt.Sprintf("queued: free-plan builds hold %d of the %d build slots, as many as they may hold together; this one starts when one of them ends", w.Running, p.Slots)
	default:
		return fmt.Sprintf("queued: position %d for the next free build slot (%d run at once)", w.Position, p.Slots)
	}
}

// Assign gives free slots to waiters (oldest first in the slice) by the
// rules above, counting each start in use, and returns the indexes started,
// in the order taken, and why a waiter not started waits (asked after Assign:
// it reads use as the starts left it).
func (p Policy) Assign(use *Use, waiting []Waiter) (start []int, why func(i int) Wait) {
	p = p.normal()
	if use.Owners == nil {
		use.Owners = map[string]int{}
	}
	started := make([]bool, len(waiting))
	blocked := func(w Waiter) WaitReason {
		switch {
		case use.Owners[w.Owner] >= max(w.Share.Max, 1):
			return WaitShare
		case w.Share.Free && use.Free >= p.FreeSlots:
			return WaitFree
		}
		return 0
	}
	// before reports whether waiter i is taken before waiter j.
	before := func(i, j int) bool {
		a, b := waiting[i], waiting[j]
		if a.Share.Priority != b.Share.Priority {
			return a.Share.Priority
		}
		if ra, rb := use.Owners[a.Owner], use.Owners[b.Owner]; ra != rb {
			return ra < rb
		}
		return i < j
	}
	for use.Busy < p.Slots {
		best := -1
		for i, w := range waiting {
			if !started[i] && blocked(w) == 0 && (best < 0 || before(i, best)) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		w := waiting[best]
		started[best], start = true, append(start, best)
		use.Busy++
		use.Owners[w.Owner]++
		if w.Share.Free {
			use.Free++
		}
	}
	why = func(i int) Wait {
		w := waiting[i]
		switch r := blocked(w); r {
		case WaitShare:
			return Wait{Reason: r, Running: use.Owners[w.Owner]}
		case WaitFree:
			return Wait{Reason: r, Running: use.Free}
		}
		pos := 1
		for j, o := range waiting {
			if j != i && !started[j] && blocked(o) == 0 && before(j, i) {
				pos++
			}
		}
		return Wait{Reason: WaitSlot, Position: pos}
	}
	return start, why
}
