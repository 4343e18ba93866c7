package main

import "context"

// wireOAuth builds the oauth module and registers its routes. Owned by the oauth module's engineer.
func (a *App) wireOAuth(ctx context.Context) error {
	return nil
}
