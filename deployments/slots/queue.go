package slots

import (
	"context"
	"slices"
	"time"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// Slot is one deployment holding, or waiting for, one of the build
// slots of engines whose deployments run in several processes (the Temporal
// engine; the embedded engine counts its own runs in memory). The rows are
// the whole queue, so every worker applies the fair-share rules
// (Policy) to the same state: a deployment holds its slot from before
// BUILD until it is LIVE or ended.
type Slot struct {
	bun.BaseModel `bun:"table:deployment_build_slots,alias:build_slot"`

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
	// have ended without releasing the slot; Queue.Renew moves it on); for
	// a waiter, when it counts as gone unless it asks again.
	LeaseUntil time.Time `bun:"lease_until,notnull"`
}

// Queue is the slots table of one database: holders and waiters alike, read
// and written in one transaction under one lock.
type Queue struct {
	db    bun.IDB
	clock platform.Clock
	// inWorkflow are the statuses of a deployment whose steps still run (or
	// may): a slot held by a deployment in any other status, or by a deleted
	// one, is free.
	inWorkflow []string
}

// NewQueue returns the queue in idb's deployment_build_slots; a deployment
// (a row of the deployments table) holds its slot while its status is one
// of inWorkflow.
func NewQueue(idb bun.IDB, clock platform.Clock, inWorkflow ...string) *Queue {
	return &Queue{db: idb, clock: clock, inWorkflow: inWorkflow}
}

func (s *Queue) now() time.Time { return s.clock.Now().UTC().Truncate(time.Microsecond) }

// Request is a deployment asking for a build slot.
type Request struct {
	DeploymentID, OwnerID string
	Share                 Share
	// Lease is how long a slot given counts as held before its holder is
	// checked; WaitLease how long the request waits without asking again
	// before it is dropped from the queue (longer than the time between tries).
	Lease, WaitLease time.Duration
}

// Answer is what Queue.Acquire decided.
type Answer struct {
	Granted bool
	// Wait is why the deployment still waits (when not Granted).
	Wait Wait
	// Expired are the held slots whose lease ran out (when not Granted):
	// the caller checks their holders (Renew or Release).
	Expired []Slot
}

// buildSlotsLock is the key serialising the queue's transactions (Postgres;
// SQLite has a single writer).
const buildSlotsLock = "deployment_build_slots"

// Acquire asks a slot for req's deployment under policy: it joins
// the queue (or renews its place), then every free slot is given by the
// fair-share rules to the deployments waiting, this one or others (those
// find their slot at their next try). A deployment that holds a slot
// already keeps it (a retried acquire succeeds). First the slots of
// deployments that left the workflow (LIVE, FAILED, CANCELLED, deleted) and
// waiters that stopped asking are dropped. All in one transaction under one
// lock, so concurrent workers never give more than policy allows.
func (s *Queue) Acquire(ctx context.Context, req Request, policy Policy) (Answer, error) {
	var ans Answer
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		ans = Answer{}
		now := s.now()
		rows, err := s.slotQueue(ctx, tx, now, "")
		if err != nil {
			return err
		}
		mine := slices.IndexFunc(rows, func(r Slot) bool { return r.DeploymentID == req.DeploymentID })
		if mine >= 0 && rows[mine].Granted {
			ans.Granted = true
			return nil
		}
		row := Slot{DeploymentID: req.DeploymentID, OwnerID: req.OwnerID, ShareMax: req.Share.Max, Priority: req.Share.Priority,
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
func (s *Queue) slotQueue(ctx context.Context, tx bun.Tx, now time.Time, drop string) ([]Slot, error) {
	if err := db.LockTx(ctx, tx, buildSlotsLock); err != nil {
		return nil, err
	}
	if _, err := tx.NewDelete().Model((*Slot)(nil)).
		Where("deployment_id = ? OR (granted = ? AND lease_until < ?) OR "+
			"NOT EXISTS (SELECT 1 FROM deployments AS d WHERE d.id = ?TableAlias.deployment_id AND d.status IN (?))",
			drop, false, now, bun.In(s.inWorkflow)).Exec(ctx); err != nil {
		return nil, err
	}
	var rows []Slot
	err := tx.NewSelect().Model(&rows).OrderExpr("acquired_at ASC, deployment_id ASC").Scan(ctx)
	return rows, err
}

// slotAssign gives the free slots to the waiters of rows by policy, marking
// their rows held until lease, and returns the deployments given one and why
// each other waiter waits.
func (s *Queue) slotAssign(ctx context.Context, tx bun.Tx, rows []Slot, policy Policy, lease time.Time) (map[string]bool, map[string]Wait, error) {
	use := Use{Owners: map[string]int{}}
	var waiting []Waiter
	for _, r := range rows {
		if !r.Granted {
			waiting = append(waiting, Waiter{ID: r.DeploymentID, Owner: r.OwnerID, Share: Share{Max: r.ShareMax, Priority: r.Priority, Free: r.Free}})
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
		if _, err := tx.NewUpdate().Model((*Slot)(nil)).Set("granted = ?", true).Set("lease_until = ?", lease).
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

// Renew moves the lease of id's slot on to until (its holder was
// found still running). Renewing an absent slot is not an error.
func (s *Queue) Renew(ctx context.Context, id string, until time.Time) error {
	_, err := s.db.NewUpdate().Model((*Slot)(nil)).Set("lease_until = ?", until.UTC()).
		Where("deployment_id = ?", id).Exec(ctx)
	return db.Translate(err)
}

// Release frees id's slot (or drops it from the queue) and gives
// the free slots to the waiting deployments by policy, held for lease.
// Releasing an absent slot is not an error.
func (s *Queue) Release(ctx context.Context, id string, policy Policy, lease time.Duration) error {
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
