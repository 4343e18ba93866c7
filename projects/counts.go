package projects

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// projectCountRow is the maxProjects counter of one quota account
// (PlanSource.QuotaPlan: a user, with the teams that borrow their plan, or a
// team with a plan of its own): its projects (quota_id) not DELETED. Create
// takes a slot and the teardown that records DELETED gives it back, each in
// the transaction that changes the projects row, so the quota check reads
// one row instead of counting the projects under the write lock. A project
// gives its slot back where it took it, whatever its team's plan is now.
type projectCountRow struct {
	bun.BaseModel `bun:"table:project_counts"`

	OwnerID string `bun:"owner_id,pk,type:varchar(36)"` // the quota account
	Live    int    `bun:"live,notnull"`
}

// takeSlot adds one to quota account owner's live projects unless max (> 0)
// are already live, in which case it answers the QUOTA_EXCEEDED 403. One
// statement, so concurrent creates counted against one account (a user's or
// their borrowing teams') serialise on the counter row (Postgres row lock,
// SQLite's single writer) and cannot both take the last slot.
func (s *Service) takeSlot(ctx context.Context, tx bun.Tx, owner string, plan *Plan) error {
	var live int
	err := s.create.take.QueryRowTx(ctx, s.d.DB, tx, owner, plan.MaxProjects, plan.MaxProjects).Scan(&live)
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

// giveBackSlot subtracts one from the counter project id's slot is in.
func giveBackSlot(ctx context.Context, tx bun.Tx, id string) error {
	_, err := tx.ExecContext(ctx, `UPDATE project_counts SET live = live - 1
WHERE live > 0 AND owner_id = (SELECT quota_id FROM projects WHERE id = ?)`, id)
	return err
}

// countedAgainst is the live projects counted against quota account id.
func countedAgainst(ctx context.Context, idb bun.IDB, id string) (int, error) {
	var live []int
	err := idb.NewSelect().Model((*projectCountRow)(nil)).Column("live").
		Where("owner_id = ?", id).Scan(ctx, &live)
	if err != nil || len(live) == 0 {
		return 0, err
	}
	return live[0], nil
}

// backfillQuotaIDs counts the rows before migration 0007 under their owner.
func backfillQuotaIDs(ctx context.Context, idb bun.IDB) error {
	_, err := idb.ExecContext(ctx, "UPDATE projects SET quota_id = owner_id WHERE quota_id = ''")
	return err
}

// backfillCounts fills project_counts from the projects rows (migration 0002).
func backfillCounts(ctx context.Context, idb bun.IDB) error {
	_, err := idb.ExecContext(ctx, `INSERT INTO project_counts (owner_id, live)
SELECT owner_id, COUNT(*) FROM projects WHERE status <> ? GROUP BY owner_id`, StatusDeleted)
	return err
}

// createStmts are the statements of Create's transaction (the quota slot,
// the slug check, the insert), prepared once: bun interpolates arguments into
// a statement's text, which SQLite then parses again on every create, under
// its write lock.
type createStmts struct {
	take, slug, insert *db.Prepared
}

func newCreateStmts() createStmts {
	return createStmts{
		take: db.NewPrepared(`INSERT INTO project_counts (owner_id, live) VALUES (?, 1)
ON CONFLICT (owner_id) DO UPDATE SET live = project_counts.live + 1
WHERE ? <= 0 OR project_counts.live < ?
RETURNING live`),
		// The status literal keeps the partial index projects_slug_live_key usable.
		slug: db.NewPrepared(`SELECT COUNT(*) FROM projects WHERE slug = ? AND status <> '` + StatusDeleted + `'`),
		insert: db.NewPrepared(`INSERT INTO projects (id, owner_id, team_id, created_by, quota_id, name, slug, repo_url, repo_key, framework, port,
is_private, auto_deploy, auto_deploy_branch, codehost_repository_id, webhook_secret, region, plan_name, env_vars,
start_command, build_command, status, error_message, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
	}
}

// prepare prepares the statements (before Create's transaction: see
// db.Prepared.Prepare).
func (c *createStmts) prepare(ctx context.Context, bdb *bun.DB) error {
	for _, st := range []*db.Prepared{c.take, c.slug, c.insert} {
		if err := st.Prepare(ctx, bdb); err != nil {
			return err
		}
	}
	return nil
}

func (c *createStmts) close() {
	for _, st := range []*db.Prepared{c.take, c.slug, c.insert} {
		_ = st.Close()
	}
}

// insertProject inserts row (a new project: no teardown, not deleted).
func (c *createStmts) insertProject(ctx context.Context, bdb *bun.DB, tx bun.Tx, r *projectRow) error {
	_, err := c.insert.ExecTx(ctx, bdb, tx, r.ID, r.OwnerID, r.TeamID, r.CreatedBy, r.QuotaID, r.Name, r.Slug, r.RepoURL, r.RepoKey, r.Framework, r.Port,
		r.IsPrivate, r.AutoDeploy, r.AutoDeployBranch, r.CodehostRepositoryID, r.WebhookSecret, r.Region, r.PlanName, r.EnvVars,
		r.StartCommand, r.BuildCommand, r.Status, r.ErrorMessage, db.TimeArg(bdb, r.CreatedAt), db.TimeArg(bdb, r.UpdatedAt))
	return err
}
