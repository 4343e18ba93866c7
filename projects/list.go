package projects

import (
	"context"
	"strings"
	"sync"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// listStmts are the statements of List (GET /projects, the hot read path),
// prepared once: one per combination of the optional filters, so each keeps
// the (owner_id, created_at, id) index range. They read only the columns a
// Project shows (the webhook secret as whether one is set) and times as
// stored text on SQLite (db.TimeColumn), which the driver would otherwise
// parse through time.Parse for every value.
type listStmts struct {
	once  sync.Once
	stmts [4]*db.Prepared // index: status filter 1, cursor 2
}

const (
	listByStatus = 1
	listAfter    = 2
)

// listOrder is the order of every list of projects, newest first.
var listOrder = db.Keyset{Time: "created_at", ID: "id"}

func (l *listStmts) init(s *Service) {
	l.once.Do(func() {
		cols := "id, name, slug, repo_url, framework, port, is_private, auto_deploy, auto_deploy_branch, " +
			"codehost_repository_id, webhook_secret <> '', region, plan_name, env_vars, start_command, " +
			"build_command, keep_http, host, status, error_message, " +
			db.TimeColumn(s.d.DB, "created_at") + ", " + db.TimeColumn(s.d.DB, "updated_at")
		for v := range l.stmts {
			var q strings.Builder
			q.WriteString("SELECT " + cols + " FROM projects WHERE owner_id = ? AND status <> '" + StatusDeleted + "'")
			if v&listByStatus != 0 {
				q.WriteString(" AND status = ?")
			}
			if v&listAfter != 0 {
				q.WriteString(" AND " + listOrder.After())
			}
			q.WriteString(" ORDER BY " + listOrder.OrderBy() + " LIMIT ?")
			l.stmts[v] = db.NewPrepared(q.String())
		}
	})
}

func (l *listStmts) close() {
	for _, st := range l.stmts {
		if st != nil {
			_ = st.Close()
		}
	}
}

// listRows reads one page (limit rows) of owner's projects for List.
func (s *Service) listRows(ctx context.Context, owner string, p ListParams, limit int) ([]*Project, error) {
	s.list.init(s)
	v := 0
	args := make([]any, 0, 6)
	args = append(args, owner)
	if p.Status != "" {
		v |= listByStatus
		args = append(args, p.Status)
	}
	if p.After != nil {
		v |= listAfter
		t := db.TimeArg(s.d.DB, p.After.Time)
		args = append(args, t, t, p.After.ID)
	}
	args = append(args, int64(limit))
	rows, err := s.list.stmts[v].Query(ctx, s.d.DB, args...)
	if err != nil {
		return nil, wrap("list", err)
	}
	defer rows.Close()
	out := make([]*Project, 0, min(limit, platform.MaxPageSize+1))
	for rows.Next() {
		var (
			pr               Project
			port             int64
			env              string
			hasSecret, keep  bool
			created, updated = db.ScanTime(&pr.CreatedAt), db.ScanTime(&pr.UpdatedAt)
		)
		if err := rows.Scan(&pr.ID, &pr.Name, &pr.Slug, &pr.RepoURL, &pr.Framework, &port, &pr.IsPrivate,
			&pr.AutoDeploy, &pr.AutoDeployBranch, &pr.CodehostRepositoryID, &hasSecret, &pr.Region,
			&pr.PlanName, &env, &pr.StartCommand, &pr.BuildCommand, &keep, &pr.Host, &pr.Status, &pr.ErrorMessage,
			created, updated); err != nil {
			return nil, wrap("list", err)
		}
		pr.Port, pr.HasWebhookSecret, pr.HTTPSRedirect = int(port), hasSecret, !keep
		pr.CreatedAt, pr.UpdatedAt = pr.CreatedAt.UTC(), pr.UpdatedAt.UTC()
		if pr.EnvVars, err = envOut(env); err != nil {
			return nil, err
		}
		out = append(out, &pr)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("list", err)
	}
	return out, nil
}

// listAccounts reads one page of the projects of accounts (a user's own and
// their teams'), newest first, and the cursor of the next page. Unlike a
// personal list it is not cached: a member's list changes with the team.
func (s *Service) listAccounts(ctx context.Context, accounts []string, p ListParams) ([]*Project, string, error) {
	q := s.d.DB.NewSelect().Model((*projectRow)(nil)).Where("owner_id IN (?) AND status <> ?", bun.In(accounts), StatusDeleted)
	if p.Status != "" {
		q = q.Where("status = ?", p.Status)
	}
	rows, next, err := db.ReadPage(ctx, q, listOrder, p.After, p.Limit, func(last projectRow) platform.Cursor {
		return platform.Cursor{Time: last.CreatedAt, ID: last.ID}
	})
	if err != nil {
		return nil, "", wrap("list", err)
	}
	out := make([]*Project, 0, len(rows))
	for i := range rows {
		pr, err := rows[i].toProject()
		if err != nil {
			return nil, "", err
		}
		if err := s.fillPlanName(ctx, rows[i].OwnerID, pr); err != nil {
			return nil, "", err
		}
		out = append(out, pr)
	}
	return out, next, nil
}
