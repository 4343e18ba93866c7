// Package logsql is the SQL storage of deployment log lines (logstream.Store
// and what logstream.Retention needs), on bun: SQLite and Postgres.
package logsql

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/keelson-dev/keelson/deployments/logstream"
	"github.com/keelson-dev/keelson/deployments/rt"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// SQL is the log lines' storage: the deployment_logs table, and each
// deployment's log_bytes, the size of its stored messages that the
// deployments table keeps (in the same transactions that store, trim and
// delete lines) so an account's use is one sum over its deployments. The
// deployments module declares both in its migrations and embeds SQL in its
// Store; the other columns read here are the deployments table's id,
// owner_id, status, finished_at and created_at.
type SQL struct {
	db       bun.IDB
	clock    platform.Clock
	prunable []string
}

// NewSQL returns the log storage in idb. prunable are the deployment
// statuses whose logs retention and the budget may delete (the deployment
// ended and nothing of it runs or logs any more).
func NewSQL(idb bun.IDB, clock platform.Clock, prunable ...string) *SQL {
	return &SQL{db: idb, clock: clock, prunable: prunable}
}

// DB is the database the lines are stored in (logstream.Retention reclaims
// its space).
func (s *SQL) DB() bun.IDB { return s.db }

func (s *SQL) now() time.Time { return s.clock.Now().UTC().Truncate(time.Microsecond) }

// LogInsert stores lines in one statement and adds their message bytes to
// their deployments' LogBytes, in one transaction. Each deployment's row is
// updated before the lines are inserted (in id order), so a prune or trim,
// which also updates the row first, never misses lines stored meanwhile.
func (s *SQL) LogInsert(ctx context.Context, lines []logstream.Line) error {
	if len(lines) == 0 {
		return nil
	}
	grown := map[string]int64{}
	for _, l := range lines {
		grown[l.DeploymentID] += int64(len(l.Message))
	}
	ids := slices.Sorted(maps.Keys(grown))
	if pool, ok := s.db.(*bun.DB); ok && db.IsPostgres(pool) {
		// The same statements in one round trip: a simple query of several
		// runs them in order as one transaction. Four round trips each wait
		// for the log writer goroutine to run again, which a fan-out to
		// many streams keeps waiting for a thread.
		var q strings.Builder
		for _, id := range ids {
			q.WriteString(pool.NewUpdate().Table("deployments").Set("log_bytes = log_bytes + ?", grown[id]).Where("id = ?", id).String())
			q.WriteString(";\n")
		}
		q.WriteString(pool.NewInsert().Model(&lines).String())
		_, err := pool.ExecContext(ctx, q.String())
		return db.Translate(err)
	}
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		for _, id := range ids {
			if _, err := tx.NewUpdate().Table("deployments").Set("log_bytes = log_bytes + ?", grown[id]).
				Where("id = ?", id).Exec(ctx); err != nil {
				return err
			}
		}
		_, err := tx.NewInsert().Model(&lines).Exec(ctx)
		return err
	})
	return db.Translate(err)
}

// LogList returns up to p.Limit lines in sequence order.
func (s *SQL) LogList(ctx context.Context, p logstream.ListParams) ([]logstream.Line, error) {
	var out []logstream.Line
	q := s.db.NewSelect().Model(&out).Where("deployment_id = ? AND seq > ?", p.DeploymentID, p.AfterSeq)
	if !p.Since.IsZero() {
		q = q.Where("ts >= ?", p.Since.UTC())
	}
	if err := q.Order("seq").Limit(int64(p.Limit)).Scan(ctx); err != nil {
		return nil, db.Translate(err)
	}
	return out, nil
}

// LogDeleteFinished deletes the log lines of deployments that ended FAILED or
// CANCELLED before before (LIVE ones keep theirs: their app still logs), and
// returns how many lines went.
func (s *SQL) LogDeleteFinished(ctx context.Context, before time.Time) (int64, error) {
	var n int64
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		ended := tx.NewSelect().Table("deployments").Column("id").
			Where("status IN (?)", bun.In(s.prunable)).
			Where("finished_at IS NOT NULL AND finished_at < ?", before.UTC())
		if _, err := tx.NewUpdate().Table("deployments").Set("log_bytes = 0").
			Where("id IN (?)", ended).Exec(ctx); err != nil {
			return err
		}
		res, err := tx.NewDelete().Model((*logstream.Line)(nil)).Where("deployment_id IN (?)", ended).Exec(ctx)
		if err != nil {
			return err
		}
		n, _ = res.RowsAffected()
		return nil
	})
	return n, db.Translate(err)
}

// LogTrimApp deletes the deployment's app output lines but the newest keep,
// and takes their bytes off its LogBytes.
func (s *SQL) LogTrimApp(ctx context.Context, deploymentID string, keep int) error {
	var cutoff []int64
	if err := s.db.NewSelect().Model((*logstream.Line)(nil)).Column("seq").
		Where("deployment_id = ? AND stream = ?", deploymentID, rt.StreamApp).
		Order("seq DESC").Limit(1).Offset(int64(keep)).Scan(ctx, &cutoff); err != nil {
		return db.Translate(err)
	}
	if len(cutoff) == 0 {
		return nil // no more than keep lines
	}
	// A fixed cutoff: lines stored meanwhile are newer and stay.
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		gone := tx.NewSelect().Model((*logstream.Line)(nil)).ColumnExpr("COALESCE(SUM("+MessageBytes(tx)+"), 0)").
			Where("deployment_id = ? AND stream = ? AND seq <= ?", deploymentID, rt.StreamApp, cutoff[0])
		if _, err := tx.NewUpdate().Table("deployments").
			Set("log_bytes = CASE WHEN log_bytes > (?) THEN log_bytes - (?) ELSE 0 END", gone, gone).
			Where("id = ?", deploymentID).Exec(ctx); err != nil {
			return err
		}
		_, err := tx.NewDelete().Model((*logstream.Line)(nil)).
			Where("deployment_id = ? AND stream = ? AND seq <= ?", deploymentID, rt.StreamApp, cutoff[0]).Exec(ctx)
		return err
	})
	return db.Translate(err)
}

// LogMaxSeq returns the highest sequence number stored for the deployment (0 if none).
func (s *SQL) LogMaxSeq(ctx context.Context, deploymentID string) (int64, error) {
	var n *int64
	err := s.db.NewSelect().Model((*logstream.Line)(nil)).ColumnExpr("MAX(seq)").
		Where("deployment_id = ?", deploymentID).Scan(ctx, &n)
	if err != nil {
		return 0, db.Translate(err)
	}
	if n == nil {
		return 0, nil
	}
	return *n, nil
}

// MessageBytes is the SQL expression of a log line's message size in bytes
// (UTF-8), the same count as len() of the Go string.
func MessageBytes(idb bun.IDB) string {
	if db.IsPostgres(idb) {
		return "octet_length(message)"
	}
	return "length(CAST(message AS BLOB))"
}

// LogBytesOwned is the size of the stored log messages of owner's deployments.
func (s *SQL) LogBytesOwned(ctx context.Context, owner string) (int64, error) {
	var n int64
	err := s.db.NewSelect().Table("deployments").ColumnExpr("COALESCE(SUM(log_bytes), 0)").
		Where("owner_id = ?", owner).Scan(ctx, &n)
	return n, db.Translate(err)
}

// LogOwnersOf returns the owners of the deployments ids that exist.
func (s *SQL) LogOwnersOf(ctx context.Context, ids []string) ([]string, error) {
	var owners []string
	err := s.db.NewSelect().Table("deployments").ColumnExpr("DISTINCT owner_id").
		Where("id IN (?)", bun.In(ids)).Scan(ctx, &owners)
	return owners, db.Translate(err)
}

// LogOwnersOver returns the owners whose deployments' stored log messages
// add up to more than budget.
func (s *SQL) LogOwnersOver(ctx context.Context, budget int64) ([]string, error) {
	var owners []string
	err := s.db.NewSelect().Table("deployments").Column("owner_id").Group("owner_id").
		Having("SUM(log_bytes) > ?", budget).Scan(ctx, &owners)
	return owners, db.Translate(err)
}

// LogPruneOwner brings owner within budget: while the owner's stored log
// messages add up to more, the logs of their oldest ended deployment (FAILED
// or CANCELLED) whose logs are more than note are replaced by one system line
// holding note. Logs of LIVE deployments and of deployments in their
// workflow are never touched. It returns the deployments pruned.
func (s *SQL) LogPruneOwner(ctx context.Context, owner string, budget int64, note string) ([]string, error) {
	total, err := s.LogBytesOwned(ctx, owner)
	if err != nil || total <= budget {
		return nil, err
	}
	var cands []struct {
		ID       string `bun:"id"`
		LogBytes int64  `bun:"log_bytes"`
	}
	if err := s.db.NewSelect().Table("deployments").Column("id", "log_bytes").
		Where("owner_id = ? AND status IN (?) AND log_bytes > ?", owner, bun.In(s.prunable), len(note)).
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
func (s *SQL) logReplace(ctx context.Context, id, note string) (bool, error) {
	done := false
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		res, err := tx.NewUpdate().Table("deployments").Set("log_bytes = ?", len(note)).
			Where("id = ? AND status IN (?)", id, bun.In(s.prunable)).Exec(ctx)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err
		}
		var last *int64
		if err := tx.NewSelect().Model((*logstream.Line)(nil)).ColumnExpr("MAX(seq)").
			Where("deployment_id = ?", id).Scan(ctx, &last); err != nil {
			return err
		}
		if _, err := tx.NewDelete().Model((*logstream.Line)(nil)).Where("deployment_id = ?", id).Exec(ctx); err != nil {
			return err
		}
		line := logstream.Line{DeploymentID: id, Seq: 1, Time: s.now(), Stream: rt.StreamSystem, Message: note}
		if last != nil {
			line.Seq = *last + 1
		}
		_, err = tx.NewInsert().Model(&line).Exec(ctx)
		done = err == nil
		return err
	})
	return done, db.Translate(err)
}
