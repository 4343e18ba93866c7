package main

import "context"

// wireDeployments builds the deployments module and registers its routes. Owned by the deployments module's engineer.
func (a *App) wireDeployments(ctx context.Context) error {
	return nil
}
