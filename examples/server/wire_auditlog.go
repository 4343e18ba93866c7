package main

import (
	"context"

	"github.com/keelson-dev/keelson/auth/auditlog"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/audit"
	"github.com/uptrace/bun"
)

// buildAuditLog builds the audit-log module right after auth (its routes
// need the authenticator), so every module built after it records through
// it (Deps.Audit); auth records through an edge. It asks the teams module,
// built later, for roles (an edge).
func (a *App) buildAuditLog(context.Context) error {
	svc, err := auditlog.New(auditlog.Deps{DB: a.DB, Auth: a.Authn, Teams: auditTeams{a.edges},
		Retention: a.Cfg.AuditRetention, Log: a.Log.With("module", "auditlog")})
	if err != nil {
		return err
	}
	a.add(svc)
	a.AuditLog = svc
	return nil
}

// auditTeams answers auditlog.Teams through the teams module (an edge).
type auditTeams struct{ e *edges }

func (t auditTeams) MemberRole(ctx context.Context, teamID, userID string) (platform.MemberRole, error) {
	return t.e.teams.MemberRole(ctx, teamID, userID)
}

// auditEdge records through the audit-log module for auth, built before it.
type auditEdge struct{ e *edges }

func (r auditEdge) Record(ctx context.Context, idb bun.IDB, e audit.Entry) error {
	return r.e.auditlog.Record(ctx, idb, e)
}
