package deployments

import (
	"context"

	"github.com/keelson-dev/keelson/deployments/internal/pagecache"
)

// listPage answers GET /deployments encoded; a project's page may come from
// the page cache (internal/pagecache). The decision (the project readable,
// the caller's accounts) is taken per request either way.
func (s *Service) listPage(ctx context.Context, p ListParams) (pagecache.Page, error) {
	cur, owners, err := s.listScope(ctx, p)
	if err != nil {
		return pagecache.Page{}, err
	}
	q := DeploymentListParams{OwnerIDs: owners, ProjectID: p.ProjectID, After: cur, Limit: p.Page.Size()}
	mine := func() (pagecache.Page, error) { return s.encodedPage(ctx, q) }
	if p.ProjectID == "" {
		return mine()
	}
	all := q
	all.OwnerIDs = nil
	return s.lists.Serve(p.ProjectID, pagecache.Key{Cursor: p.Page.Cursor, Size: q.Limit}, owners,
		func() (pagecache.Page, error) { return s.encodedPage(ctx, all) }, mine)
}

// encodedPage reads the page q selects (q.Limit rows) and encodes its views.
func (s *Service) encodedPage(ctx context.Context, q DeploymentListParams) (pagecache.Page, error) {
	size := q.Limit
	q.Limit++
	ds, err := s.store.DeploymentList(ctx, q)
	if err != nil {
		return pagecache.Page{}, err
	}
	return pagecache.Build(ds, size, func(d *Deployment) string { return d.OwnerID }, cursorOf, ViewOf)
}
