package main

import "context"

// wireAuth builds the auth module and registers its routes. Owned by the auth module's engineer.
func (a *App) wireAuth(ctx context.Context) error {
	return nil
}
