package main

import "context"

// wirePlans builds the plans module and registers its routes. Owned by the plans module's engineer.
func (a *App) wirePlans(ctx context.Context) error {
	return nil
}
