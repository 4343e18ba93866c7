// Package platform is the shared kernel every Keelson module may import: the
// principal (who is calling) and the bearer-auth middleware, the error model and
// the one place that maps errors to HTTP, IDs, the clock and cursor pagination.
//
// It holds no business logic and knows no module. Storage lives in platform/db,
// test databases in platform/dbtest, HTTP plumbing in platform/httpx and secret
// sealing in platform/secret.
package platform
