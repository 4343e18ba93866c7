package deployments

import (
	"context"
	"time"

	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// BuildSlot is one deployment holding one of its owner's build slots: the
// per-owner cap of engines whose deployments run in several processes (the
// Temporal engine; the embedded engine counts its own runs in memory). A
// deployment holds its slot from before BUILD until it is LIVE or ended.
type BuildSlot struct {
	bun.BaseModel `bun:"table:deployment_build_slots"`

	DeploymentID string    `bun:"deployment_id,pk,type:varchar(36)"`
	OwnerID      string    `bun:"owner_id,notnull,type:varchar(36)"`
	AcquiredAt   time.Time `bun:"acquired_at,notnull"`
	// LeaseUntil is when the holder is next checked (its workflow may have
	// ended without releasing the slot); BuildSlotRenew moves it on.
	LeaseUntil time.Time `bun:"lease_until,notnull"`
}

// inWorkflow are the statuses of a deployment whose steps still run (or may):
// a slot held by a deployment in any other status, or by a deleted one, is free.
var inWorkflow = []Status{StatusQueued, StatusBuilding, StatusProvisioning, StatusConfiguringDNS}

// BuildSlotAcquire gives deployment id one of owner's limit build slots, with a
// lease of lease, unless owner holds limit already. A deployment that holds a
// slot already keeps it (a retried acquire succeeds). Slots of the owner's
// deployments that left the workflow (LIVE, FAILED, CANCELLED, deleted) are
// freed first. It returns whether id holds a slot and the owner's slots
// (id's included when granted).
//
// Count and insert are atomic: on Postgres an advisory transaction lock per
// owner serialises concurrent acquires; SQLite has a single writer.
func (s *Store) BuildSlotAcquire(ctx context.Context, id, owner string, limit int, lease time.Duration) (granted bool, held []BuildSlot, err error) {
	err = s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		granted, held = false, nil
		if err := db.LockTx(ctx, tx, "deployment_build_slots:"+owner); err != nil {
			return err
		}
		if _, err := tx.NewDelete().Model((*BuildSlot)(nil)).Where("owner_id = ?", owner).
			Where("NOT EXISTS (SELECT 1 FROM deployments AS d WHERE d.id = ?TableAlias.deployment_id AND d.status IN (?))",
				bun.In(inWorkflow)).Exec(ctx); err != nil {
			return err
		}
		if err := tx.NewSelect().Model(&held).Where("owner_id = ?", owner).
			OrderExpr("acquired_at ASC, deployment_id ASC").Scan(ctx); err != nil {
			return err
		}
		for _, h := range held {
			if h.DeploymentID == id {
				granted = true
				return nil
			}
		}
		if len(held) >= limit {
			return nil
		}
		now := s.now()
		slot := BuildSlot{DeploymentID: id, OwnerID: owner, AcquiredAt: now, LeaseUntil: now.Add(lease)}
		if _, err := tx.NewInsert().Model(&slot).Exec(ctx); err != nil {
			return err
		}
		granted, held = true, append(held, slot)
		return nil
	})
	return granted, held, db.Translate(err)
}

// BuildSlotRenew moves the lease of id's slot on to until (its holder was
// found still running). Renewing an absent slot is not an error.
func (s *Store) BuildSlotRenew(ctx context.Context, id string, until time.Time) error {
	_, err := s.db.NewUpdate().Model((*BuildSlot)(nil)).Set("lease_until = ?", until.UTC()).
		Where("deployment_id = ?", id).Exec(ctx)
	return db.Translate(err)
}

// BuildSlotRelease frees id's slot. Releasing an absent slot is not an error.
func (s *Store) BuildSlotRelease(ctx context.Context, id string) error {
	_, err := s.db.NewDelete().Model((*BuildSlot)(nil)).Where("deployment_id = ?", id).Exec(ctx)
	return db.Translate(err)
}
