package main

import (
	"context"
	"fmt"

	"github.com/keelson-dev/keelson/plans"
)

// wirePlans builds the plans module (GET public, writes ADMIN) and seeds one
// plan per tier on first start. Whether a plan is in use is answered by the
// projects module, wired after this one, so the check is looked up lazily.
func (a *App) wirePlans(ctx context.Context) error {
	log := a.Log.With("module", "plans")
	svc, err := plans.Register(a.API, plans.Deps{
		DB:     a.DB,
		Auth:   a.Authn,
		Logger: log,
		Usage: plans.UsageCheckerFunc(func(ctx context.Context, name string) (bool, error) {
			if a.Projects == nil {
				return false, fmt.Errorf("plans: projects module not wired; cannot tell whether plan %q is in use", name)
			}
			return a.Projects.PlanInUse(ctx, name)
		}),
	})
	if err != nil {
		return err
	}
	a.migrate(plans.Migrations())
	a.Plans = svc
	a.onStart(func(ctx context.Context) error {
		_, err := svc.Seed(ctx)
		return err
	})
	return nil
}
