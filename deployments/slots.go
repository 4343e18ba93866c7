package deployments

import (
	"context"
	"slices"
	"time"

	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// BuildSlot is one deployment holding, or waiting for, one of the build
// slots of engines whose deployments run in several processes (the Temporal
// engine; the embedded engine counts its own runs in memory). The rows are
// the whole queue, so every worker applies the fair-share rules
// (SlotPolicy) to the same state: a deployment holds its slot from before
// BUILD until it is LIVE or ended.
type BuildSlot struct {
	bun.BaseModel `bun:"table:deployment_build_slots"`

	DeploymentID string `bun:"deployment_id,pk,type:varchar(36)"`
	OwnerID      string `bun:"owner_id,notnull,type:varchar(36)"`
	// Granted: the deployment holds a slot; otherwise it waits for one.
	// (No bun defaults: bun would write a column's default for false.)
	Granted bool `bun:"granted,notnull"`
	// The owner's share as the deployment's last try read it.
	ShareMax int  `bun:"share_max,notnull"`
	Priority bool `bun:"priority,notnull"`
	Free     bool `bun:"free,notnull"`
	// AcquiredAt is when the deployment first asked: waiters are served in
	// this order (after priority and the fewest running).
	AcquiredAt time.Time `bun:"acquired_at,notnull"`
	// LeaseUntil is, for a holder, when it is next checked (its workflow may
	// have ended without releasing the slot; BuildSlotRenew moves it on); for
	// a waiter, when it counts as gone unless it asks again.
	LeaseUntil time.Time `bun:"lease_until,notnull"`
}

// inWorkflow are the statuses of a deployment whose steps still run (or may):
// a slot held by a deployment in any other status, or by a deleted one, is free.
var inWorkflow = []Status{StatusQueued, StatusBuilding, StatusProvisioning, StatusConfiguringDNS}

// SlotRequest is a deployment asking for a build slot.
type SlotRequest struct {
	DeploymentID, OwnerID string
	Share                 Share
	// Lease is how long a slot given counts as held before its holder is
	// checked; WaitLease how long the request waits without asking again
	// before it is dropped from the queue (longer than the time between tries).
	Lease, WaitLease time.Duration
}

// SlotAnswer is what BuildSlotAcquire decided.
type SlotAnswer struct {
	Granted bool
	// Wait is why the deployment still waits (when not Granted).
	Wait Wait
	// Expired are the held slots whose lease ran out (when not Granted):
	// the caller checks their holders (BuildSlotRenew or BuildSlotRelease).
	Expired []BuildSlot
}

// buildSlotsLock is the key serialising the queue's transactions (Postgres;
// SQLite has a single writer).
const buildSlotsLock = "deployment_build_slots"

// BuildSlotAcquire asks a slot for req's deployment under policy: it joins
// the queue (or renews its place), then every free slot is given by the
// fair-share rules to the deployments waiting, this one or others (those
// find their slot at their next try). A deployment that holds a slot
// already keeps it (a retried acquire succeeds). First the slots of
// deployments that left the workflow (LIVE, FAILED, CANCELLED, deleted) and
// waiters that stopped asking are dropped. All in one transaction under one
// lock, so concurrent workers never give more than policy allows.
func (s *Store) BuildSlotAcquire(ctx context.Context, req SlotRequest, policy SlotPolicy) (SlotAnswer, error) {
	var ans SlotAnswer
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		ans = SlotAnswer{}
		now := s.now()
		rows, err := s.slotQueue(ctx, tx, now, "")
		if err != nil {
			return err
		}
		mine := slices.IndexFunc(rows, func(r BuildSlot) bool { return r.DeploymentID == req.DeploymentID })
		if mine >= 0 && rows[mine].Granted {
			ans.Granted = true
			return nil
		}
		row := BuildSlot{DeploymentID: req.DeploymentID, OwnerID: req.OwnerID, ShareMax: req.Share.Max, Priority: req.Share.Priority,
			Free: req.Share.Free, AcquiredAt: now, LeaseUntil: now.Add(req.WaitLease)}
		if mine >= 0 {
			row.AcquiredAt = rows[mine].AcquiredAt
			_, err = tx.NewUpdate().Model(&row).Column("owner_id", "share_max", "priority", "free", "lease_until").WherePK().Exec(ctx)
			rows[mine] = row
		} else {
			_, err = tx.NewInsert().Model(&row).Exec(ctx)
			rows = append(rows, row)
		}
		if err != nil {
			return err
		}
		granted, why, err := s.slotAssign(ctx, tx, rows, policy, now.Add(req.Lease))
		if err != nil {
			return err
		}
		if w, ok := why[req.DeploymentID]; ok {
			ans.Wait = w
			for _, r := range rows {
				if r.Granted && !r.LeaseUntil.After(now) {
					ans.Expired = append(ans.Expired, r)
				}
			}
			return nil
		}
		ans.Granted = granted[req.DeploymentID]
		return nil
	})
	return ans, db.Translate(err)
}

// slotQueue takes the queue's lock, drops the row of deployment drop (if
// any), those of deployments that left the workflow and of waiters whose
// lease ran out, and returns the others, oldest first.
func (s *Store) slotQueue(ctx context.Context, tx bun.Tx, now time.Time, drop string) ([]BuildSlot, error) {
	if err := db.LockTx(ctx, tx, buildSlotsLock); err != nil {
		return nil, err
	}
	if _, err := tx.NewDelete().Model((*BuildSlot)(nil)).
		Where("deployment_id = ? OR (granted = ? AND lease_until < ?) OR "+
			"NOT EXISTS (SELECT 1 FROM deployments AS d WHERE d.id = ?TableAlias.deployment_id AND d.status IN (?))",
			drop, false, now, bun.In(inWorkflow)).Exec(ctx); err != nil {
		return nil, err
	}
	var rows []BuildSlot
	err := tx.NewSelect().Model(&rows).OrderExpr("acquired_at ASC, deployment_id ASC").Scan(ctx)
	return rows, err
}

// slotAssign gives the free slots to the waiters of rows by policy, marking
// their rows held until lease, and returns the deployments given one and why
// each other waiter waits.
func (s *Store) slotAssign(ctx context.Context, tx bun.Tx, rows []BuildSlot, policy SlotPolicy, lease time.Time) (map[string]bool, map[string]Wait, error) {
	use := SlotUse{Owners: map[string]int{}}
	var waiting []SlotWaiter
	for _, r := range rows {
		if !r.Granted {
			waiting = append(waiting, SlotWaiter{ID: r.DeploymentID, Owner: r.OwnerID, Share: Share{Max: r.ShareMax, Priority: r.Priority, Free: r.Free}})
			continue
		}
		use.Busy++
		use.Owners[r.OwnerID]++
		if r.Free {
			use.Free++
		}
	}
	start, why := policy.Assign(&use, waiting)
	granted := map[string]bool{}
	for _, i := range start {
		id := waiting[i].ID
		granted[id] = true
		if _, err := tx.NewUpdate().Model((*BuildSlot)(nil)).Set("granted = ?", true).Set("lease_until = ?", lease).
			Where("deployment_id = ?", id).Exec(ctx); err != nil {
			return nil, nil, err
		}
	}
	waits := map[string]Wait{}
	for i, w := range waiting {
		if !granted[w.ID] {
			waits[w.ID] = why(i)
		}
	}
	return granted, waits, nil
}

// BuildSlotRenew moves the lease of id's slot on to until (its holder was
// found still running). Renewing an absent slot is not an error.
func (s *Store) BuildSlotRenew(ctx context.Context, id string, until time.Time) error {
	_, err := s.db.NewUpdate().Model((*BuildSlot)(nil)).Set("lease_until = ?", until.UTC()).
		Where("deployment_id = ?", id).Exec(ctx)
	return db.Translate(err)
}

// BuildSlotRelease frees id's slot (or drops it from the queue) and gives
// the free slots to the waiting deployments by policy, held for lease.
// Releasing an absent slot is not an error.
func (s *Store) BuildSlotRelease(ctx context.Context, id string, policy SlotPolicy, lease time.Duration) error {
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		now := s.now()
		rows, err := s.slotQueue(ctx, tx, now, id)
		if err != nil {
			return err
		}
		_, _, err = s.slotAssign(ctx, tx, rows, policy, now.Add(lease))
		return err
	})
	return db.Translate(err)
}
