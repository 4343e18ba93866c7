package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
)

// TestOpenAPIDocumentsValidate loads both served documents (3.1 and 3.0) with
// two tools nobody here wrote and fails on any error they report: kin-openapi's
// loader + Validate with no allowances, and libopenapi's model build plus
// libopenapi-validator's document validation (the OpenAPI JSON Schema).
// Every route a module registers is in these documents, so a new route with a
// malformed schema fails here.
//
// KEELSON_OPENAPI_DUMP=<dir> writes both documents there (to run other
// linters, e.g. vacuum, on them).
func TestOpenAPIDocumentsValidate(t *testing.T) {
	t.Parallel()
	ts := startServer(t, "", nil)
	for _, path := range []string{"/openapi.json", "/openapi-3.0.json"} {
		t.Run(strings.TrimPrefix(path, "/"), func(t *testing.T) {
			status, body, _ := ts.do(t, "GET", path, "", nil)
			if status != http.StatusOK {
				t.Fatalf("GET %s: %d", path, status)
			}
			if dir := os.Getenv("KEELSON_OPENAPI_DUMP"); dir != "" {
				if err := os.WriteFile(filepath.Join(dir, strings.TrimPrefix(path, "/")), body, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			for _, e := range kinOpenAPIErrors(body) {
				t.Errorf("kin-openapi: %s", e)
			}
			for _, e := range libOpenAPIErrors(body) {
				t.Errorf("libopenapi: %s", e)
			}
			for _, e := range contractErrors(body) {
				t.Errorf("contract: %s", e)
			}
		})
	}
}

// TestOpenAPICheckersReject: the checkers above can fail. A document with a
// 3.1-only keyword in a 3.0 schema, an undefined $ref and a response without
// a description is rejected by each of them.
func TestOpenAPICheckersReject(t *testing.T) {
	t.Parallel()
	bad := []byte(`{"openapi":"3.0.3","info":{"title":"x","version":"1"},"paths":{"/a":{"get":{"operationId":"a",
		"responses":{"200":{"content":{"application/json":{"schema":{"$ref":"#/components/schemas/Missing"}}}}}}}},
		"components":{"schemas":{"S":{"type":"string","patternDescription":"x","contentMediaType":"text/plain"}}}}`)
	if errs := kinOpenAPIErrors(bad); len(errs) == 0 {
		t.Error("kin-openapi accepted a broken document")
	}
	if errs := libOpenAPIErrors(bad); len(errs) == 0 {
		t.Error("libopenapi accepted a broken document")
	}
	if errs := contractErrors([]byte(`{"openapi":"3.1.0","info":{"title":"x","version":"1"},"paths":{}}`)); len(errs) == 0 {
		t.Error("contract checks accepted a document without servers, tags or description")
	}
	if errs := contractErrors([]byte(`{"openapi":"3.0.3","components":{"schemas":{"A":{"properties":{"b":{"$ref":"#/components/schemas/B","description":"x"}}}}}}`)); !slices.ContainsFunc(errs, func(e string) bool { return strings.Contains(e, "$ref with sibling") }) {
		t.Errorf("contract checks accepted a 3.0 $ref with a sibling: %q", errs)
	}
	for _, name := range []string{"View", "CreateRequest", "CreateInBody", "CreateOutBody", "FireOutBody", "CreateInputBody", "PatchOutputBody"} {
		if !genericSchemaName.MatchString(name) {
			t.Errorf("schema name %s not judged generic", name)
		}
	}
	for _, name := range []string{"Project", "CreateProjectRequest", "DeployHookTrigger", "DeploymentStatusReport", "UpdateProfileRequest"} {
		if genericSchemaName.MatchString(name) {
			t.Errorf("schema name %s judged generic", name)
		}
	}
}

// contractErrors checks what issue 17 asked of the documents beyond validity:
// info.description, servers, every tag used is declared with a description,
// no nullable arrays, typed APIError.message, one schema per log event with a
// discriminator, the webhook accepting application/json, and schema names a
// generated client would want.
func contractErrors(doc []byte) []string {
	var d struct {
		Info struct {
			Description string `json:"description"`
		} `json:"info"`
		Servers []struct {
			URL string `json:"url"`
		} `json:"servers"`
		Tags []struct {
			Name        string `json:"name"`
			Description string `json:"description"`
		} `json:"tags"`
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Schemas map[string]json.RawMessage `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		return []string{err.Error()}
	}
	var out []string
	if d.Info.Description == "" {
		out = append(out, "info.description is empty")
	}
	if len(d.Servers) == 0 {
		out = append(out, "no servers")
	}
	described := map[string]bool{}
	for _, tg := range d.Tags {
		if tg.Description == "" {
			out = append(out, fmt.Sprintf("tag %q has no description (add it to tagDescriptions in openapi.go)", tg.Name))
		}
		described[tg.Name] = true
	}
	for path, ops := range d.Paths {
		for method, raw := range ops {
			var op struct {
				Tags []string `json:"tags"`
			}
			_ = json.Unmarshal(raw, &op)
			for _, tg := range op.Tags {
				if !described[tg] {
					out = append(out, fmt.Sprintf("%s %s: tag %q is not declared", method, path, tg))
				}
			}
		}
	}
	var nullableArrays func(where string, v any)
	nullableArrays = func(where string, v any) {
		switch v := v.(type) {
		case map[string]any:
			typ := fmt.Sprint(v["type"])
			if strings.Contains(typ, "array") && (v["nullable"] == true || strings.Contains(typ, "null")) {
				out = append(out, where+": array declared nullable")
			}
			for k, c := range v {
				nullableArrays(where+"/"+k, c)
			}
		case []any:
			for i, c := range v {
				nullableArrays(fmt.Sprintf("%s/%d", where, i), c)
			}
		}
	}
	var all any
	_ = json.Unmarshal(doc, &all)
	nullableArrays("#", all)
	// In 3.0 a $ref's siblings are ignored (vacuum: no-$ref-siblings).
	if top, _ := all.(map[string]any); strings.HasPrefix(fmt.Sprint(top["openapi"]), "3.0") {
		var refSiblings func(where string, v any)
		refSiblings = func(where string, v any) {
			switch v := v.(type) {
			case map[string]any:
				if _, ok := v["$ref"].(string); ok && len(v) > 1 {
					out = append(out, where+": $ref with sibling keywords in a 3.0 document")
				}
				for k, c := range v {
					refSiblings(where+"/"+k, c)
				}
			case []any:
				for i, c := range v {
					refSiblings(fmt.Sprintf("%s/%d", where, i), c)
				}
			}
		}
		refSiblings("#", all)
	}
	schema := func(name string) map[string]any {
		var m map[string]any
		_ = json.Unmarshal(d.Components.Schemas[name], &m)
		return m
	}
	props, _ := schema("APIError")["properties"].(map[string]any)
	if msg, _ := props["message"].(map[string]any); len(asSlice(msg["oneOf"])) != 2 {
		out = append(out, "APIError.message is not a oneOf string / array of strings")
	}
	ev := schema("DeploymentLogEvent")
	if len(asSlice(ev["oneOf"])) != 4 || ev["discriminator"] == nil {
		out = append(out, "DeploymentLogEvent is not a oneOf of four events with a discriminator")
	}
	var hook struct {
		Post struct {
			RequestBody struct {
				Content map[string]any `json:"content"`
			} `json:"requestBody"`
		} `json:"post"`
	}
	if raw, ok := d.Paths["/codehost/webhook"]; ok {
		b, _ := json.Marshal(raw)
		_ = json.Unmarshal(b, &hook)
		if hook.Post.RequestBody.Content["application/json"] == nil {
			out = append(out, "the webhook does not accept application/json")
		}
	}
	for _, want := range []string{"Project", "Deployment", "DeploymentStatusReport", "Plan", "User", "TokenPair", "APIError",
		"CreateDeploymentRequest", "CreateDeployHookRequest", "CreatedDeployHook", "DeployHookTrigger", "ProjectDeploymentUsage"} {
		if d.Components.Schemas[want] == nil {
			out = append(out, "no schema named "+want)
		}
	}
	// oapi-codegen names the response wrapper of operation "fire-deploy-hook"
	// FireDeployHookResponse: a schema of that name breaks the generated client.
	opResponse := map[string]string{}
	for path, ops := range d.Paths {
		for method, raw := range ops {
			var op struct {
				OperationID string `json:"operationId"`
			}
			_ = json.Unmarshal(raw, &op)
			if op.OperationID != "" {
				opResponse[camel(op.OperationID)+"Response"] = method + " " + path
			}
		}
	}
	for name := range d.Components.Schemas {
		if where, ok := opResponse[name]; ok {
			out = append(out, "schema "+name+" collides with oapi-codegen's response type of "+where)
		}
		if genericSchemaName.MatchString(name) {
			out = append(out, "generic schema name "+name+" (give the type a SchemaName method, see platform.SchemaNamer)")
		}
	}
	return out
}

// genericSchemaName matches the names Huma derives from Go names that read
// well only inside their package: View, StatusView, an anonymous body named
// after its input/output struct (CreateInBody, FireOutputBody), or a verb with
// no noun (CreateRequest, FireResponse).
var genericSchemaName = regexp.MustCompile(`^(View|StatusView|.*(In|Out|Input|Output)Body|(Create|Update|Patch|Delete|Get|List|Fire|Trigger|Assign|Settings)(Request|Response|Input|Output)?)$`)

// camel turns an operation id (fire-deploy-hook) into its Go name (FireDeployHook).
func camel(id string) string {
	var b strings.Builder
	for _, part := range strings.FieldsFunc(id, func(r rune) bool { return r == '-' || r == '_' || r == '.' }) {
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}

func asSlice(v any) []any { s, _ := v.([]any); return s }

// TestDocsOffline fetches /docs and every asset it references from the server
// itself: each answers 200, nothing points to another origin, and the page
// and its assets allow only the server's own origin (CSP).
func TestDocsOffline(t *testing.T) {
	t.Parallel()
	ts := startServer(t, "", nil)
	status, body, hdr := ts.do(t, "GET", "/docs", "", nil)
	if status != http.StatusOK || !strings.Contains(hdr.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /docs: %d %s", status, hdr.Get("Content-Type"))
	}
	checkCSP(t, "/docs", hdr.Get("Content-Security-Policy"))
	refs := regexp.MustCompile(`(?:src|href)="([^"]+)"`).FindAllStringSubmatch(string(body), -1)
	if len(refs) < 4 {
		t.Fatalf("/docs references %d assets: %s", len(refs), body)
	}
	base, _ := url.Parse(ts.URL + "/docs")
	for _, m := range refs {
		u, err := base.Parse(m[1])
		if err != nil || u.Host != base.Host {
			t.Errorf("/docs references %q, not on this server", m[1])
			continue
		}
		status, asset, ahdr := ts.do(t, "GET", u.RequestURI(), "", nil)
		if status != http.StatusOK || len(asset) == 0 {
			t.Errorf("asset %s: %d (%d bytes)", u.RequestURI(), status, len(asset))
			continue
		}
		checkCSP(t, u.RequestURI(), ahdr.Get("Content-Security-Policy"))
	}
	// The initializer loads the 3.1 document relative to the page and turns
	// off Swagger UI's outside validator.
	_, initJS, _ := ts.do(t, "GET", "/docs/assets/init.js", "", nil)
	if !strings.Contains(string(initJS), `"openapi.json"`) || !strings.Contains(string(initJS), "validatorUrl: null") {
		t.Errorf("init.js: %s", initJS)
	}
	if status, _, _ := ts.do(t, "GET", "/docs/assets/..%2fgo.mod", "", nil); status != http.StatusNotFound {
		t.Errorf("docs asset outside the list: %d", status)
	}
	// "Try it out" calls the origin the page was served from, whatever
	// KEELSON_PUBLIC_URL says: the page and its initializer answer the same on
	// another Host, and the initializer replaces the document's servers by the
	// page's own base before Swagger UI reads them.
	if !strings.Contains(string(initJS), `new URL(".", document.baseURI)`) || !strings.Contains(string(initJS), "spec.servers = [{ url: base") {
		t.Errorf("init.js does not point Try it out at the page's own origin: %s", initJS)
	}
	for _, p := range []string{"/docs", "/docs/assets/init.js", "/openapi.json"} {
		req, _ := http.NewRequest("GET", ts.URL+p, nil)
		req.Host = "docs.elsewhere.example:9443"
		res, err := ts.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Errorf("%s with Host %s: %d", p, req.Host, res.StatusCode)
		}
	}
	// /docs/ redirects to /docs (the page's relative asset URLs need it).
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := noFollow.Get(ts.URL + "/docs/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	from, _ := url.Parse(ts.URL + "/docs/")
	to, _ := url.Parse(res.Header.Get("Location"))
	if res.StatusCode != http.StatusMovedPermanently || from.ResolveReference(to).Path != "/docs" {
		t.Errorf("/docs/: %d, Location %q; want a redirect to /docs", res.StatusCode, res.Header.Get("Location"))
	}
}

func checkCSP(t *testing.T, what, csp string) {
	t.Helper()
	if csp == "" {
		t.Errorf("%s: no Content-Security-Policy", what)
		return
	}
	for _, d := range strings.Split(csp, ";") {
		for _, src := range strings.Fields(d)[1:] {
			switch src {
			case "'self'", "'none'", "data:":
			default:
				t.Errorf("%s: CSP allows %s (%s)", what, src, strings.TrimSpace(d))
			}
		}
	}
}

// kinOpenAPIErrors loads doc with kin-openapi and runs Validate with its
// default (strictest) options.
func kinOpenAPIErrors(doc []byte) []string {
	loader := openapi3.NewLoader()
	t, err := loader.LoadFromData(doc)
	if err != nil {
		return []string{"load: " + err.Error()}
	}
	if err := t.Validate(context.Background()); err != nil {
		var out []string
		for _, line := range strings.Split(err.Error(), " | ") {
			out = append(out, line)
		}
		return out
	}
	return nil
}

// libOpenAPIErrors builds doc's model with libopenapi and validates the
// document against the OpenAPI specification's schema with
// libopenapi-validator.
func libOpenAPIErrors(doc []byte) []string {
	d, err := libopenapi.NewDocument(doc)
	if err != nil {
		return []string{"parse: " + err.Error()}
	}
	var out []string
	if _, err := d.BuildV3Model(); err != nil {
		out = append(out, "model: "+err.Error())
	}
	v, errs := validator.NewValidator(d)
	for _, err := range errs {
		out = append(out, "validator: "+err.Error())
	}
	if v == nil {
		return out
	}
	if ok, verrs := v.ValidateDocument(); !ok || len(verrs) > 0 {
		for _, e := range verrs {
			s := e.Message + ": " + e.Reason
			for _, se := range e.SchemaValidationErrors {
				s += fmt.Sprintf("\n    at %s (%s): %s", se.FieldPath, se.KeywordLocation, se.Reason)
			}
			out = append(out, s)
		}
		if !ok && len(verrs) == 0 {
			out = append(out, "document invalid (no detail)")
		}
	}
	return out
}

func TestListenURL(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"127.0.0.1:9123": "http://127.0.0.1:9123", "0.0.0.0:8080": "http://localhost:8080",
		"[::]:8080": "http://localhost:8080", "[::1]:81": "http://[::1]:81",
	} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := listenURL(a); got != want {
			t.Errorf("listenURL(%s) = %s, want %s", addr, got, want)
		}
	}
}

// TestAPIDocListsEveryOperation: docs/API.md lists every operation of the served OpenAPI document, so the contract a user
// reads cannot trail the server.
func TestAPIDocListsEveryOperation(t *testing.T) {
	t.Parallel()
	ts := startServer(t, "", nil)
	status, body, _ := ts.do(t, "GET", "/openapi.json", "", nil)
	if status != http.StatusOK {
		t.Fatalf("/openapi.json: %d", status)
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile("../../docs/API.md")
	if err != nil {
		t.Fatal(err)
	}
	// An operation is listed by a table row "| METHOD | /path |" or named in
	// prose as "`METHOD /path`".
	rows := map[string]bool{}
	for _, line := range strings.Split(string(md), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) > 3 {
			rows[strings.TrimSpace(cells[1])+" "+strings.Trim(strings.TrimSpace(cells[2]), "`")] = true
		}
		for _, m := range regexp.MustCompile("`([A-Z]+ /[^`]*)`").FindAllStringSubmatch(line, -1) {
			rows[m[1]] = true
		}
	}
	var missing []string
	n := 0
	for path, ops := range doc.Paths {
		for method := range ops {
			switch method {
			case "get", "post", "put", "patch", "delete", "head", "options":
			default:
				continue
			}
			n++
			if op := strings.ToUpper(method) + " " + path; !rows[op] {
				missing = append(missing, op)
			}
		}
	}
	slices.Sort(missing)
	if n == 0 {
		t.Fatal("the document has no operations")
	}
	if len(missing) > 0 {
		t.Fatalf("docs/API.md neither has a row (| METHOD | /path |) nor names (`METHOD /path`) %d of %d operations:\n%s", len(missing), n, strings.Join(missing, "\n"))
	}
}
