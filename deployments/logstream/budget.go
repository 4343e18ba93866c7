package logstream

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Account log budget: every account's stored log messages (build, app and
// system lines of all its deployments) count against Config.AccountBudget.
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
// of the Hub checks their accounts at most every BudgetCheckEvery. The hourly
// retention pass (deployments' Service.EnforceLogBudgets) checks every account, for lines
// other processes stored and a budget lowered at a restart.

// DefaultAccountLogBudget is Config.AccountBudget's default: 512 MiB of
// log messages per account.
const DefaultAccountLogBudget int64 = 512 << 20

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
func (l *Hub) grew(id string) {
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
func (l *Hub) runBudget(ctx context.Context) {
	defer close(l.budgetDone)
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.budgetWake:
		}
		l.bmu.Lock()
		ids := slices.Collect(maps.Keys(l.grown))
		clear(l.grown)
		l.bmu.Unlock()
		for page := range slices.Chunk(ids, endCheckPage) {
			if ctx.Err() != nil {
				break
			}
			owners, err := l.store.LogOwnersOf(ctx, page)
			if err != nil {
				l.log.Warn("read the owners of deployments for the log budget", "err", err)
				break
			}
			_, _ = l.PruneOwners(ctx, owners) // logged
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

// PruneOwners brings each owner within the account budget and returns how
// many deployments' logs were deleted (and the first error; the other
// owners are still checked).
func (l *Hub) PruneOwners(ctx context.Context, owners []string) (int, error) {
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

// Budget is the account log budget in bytes (negative: none).
func (l *Hub) Budget() int64 { return l.cfg.AccountBudget }
