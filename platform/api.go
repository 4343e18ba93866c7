package platform

import (
	"reflect"
	"strings"

	"github.com/danielgtaylor/huma/v2"
)

// APIConfig returns a Huma config for an API that serves Keelson modules: the
// NestJS-compatible error model installed, the bearer scheme declared, schema
// names a generated client would want (SchemaNamer), arrays not nullable (the
// modules always answer [] for an empty list). Huma's own document and docs
// routes are off: serve them with platform/apidocs (Register), which makes
// the documents acceptable to strict tools and the docs work offline.
//
// Arrays: Huma keeps the default nullability of arrays in a package variable
// (huma.DefaultArrayNullable); like InstallErrorModel, APIConfig sets it for
// the whole process, once (InstallErrorModel), so APIs built at once on
// several goroutines do not race on it.
func APIConfig(title, version string) huma.Config {
	InstallErrorModel()
	cfg := huma.DefaultConfig(title, version)
	cfg.Components.Schemas = huma.NewMapRegistry("#/components/schemas/", SchemaNamer)
	cfg.Components.SecuritySchemes = map[string]*huma.SecurityScheme{
		SecurityScheme: {
			Type: "http", Scheme: "bearer", BearerFormat: "JWT",
			Description: "Access token from POST /auth/login or POST /auth/refresh.",
		},
	}
	// No $schema links in responses: clients of SPEC.md do not expect them.
	cfg.CreateHooks = nil
	cfg.OpenAPIPath = ""
	cfg.DocsPath = ""
	return cfg
}

// SchemaNamed is implemented by types that choose their OpenAPI schema name
// (e.g. projects.View answers "Project"), so Go names that read well inside a
// package (View, Input) do not become generic names in generated clients.
type SchemaNamed interface {
	SchemaName() string
}

var schemaNamedType = reflect.TypeFor[SchemaNamed]()

// SchemaNamer is Huma's default namer, except that a type implementing
// SchemaNamed (by value or pointer) is named by its SchemaName, and an
// anonymous body struct, which Huma names after its field (fooInput.Body:
// FooInputBody), is named FooRequest or FooResponse.
func SchemaNamer(t reflect.Type, hint string) string {
	d := t
	for d.Kind() == reflect.Pointer {
		d = d.Elem()
	}
	if d.Name() != "" {
		if d.Implements(schemaNamedType) {
			return reflect.Zero(d).Interface().(SchemaNamed).SchemaName()
		}
		if reflect.PointerTo(d).Implements(schemaNamedType) {
			return reflect.New(d).Interface().(SchemaNamed).SchemaName()
		}
	}
	name := huma.DefaultSchemaNamer(t, hint)
	if d.Name() == "" {
		if base, ok := strings.CutSuffix(name, "InputBody"); ok && base != "" {
			return base + "Request"
		}
		if base, ok := strings.CutSuffix(name, "OutputBody"); ok && base != "" {
			return base + "Response"
		}
	}
	return name
}
