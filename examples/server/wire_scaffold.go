package main

import (
	"context"

	"github.com/keelson-dev/keelson/scaffold"
)

// buildScaffold builds the eight placeholder modules of SPEC 4.7.
func (a *App) buildScaffold(ctx context.Context) error {
	svc, err := scaffold.New(scaffold.Deps{Auth: a.Authn})
	if err != nil {
		return err
	}
	a.add(svc)
	return nil
}
