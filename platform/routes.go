package platform

import (
	"errors"

	"github.com/danielgtaylor/huma/v2"
)

// BearerOps makes the operations of a module's routes that need a bearer
// token: each carries Tags, Bearer security, the RequireAuth middleware and
// MaxBodyBytes (0: huma's default).
type BearerOps struct {
	Tags         []string
	MaxBodyBytes int64
	auth         huma.Middlewares
}

// NewBearerOps checks api, the one module's Register got (named module in
// the error), and returns the module's BearerOps: tagged tag, tokens
// checked by a.
func NewBearerOps(module string, api huma.API, a Authenticator, tag string) (*BearerOps, error) {
	if api == nil {
		return nil, errors.New(module + ": api is required")
	}
	return &BearerOps{Tags: []string{tag}, auth: huma.Middlewares{RequireAuth(api, a)}}, nil
}

// Op is one operation; desc may be empty, status 0 is huma's default.
func (b *BearerOps) Op(id, method, path, summary, desc string, status int) huma.Operation {
	return huma.Operation{OperationID: id, Method: method, Path: path, Summary: summary, Description: desc,
		Tags: b.Tags, Security: Bearer(), Middlewares: b.auth, DefaultStatus: status, MaxBodyBytes: b.MaxBodyBytes}
}

// Reply is a handler's answer from a service call's result: an output O
// (a struct{ Body T }) holding body, or err. In a handler:
//
//	return platform.Reply[projectOutput](s.Get(ctx, caller(ctx), in.ID))
func Reply[O ~struct{ Body T }, T any](body T, err error) (*O, error) {
	if err != nil {
		return nil, err
	}
	return &O{Body: body}, nil
}
