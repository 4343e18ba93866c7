package main

import "context"

// wireProjects builds the projects module and registers its routes. Owned by the projects module's engineer.
func (a *App) wireProjects(ctx context.Context) error {
	return nil
}
