package deployments

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// Account log budget: every account's stored log messages (build, app and
// system lines of all its deployments) count against LogsConfig.AccountBudget.
// Each deployment's row keeps the size of its stored messages (LogBytes,
// updated in the transactions that store, trim and delete lines), so an
// account's use is one sum over its deployments.
//
// Past the budget, the logs of the account's ended deployments (FAILED or
// CANCELLED, replaced ones included) are deleted whole, oldest first, until
// the account is within it again; each keeps one system line saying why. The
// logs of a LIVE deployment and of one still in its workflow (QUEUED,
// BUILDING, PROVISIONING, CONFIGURING_DNS) are never deleted: those are
// bounded by the per-deployment caps (MaxBuildLines, MaxBuildBytes,
// MaxAppLines) instead, so an account's use can stay over its budget while
// they hold more than it.
//
// The log writer notes the deployments whose lines it stored; a goroutine
// of Logs checks their accounts at most every BudgetCheckEvery. The hourly
// retention pass (Service.EnforceLogBudgets) checks every account, for lines
// other processes stored and a budget lowered at a restart.

// DefaultAccountLogBudget is LogsConfig.AccountBudget's default: 512 MiB of
// log messages per account.
const DefaultAccountLogBudget int64 = 512 << 20

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

// logOwnersOf returns the owners of the deployments ids that exist.
func (s *Store) logOwnersOf(ctx context.Context, ids []string) ([]string, error) {
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

// budgetNote is the line left in place of logs deleted for the budget.
func budgetNote(budget int64) string {
	size := fmt.Sprintf("%d bytes", budget)
	if budget >= 1<<20 {
		size = fmt.Sprintf("%d MiB", budget>>20)
	}
	return "the logs of this deployment were deleted: this account's stored logs passed their budget of " + size +
		", and the logs of its oldest ended deployments are deleted first"
}

// grew notes that lines of deployment id were stored (the writer calls it).
func (l *Logs) grew(id string) {
	if l.cfg.AccountBudget < 0 {
		return
	}
	l.bmu.Lock()
	l.grown[id] = struct{}{}
	l.bmu.Unlock()
	select {
	case l.budgetWake <- struct{}{}:
	default:
	}
}

// runBudget checks the accounts of the deployments whose lines were stored,
// at most every BudgetCheckEvery, until ctx ends.
func (l *Logs) runBudget(ctx context.Context) {
	defer close(l.budgetDone)
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.budgetWake:
		}
		l.bmu.Lock()
		ids := make([]string, 0, len(l.grown))
		for id := range l.grown {
			ids = append(ids, id)
		}
		clear(l.grown)
		l.bmu.Unlock()
		for len(ids) > 0 && ctx.Err() == nil {
			page := ids[:min(len(ids), endCheckPage)]
			ids = ids[len(page):]
			owners, err := l.store.logOwnersOf(ctx, page)
			if err != nil {
				l.log.Warn("read the owners of deployments for the log budget", "err", err)
				break
			}
			_, _ = l.pruneOwners(ctx, owners) // logged
		}
		t := time.NewTimer(l.cfg.BudgetCheckEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// pruneOwners brings each owner within the account budget and returns how
// many deployments' logs were deleted (and the first error; the other
// owners are still checked).
func (l *Logs) pruneOwners(ctx context.Context, owners []string) (int, error) {
	slices.Sort(owners)
	n := 0
	var first error
	for _, o := range owners {
		pruned, err := l.store.LogPruneOwner(ctx, o, l.cfg.AccountBudget, budgetNote(l.cfg.AccountBudget))
		n += len(pruned)
		if err != nil {
			if ctx.Err() == nil {
				l.log.Warn("delete logs over the account budget", "owner", o, "err", err)
			}
			first = cmp.Or(first, err)
			continue
		}
		if len(pruned) > 0 {
			l.log.Info("deleted the logs of ended deployments over the account log budget", "owner", o, "deployments", len(pruned))
		}
	}
	return n, first
}

// EnforceLogBudgets brings every account whose logs are over the account
// budget within it (see the package's log budget) and returns how many
// deployments' logs were deleted. The hourly retention pass runs it.
func (s *Service) EnforceLogBudgets(ctx context.Context) (int, error) {
	budget := s.logs.cfg.AccountBudget
	if budget < 0 {
		return 0, nil
	}
	owners, err := s.store.logOwnersOver(ctx, budget)
	if err != nil {
		return 0, err
	}
	return s.logs.pruneOwners(ctx, owners)
}

// LogUsage returns the size of the owner's stored log messages and the
// account log budget (0: none), for GET /usage.
func (s *Service) LogUsage(ctx context.Context, owner string) (used, budget int64, err error) {
	used, err = s.store.LogBytesOwned(ctx, owner)
	return used, max(s.logs.cfg.AccountBudget, 0), err
}
