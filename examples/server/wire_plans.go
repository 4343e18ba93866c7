package main

import (
	"context"

	"github.com/keelson-dev/keelson/auth/auditlog"
	"github.com/keelson-dev/keelson/auth/teams"
	"github.com/keelson-dev/keelson/plans"
	"github.com/keelson-dev/keelson/projects"
)

// buildPlans builds the plans module (GET public, writes ADMIN) and seeds one
// plan per tier on first start. Whether a plan is in use, and who owns a
// team, it reads from the projects and teams tables (projects.Counts,
// teams.Members): both modules are built after it, on it. It publishes every
// plan change (Service.Changed); projects' list cache and the bandwidth
// limits subscribe when they are built.
func (a *App) buildPlans(ctx context.Context) error {
	svc, err := plans.New(plans.Deps{
		DB:     a.DB,
		Auth:   a.Authn,
		Logger: a.Log.With("module", "plans"),
		Usage:  projects.Counts{DB: a.DB},
		Teams:  teams.Members{DB: a.DB},
		Audit:  auditlog.Recorder{},
	})
	if err != nil {
		return err
	}
	a.add(svc)
	a.Plans = svc
	return nil
}
