// Package apidocs serves an API's OpenAPI documents and an offline docs UI.
//
// Register adds, on the API's own router:
//
//	GET /openapi.json       OpenAPI 3.1
//	GET /openapi-3.0.json   OpenAPI 3.0 (for tools that only read 3.0)
//	GET /docs               Swagger UI, every asset served from this process;
//	                        "Try it out" calls the origin the page came from
//	GET /docs/              redirects to /docs
//	GET /docs/assets/{file} the UI's scripts, styles and icons
//
// The UI's files come from a Go module (github.com/swaggo/files/v2, Swagger
// UI's dist embedded with go:embed), so the docs work on a server with no
// internet; the pages send a Content-Security-Policy that allows only the
// server's own origin (plus data: images, which Swagger UI's stylesheet
// inlines).
//
// The documents are Huma's, made acceptable to tools that read them strictly:
// Huma's patternDescription keyword becomes the x-pattern-description
// extension, a 3.0 schema keeps no 3.1-only keyword (contentMediaType,
// contentEncoding, examples) and no sibling of a $ref (the $ref moves into an
// allOf), and every tag an operation uses is declared.
package apidocs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/danielgtaylor/huma/v2"
	swaggerfiles "github.com/swaggo/files/v2"
)

// Options of the documents and the docs page.
type Options struct {
	// Title of the docs page. Default: the API's info.title.
	Title string
}

// CSP is the Content-Security-Policy of the docs page and its assets: the
// server's own origin only (data: for the icons Swagger UI's CSS inlines).
const CSP = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'none'"

// assets are the files of Swagger UI's dist the page uses.
var assets = []string{
	"swagger-ui.css", "index.css", "swagger-ui-bundle.js", "swagger-ui-standalone-preset.js",
	"favicon-32x32.png", "favicon-16x16.png",
	"swagger-ui.css.map", "swagger-ui-bundle.js.map", "swagger-ui-standalone-preset.js.map",
}

// page is the docs HTML: no inline script or style (the CSP forbids them),
// the initializer is served as docs/assets/init.js.
var page = template.Must(template.New("docs").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{.}}</title>
<link rel="stylesheet" href="docs/assets/swagger-ui.css">
<link rel="stylesheet" href="docs/assets/index.css">
<link rel="icon" type="image/png" href="docs/assets/favicon-32x32.png" sizes="32x32">
<link rel="icon" type="image/png" href="docs/assets/favicon-16x16.png" sizes="16x16">
</head>
<body>
<div id="swagger-ui"></div>
<script src="docs/assets/swagger-ui-bundle.js"></script>
<script src="docs/assets/swagger-ui-standalone-preset.js"></script>
<script src="docs/assets/init.js"></script>
</body>
</html>
`))

// initJS starts Swagger UI on the 3.1 document, resolved against the page's
// own URL (so a path prefix added by a proxy keeps working). "Try it out"
// sends requests to the origin (and prefix) the page was served from, not to
// the document's servers (KEELSON_PUBLIC_URL): the page's CSP allows only its
// own origin, and the page may be opened on another name or port than the
// public URL. validatorUrl null: Swagger UI would otherwise send the document
// to an outside validator.
const initJS = `window.addEventListener("load", function () {
  var base = new URL(".", document.baseURI).href.replace(/\/$/, "");
  fetch(new URL("openapi.json", document.baseURI).href).then(function (r) { return r.json(); }).then(function (spec) {
    spec.servers = [{ url: base, description: "the origin this page was served from" }];
    window.ui = SwaggerUIBundle({
      spec: spec,
      dom_id: "#swagger-ui",
      deepLinking: true,
      validatorUrl: null,
      presets: [SwaggerUIBundle.presets.apis, SwaggerUIStandalonePreset],
      layout: "BaseLayout"
    });
  });
});
`

// Register serves api's documents and docs UI on api's router. Call it after
// every module is registered or before: the documents are built at the first
// request (and then kept).
func Register(api huma.API, o Options) error {
	if api == nil {
		return errors.New("apidocs: nil API")
	}
	s := &server{api: api, opts: o}
	get := func(p string, h func(huma.Context)) {
		api.Adapter().Handle(&huma.Operation{Method: http.MethodGet, Path: p}, h)
	}
	get("/openapi.json", func(ctx huma.Context) { s.document(ctx, false) })
	get("/openapi-3.0.json", func(ctx huma.Context) { s.document(ctx, true) })
	get("/docs", s.page)
	// The page's relative asset URLs need /docs itself: /docs/ redirects there
	// (relative, so a proxy's path prefix is kept).
	get("/docs/", func(ctx huma.Context) {
		ctx.SetHeader("Location", "../docs")
		ctx.SetStatus(http.StatusMovedPermanently)
	})
	get("/docs/assets/{file}", s.asset)
	return nil
}

type server struct {
	api  huma.API
	opts Options

	once     sync.Once
	doc31    []byte
	doc30    []byte
	buildErr error
}

func (s *server) build() {
	s.doc31, s.doc30, s.buildErr = Documents(s.api.OpenAPI())
}

func (s *server) document(ctx huma.Context, v30 bool) {
	s.once.Do(s.build)
	if s.buildErr != nil {
		ctx.SetStatus(http.StatusInternalServerError)
		return
	}
	b := s.doc31
	if v30 {
		b = s.doc30
	}
	ctx.SetHeader("Content-Type", "application/json")
	ctx.SetHeader("Cache-Control", "no-cache")
	ctx.SetStatus(http.StatusOK)
	_, _ = ctx.BodyWriter().Write(b)
}

func (s *server) page(ctx huma.Context) {
	title := s.opts.Title
	if title == "" && s.api.OpenAPI().Info != nil {
		title = s.api.OpenAPI().Info.Title
	}
	var buf bytes.Buffer
	if err := page.Execute(&buf, title); err != nil {
		ctx.SetStatus(http.StatusInternalServerError)
		return
	}
	securityHeaders(ctx)
	ctx.SetHeader("Content-Type", "text/html; charset=utf-8")
	ctx.SetStatus(http.StatusOK)
	_, _ = ctx.BodyWriter().Write(buf.Bytes())
}

func (s *server) asset(ctx huma.Context) {
	name := ctx.Param("file")
	var body []byte
	switch {
	case name == "init.js":
		body = []byte(initJS)
	case slices.Contains(assets, name):
		b, err := fs.ReadFile(swaggerfiles.FS, name)
		if err != nil {
			ctx.SetStatus(http.StatusNotFound)
			return
		}
		body = b
	default:
		ctx.SetHeader("Content-Type", "application/json")
		ctx.SetStatus(http.StatusNotFound)
		_, _ = ctx.BodyWriter().Write([]byte(`{"statusCode":404,"message":"no such docs asset","error":"Not Found"}`))
		return
	}
	securityHeaders(ctx)
	ctx.SetHeader("Content-Type", contentType(name))
	ctx.SetHeader("Cache-Control", "public, max-age=3600")
	ctx.SetStatus(http.StatusOK)
	_, _ = ctx.BodyWriter().Write(body)
}

func securityHeaders(ctx huma.Context) {
	ctx.SetHeader("Content-Security-Policy", CSP)
	ctx.SetHeader("X-Content-Type-Options", "nosniff")
	ctx.SetHeader("Referrer-Policy", "no-referrer")
}

func contentType(name string) string {
	switch path.Ext(name) {
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".png":
		return "image/png"
	case ".map":
		return "application/json"
	}
	return "application/octet-stream"
}

// Documents returns oa as OpenAPI 3.1 and 3.0 JSON, cleaned for strict
// readers (see the package doc).
func Documents(oa *huma.OpenAPI) (v31, v30 []byte, err error) {
	declareTags(oa)
	validationIs400(oa)
	b31, err := oa.MarshalJSON()
	if err != nil {
		return nil, nil, fmt.Errorf("apidocs: 3.1: %w", err)
	}
	b30, err := oa.Downgrade()
	if err != nil {
		return nil, nil, fmt.Errorf("apidocs: 3.0: %w", err)
	}
	if v31, err = clean(b31, false); err != nil {
		return nil, nil, err
	}
	if v30, err = clean(b30, true); err != nil {
		return nil, nil, err
	}
	return v31, v30, nil
}

// validationIs400 declares a validation failure as the 400 it is answered
// with (platform.InstallErrorModel turns Huma's 422 into 400): Huma adds
// 422 to the responses of an operation that lists its error statuses and
// takes input, a status no request gets.
func validationIs400(oa *huma.OpenAPI) {
	for _, p := range oa.Paths {
		for _, op := range []*huma.Operation{p.Get, p.Put, p.Post, p.Delete, p.Options, p.Head, p.Patch, p.Trace} {
			if op == nil || op.Responses["422"] == nil {
				continue
			}
			if op.Responses["400"] == nil {
				r := *op.Responses["422"]
				r.Description = http.StatusText(http.StatusBadRequest)
				op.Responses["400"] = &r
			}
			delete(op.Responses, "422")
		}
	}
}

// declareTags adds to oa.Tags every tag an operation uses and is not declared.
func declareTags(oa *huma.OpenAPI) {
	have := map[string]bool{}
	for _, t := range oa.Tags {
		have[t.Name] = true
	}
	for _, p := range oa.Paths {
		for _, op := range []*huma.Operation{p.Get, p.Put, p.Post, p.Delete, p.Options, p.Head, p.Patch, p.Trace} {
			if op == nil {
				continue
			}
			for _, t := range op.Tags {
				if !have[t] {
					have[t] = true
					oa.Tags = append(oa.Tags, &huma.Tag{Name: t})
				}
			}
		}
	}
}

func clean(doc []byte, v30 bool) ([]byte, error) {
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("apidocs: %w", err)
	}
	walk(m, v30, false)
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return nil, fmt.Errorf("apidocs: %w", err)
	}
	return out.Bytes(), nil
}

// literal keywords hold instance values, not schemas or OpenAPI objects.
var literal = map[string]bool{"example": true, "examples": true, "default": true, "enum": true, "const": true}

// walk rewrites the keywords of every object under v. names is true when v's
// keys are names (properties, components), not keywords.
func walk(v any, v30, names bool) {
	switch v := v.(type) {
	case map[string]any:
		if !names {
			if pd, ok := v["patternDescription"]; ok {
				delete(v, "patternDescription")
				v["x-pattern-description"] = pd
			}
			if v30 {
				// 3.1-only schema keywords Huma's downgrade keeps.
				if _, ok := v["contentMediaType"]; ok {
					delete(v, "contentMediaType")
					delete(v, "contentEncoding")
					if v["type"] == "string" {
						v["format"] = "binary"
					}
				}
				// A 3.0 $ref has no siblings (they are ignored, and linters
				// reject them): a field's description next to the $ref of its
				// type moves into an allOf of that one $ref.
				if ref, ok := v["$ref"].(string); ok && len(v) > 1 && strings.HasPrefix(ref, "#/components/schemas/") {
					delete(v, "$ref")
					v["allOf"] = []any{map[string]any{"$ref": ref}}
				}
				if ex, ok := v["examples"].([]any); ok && isSchema(v) {
					delete(v, "examples")
					if len(ex) > 0 {
						v["example"] = ex[0]
					}
				}
			}
		}
		for k, child := range v {
			if !names && literal[k] && !(k == "examples" && !isSchema(v)) {
				continue
			}
			walk(child, v30, !names && (k == "properties" || k == "schemas" || k == "paths" ||
				k == "responses" || k == "content" || k == "securitySchemes" || k == "headers" ||
				k == "parameters" && !isSchema(v) || k == "examples" || k == "patternProperties" || k == "$defs"))
		}
	case []any:
		for _, c := range v {
			walk(c, v30, false)
		}
	}
}

// isSchema reports whether m looks like a schema object.
func isSchema(m map[string]any) bool {
	for _, k := range []string{"type", "properties", "items", "$ref", "oneOf", "anyOf", "allOf"} {
		if _, ok := m[k]; ok {
			return true
		}
	}
	return false
}

// TagDescriptions sets the description of the tags in d (declaring them when
// absent), e.g. from the host that knows every module.
func TagDescriptions(oa *huma.OpenAPI, d map[string]string) {
	for _, t := range oa.Tags {
		if desc, ok := d[t.Name]; ok && t.Description == "" {
			t.Description = desc
		}
	}
	names := make([]string, 0, len(d))
	for n := range d {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if !slices.ContainsFunc(oa.Tags, func(t *huma.Tag) bool { return strings.EqualFold(t.Name, n) }) {
			oa.Tags = append(oa.Tags, &huma.Tag{Name: n, Description: d[n]})
		}
	}
}
