package platform

import "github.com/danielgtaylor/huma/v2"

// APIConfig returns a Huma config for an API that serves Keelson modules: the
// NestJS-compatible error model installed, the bearer scheme declared, OpenAPI
// 3.1 at /openapi.json, 3.0 at /openapi-3.0.json and docs at /docs.
func APIConfig(title, version string) huma.Config {
	InstallErrorModel()
	cfg := huma.DefaultConfig(title, version)
	if cfg.Components == nil {
		cfg.Components = &huma.Components{}
	}
	cfg.Components.SecuritySchemes = map[string]*huma.SecurityScheme{
		SecurityScheme: {
			Type: "http", Scheme: "bearer", BearerFormat: "JWT",
			Description: "Access token from POST /auth/login or POST /auth/refresh.",
		},
	}
	// No $schema links in responses: clients of SPEC.md do not expect them.
	cfg.CreateHooks = nil
	return cfg
}
