package main

import (
	"context"

	"github.com/keelson-dev/keelson/scaffold"
)

// wireScaffold registers the eight placeholder modules of SPEC 4.7.
func (a *App) wireScaffold(ctx context.Context) error {
	if a.Authn == nil {
		a.Log.Warn("scaffold: no authenticator wired; placeholder routes not registered")
		return nil
	}
	return scaffold.Register(a.API, scaffold.Deps{Auth: a.Authn})
}
