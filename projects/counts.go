package projects

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/keelson-dev/keelson/platform"
	"github.com/uptrace/bun"
)

// projectCountRow is the maxProjects counter of one owner: the number of the
// owner's projects that are not DELETED. Create takes a slot and the teardown
// that records DELETED gives it back, each in the transaction that changes the
// projects row, so the quota check reads one row instead of counting the
// owner's projects under the write lock.
type projectCountRow struct {
	bun.BaseModel `bun:"table:project_counts"`

	OwnerID string `bun:"owner_id,pk,type:varchar(36)"`
	Live    int    `bun:"live,notnull"`
}

// takeSlot adds one to owner's live projects unless max (> 0) are already
// live, in which case it answers the QUOTA_EXCEEDED 403. One statement, so
// concurrent creates of one owner serialise on the counter row (Postgres row
// lock, SQLite's single writer) and cannot both take the last slot.
func takeSlot(ctx context.Context, tx bun.Tx, owner string, plan *Plan) error {
	var live int
	err := tx.QueryRowContext(ctx, `INSERT INTO project_counts (owner_id, live) VALUES (?, 1)
ON CONFLICT (owner_id) DO UPDATE SET live = project_counts.live + 1
WHERE ? <= 0 OR project_counts.live < ?
RETURNING live`, owner, plan.MaxProjects, plan.MaxProjects).Scan(&live)
	if err == nil {
		return nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	if err := tx.NewSelect().Model((*projectCountRow)(nil)).Column("live").
		Where("owner_id = ?", owner).Scan(ctx, &live); err != nil {
		return err
	}
	return platform.Forbidden(fmt.Sprintf("maxProjects quota reached: %d of %d projects used on plan %s",
		live, plan.MaxProjects, plan.Name)).WithCode("QUOTA_EXCEEDED")
}

// giveBackSlot subtracts one from the live projects of project id's owner.
func giveBackSlot(ctx context.Context, tx bun.Tx, id string) error {
	_, err := tx.ExecContext(ctx, `UPDATE project_counts SET live = live - 1
WHERE live > 0 AND owner_id = (SELECT owner_id FROM projects WHERE id = ?)`, id)
	return err
}

// backfillCounts fills project_counts from the projects rows (migration 0002).
func backfillCounts(ctx context.Context, idb bun.IDB) error {
	_, err := idb.ExecContext(ctx, `INSERT INTO project_counts (owner_id, live)
SELECT owner_id, COUNT(*) FROM projects WHERE status <> ? GROUP BY owner_id`, StatusDeleted)
	return err
}
