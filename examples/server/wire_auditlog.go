package main

import (
	"context"

	"github.com/keelson-dev/keelson/auth/auditlog"
)

// buildAuditLog builds the audit-log module's routes and retention on the
// teams module (team roles), built before it. The modules built before it
// record through auditlog.Recorder, the ones after through the service:
// the same rows either way. Its routes take sessions only (a.Auth), as
// when it was built before the API tokens module.
func (a *App) buildAuditLog(context.Context) error {
	svc, err := auditlog.New(auditlog.Deps{DB: a.DB, Auth: a.Auth, Teams: a.Teams,
		Retention: a.Cfg.AuditRetention, Log: a.Log.With("module", "auditlog")})
	if err != nil {
		return err
	}
	a.add(svc)
	a.AuditLog = svc
	return nil
}
