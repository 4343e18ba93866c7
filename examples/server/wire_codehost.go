package main

import "context"

// wireCodehost builds the codehost module and registers its routes. Owned by the codehost module's engineer.
func (a *App) wireCodehost(ctx context.Context) error {
	return nil
}
