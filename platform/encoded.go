package platform

import (
	"bytes"
	"encoding/json"
	"net/http"
	"reflect"

	"github.com/danielgtaylor/huma/v2"
)

// EncodeJSON encodes v as Huma's JSON format writes a body (json.Encoder
// without HTML escaping, a trailing newline): a body kept encoded (a cached
// page) is then written byte for byte as Huma would have written v.
func EncodeJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	if err := writeJSON(&b, v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// WriteEncoded writes body, a T encoded by EncodeJSON, as Huma writes a
// body: the negotiated content type and status 200. Every format of the API
// is JSON unless one was added; then body is decoded into a T and marshalled
// in it.
func WriteEncoded[T any](api huma.API, body []byte) func(huma.Context) {
	return func(hctx huma.Context) {
		ct, err := api.Negotiate(hctx.Header("Accept"))
		if err != nil {
			_ = huma.WriteErr(api, hctx, http.StatusNotAcceptable, "unable to marshal response", err)
			return
		}
		hctx.SetHeader("Content-Type", ct)
		hctx.SetStatus(http.StatusOK)
		if ct == "application/json" || ct == "json" {
			_, _ = hctx.BodyWriter().Write(body)
			return
		}
		var v T
		if err := json.Unmarshal(body, &v); err == nil {
			_ = api.Marshal(hctx.BodyWriter(), ct, v)
		}
	}
}

// EncodedResponses is the 200 response Huma derives from an output's Body
// of type T (hint names its schema as Huma's would: the output type's name
// and "Body"), for an operation that writes T encoded through a body
// function, for which Huma derives no schema.
func EncodedResponses[T any](api huma.API, hint string) map[string]*huma.Response {
	f, _ := reflect.TypeFor[struct{ Body T }]().FieldByName("Body")
	schema := huma.SchemaFromField(api.OpenAPI().Components.Schemas, f, hint)
	return map[string]*huma.Response{"200": {Content: map[string]*huma.MediaType{"application/json": {Schema: schema}}}}
}
