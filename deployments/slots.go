package deployments

import (
	"context"
	"time"

	"github.com/keelson-dev/keelson/deployments/slots"
)

// The build slots' rules and queue live in deployments/slots; these names
// keep the module's API.
type (
	// Share is an account's part of the build slots, from its plan.
	Share = slots.Share
	// Shares says each account's Share.
	Shares = slots.Shares
	// SlotPolicy is how many build slots there are and how many FREE accounts may hold.
	SlotPolicy = slots.Policy
	// SlotUse is what holds the slots now.
	SlotUse = slots.Use
	// SlotWaiter is a deployment waiting for a build slot.
	SlotWaiter = slots.Waiter
	// Wait is why a waiter was not given a slot.
	Wait = slots.Wait
	// BuildSlot is one deployment holding, or waiting for, a build slot.
	BuildSlot = slots.Slot
	// SlotRequest is a deployment asking for a build slot.
	SlotRequest = slots.Request
	// SlotAnswer is what BuildSlotAcquire decided.
	SlotAnswer = slots.Answer
)

// Reasons to wait.
const (
	WaitShare = slots.WaitShare
	WaitFree  = slots.WaitFree
	WaitSlot  = slots.WaitSlot
)

// DefaultShare is the share of an account whose plan an engine cannot read.
func DefaultShare(max int) Share { return slots.DefaultShare(max) }

// inWorkflow are the statuses of a deployment whose steps still run (or may):
// its build slot is held; in any other status, or deleted, it is free.
var inWorkflow = []string{string(StatusQueued), string(StatusBuilding), string(StatusProvisioning), string(StatusConfiguringDNS)}

func (s *Store) slots() *slots.Queue { return slots.NewQueue(s.db, s.clock, inWorkflow...) }

// BuildSlotAcquire asks a slot for req's deployment under policy (slots.Queue.Acquire).
func (s *Store) BuildSlotAcquire(ctx context.Context, req SlotRequest, policy SlotPolicy) (SlotAnswer, error) {
	return s.slots().Acquire(ctx, req, policy)
}

// BuildSlotRenew moves the lease of id's slot on to until.
func (s *Store) BuildSlotRenew(ctx context.Context, id string, until time.Time) error {
	return s.slots().Renew(ctx, id, until)
}

// BuildSlotRelease frees id's slot and gives the free slots to the waiters by policy.
func (s *Store) BuildSlotRelease(ctx context.Context, id string, policy SlotPolicy, lease time.Duration) error {
	return s.slots().Release(ctx, id, policy, lease)
}
