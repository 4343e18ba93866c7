package deployments

import (
	"context"

	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// The account log budget (see deployments/logstream's budget.go): the
// queries over each deployment's LogBytes, and the hourly pass over every
// account.

// prunable are the statuses whose logs retention and the budget may delete:
// the deployment ended and nothing of it runs or logs any more.
var prunable = []Status{StatusFailed, StatusCancelled}

// messageBytes is the SQL expression of a log line's message size in bytes
// (UTF-8), the same count as len() of the Go string.
func messageBytes(idb bun.IDB) string {
	if db.IsPostgres(idb) {
		return "octet_length(message)"
	}
	return "length(CAST(message AS BLOB))"
}

// LogBytesOwned is the size of the stored log messages of owner's deployments.
func (s *Store) LogBytesOwned(ctx context.Context, owner string) (int64, error) {
	var n int64
	err := s.db.NewSelect().Model((*Deployment)(nil)).ColumnExpr("COALESCE(SUM(log_bytes), 0)").
		Where("owner_id = ?", owner).Scan(ctx, &n)
	return n, db.Translate(err)
}

// LogOwnersOf returns the owners of the deployments ids that exist.
func (s *Store) LogOwnersOf(ctx context.Context, ids []string) ([]string, error) {
	var owners []string
	err := s.db.NewSelect().Model((*Deployment)(nil)).ColumnExpr("DISTINCT owner_id").
		Where("id IN (?)", bun.In(ids)).Scan(ctx, &owners)
	return owners, db.Translate(err)
}

// logOwnersOver returns the owners whose deployments' stored log messages
// add up to more than budget.
func (s *Store) logOwnersOver(ctx context.Context, budget int64) ([]string, error) {
	var owners []string
	err := s.db.NewSelect().Model((*Deployment)(nil)).Column("owner_id").Group("owner_id").
		Having("SUM(log_bytes) > ?", budget).Scan(ctx, &owners)
	return owners, db.Translate(err)
}

// LogPruneOwner brings owner within budget: while the owner's stored log
// messages add up to more, the logs of their oldest ended deployment (FAILED
// or CANCELLED) whose logs are more than note are replaced by one system line
// holding note. Logs of LIVE deployments and of deployments in their
// workflow are never touched. It returns the deployments pruned.
func (s *Store) LogPruneOwner(ctx context.Context, owner string, budget int64, note string) ([]string, error) {
	total, err := s.LogBytesOwned(ctx, owner)
	if err != nil || total <= budget {
		return nil, err
	}
	var cands []struct {
		ID       string `bun:"id"`
		LogBytes int64  `bun:"log_bytes"`
	}
	if err := s.db.NewSelect().Model((*Deployment)(nil)).Column("id", "log_bytes").
		Where("owner_id = ? AND status IN (?) AND log_bytes > ?", owner, bun.In(prunable), len(note)).
		OrderExpr("created_at ASC, id ASC").Scan(ctx, &cands); err != nil {
		return nil, db.Translate(err)
	}
	var pruned []string
	for _, c := range cands {
		if total <= budget {
			break
		}
		ok, err := s.logReplace(ctx, c.ID, note)
		if err != nil {
			return pruned, err
		}
		if ok {
			pruned = append(pruned, c.ID)
			total -= c.LogBytes - int64(len(note))
		}
	}
	return pruned, nil
}

// logReplace replaces the logs of deployment id, if it is still FAILED or
// CANCELLED, by one system line holding note, numbered after the last line
// it had (a client resuming from a cursor still gets it). The row is updated
// first: lines being stored for it wait for this transaction.
func (s *Store) logReplace(ctx context.Context, id, note string) (bool, error) {
	done := false
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		res, err := tx.NewUpdate().Model((*Deployment)(nil)).Set("log_bytes = ?", len(note)).
			Where("id = ? AND status IN (?)", id, bun.In(prunable)).Exec(ctx)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err
		}
		var last *int64
		if err := tx.NewSelect().Model((*LogLine)(nil)).ColumnExpr("MAX(seq)").
			Where("deployment_id = ?", id).Scan(ctx, &last); err != nil {
			return err
		}
		if _, err := tx.NewDelete().Model((*LogLine)(nil)).Where("deployment_id = ?", id).Exec(ctx); err != nil {
			return err
		}
		line := LogLine{DeploymentID: id, Seq: 1, Time: s.now(), Stream: StreamSystem, Message: note}
		if last != nil {
			line.Seq = *last + 1
		}
		_, err = tx.NewInsert().Model(&line).Exec(ctx)
		done = err == nil
		return err
	})
	return done, db.Translate(err)
}

// EnforceLogBudgets brings every account whose logs are over the account
// budget within it (see the package's log budget) and returns how many
// deployments' logs were deleted. The hourly retention pass runs it.
func (s *Service) EnforceLogBudgets(ctx context.Context) (int, error) {
	budget := s.logs.Budget()
	if budget < 0 {
		return 0, nil
	}
	owners, err := s.store.logOwnersOver(ctx, budget)
	if err != nil {
		return 0, err
	}
	return s.logs.PruneOwners(ctx, owners)
}

// LogUsage returns the size of the owner's stored log messages and the
// account log budget (0: none), for GET /usage.
func (s *Service) LogUsage(ctx context.Context, owner string) (used, budget int64, err error) {
	used, err = s.store.LogBytesOwned(ctx, owner)
	return used, max(s.logs.Budget(), 0), err
}
