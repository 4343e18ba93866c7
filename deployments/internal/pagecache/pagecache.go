// Package pagecache keeps the answered pages of one project's deployments
// (GET /deployments?projectId=, the list a UI or CLI polls while a deploy
// runs), encoded, per project and page (cursor and size). It is exact, not
// timed, like the projects list cache (db.ExactCache): every write to a
// project's deployments names the project (Changed) after it commits and
// before it answers, and on Postgres the deployments table's trigger names
// it to every replica (Channel, Listen). It is not the authorization: a page
// says whose deployments it shows (Page.Owners) and the caller decides, per
// request, whether the asker may see them.
package pagecache

import (
	"cmp"
	"context"
	"log/slog"
	"slices"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// Channel is the Postgres channel on which the deployments table's trigger
// names the project of a changed deployment.
const Channel = "keelson_deployments_list"

// Key is what a page depends on besides its project.
type Key struct {
	Cursor string
	Size   int
}

// Page is one answered page of a project's deployments, read without
// filtering by owner account.
type Page struct {
	Body []byte // as platform.EncodeJSON writes it
	Next string // X-Next-Cursor
	// Owners are the owner accounts of the rows read: the page's and the
	// look-ahead row that decided Next.
	Owners []string
}

// OwnedBy reports whether every row read is of one of accounts: then the
// list filtered by accounts is this very page.
func (p Page) OwnedBy(accounts []string) bool {
	for _, o := range p.Owners {
		if !slices.Contains(accounts, o) {
			return false
		}
	}
	return true
}

// Cache is the pages of every project, bounded by bytes of bodies, and the
// row caches kept with them (NewRows).
type Cache struct {
	pages *db.ExactCache[Key, Page]
	also  db.Invalidators // pages, then each NewRows' rows
	bdb   *bun.DB
	log   *slog.Logger
	stop  func()
}

// New returns a cache of at most max bytes of bodies (<= 0: off). On
// Postgres it serves nothing until Start's listener has proven its connection.
func New(bdb *bun.DB, max int64, log *slog.Logger) *Cache {
	pages := db.NewExactCache[Key, Page](max, func(p Page) int64 { return int64(len(p.Body)) }, !db.IsPostgres(bdb))
	return &Cache{pages: pages, also: db.Invalidators{pages}, bdb: bdb, log: log}
}

// Start listens on Channel (Postgres) until Close.
func (c *Cache) Start() {
	if db.IsPostgres(c.bdb) && c.pages.Enabled() && c.stop == nil {
		c.stop = db.StartListen(c.bdb, c.also, db.ListenConfig{Channels: []string{Channel}, Logger: c.log})
	}
}

// Close stops the listener.
func (c *Cache) Close() {
	if c.stop != nil {
		c.stop()
		c.stop = nil
	}
}

// Live reports whether the cache serves now.
func (c *Cache) Live() bool { return c.pages.Live() }

// Changed drops the pages and rows of projectID ("": of every project).
func (c *Cache) Changed(projectID string) {
	c.also.Invalidate(Channel, cmp.Or(projectID, "*"))
}

// Rows keeps rows of a project's deployments read by id, exact with the
// pages: the same writes (Changed) and notifications drop them.
type Rows[V any] struct {
	rows *db.RowCache[V]
	read func(ctx context.Context, id string) (*V, error)
	keep func(*V) (projectID string, ok bool)
}

// NewRows returns a cache of at most max rows that read reads, kept with
// c's pages (call it before Start). keep says a row's project, and whether
// to store it.
func NewRows[V any](c *Cache, max int64, read func(context.Context, string) (*V, error), keep func(*V) (string, bool)) *Rows[V] {
	if !c.pages.Enabled() {
		max = 0
	}
	r := &Rows[V]{rows: db.NewRowCache[V](max, c.pages.Live()), read: read, keep: keep}
	c.also = append(c.also, r.rows)
	return r
}

// Live reports whether the rows are served now.
func (r *Rows[V]) Live() bool { return r.rows.Live() }

// Read returns row id, stored or read (db.RowCache.Read).
func (r *Rows[V]) Read(ctx context.Context, id string) (*V, error) {
	return r.rows.Read(ctx, id, r.read, r.keep)
}

// Serve answers projectID's page k to a caller who lists accounts: the
// stored page, or all's (the project's rows of every owner) stored unless
// anything changed while all read it; that page when every row it read is of
// accounts (then it is the very page the filtered read gives), else mine's
// (the rows of accounts only: a project moving between accounts), unstored.
func (c *Cache) Serve(projectID string, k Key, accounts []string, all, mine func() (Page, error)) (Page, error) {
	if !c.pages.Live() {
		return mine()
	}
	p, ok := c.pages.Get(projectID, k)
	if !ok {
		gen := c.pages.Begin()
		var err error
		if p, err = all(); err != nil {
			return p, err
		}
		c.pages.Put(gen, projectID, k, p)
	}
	if p.OwnedBy(accounts) {
		return p, nil
	}
	return mine()
}

// Build makes the page of rows, read with one row more than size: the rows'
// owner accounts, the next page's cursor (platform.TrimPage) and the views
// of the rows kept, encoded (platform.EncodeJSON).
func Build[R, V any](rows []R, size int, owner func(R) string, at func(R) platform.Cursor, view func(R) V) (Page, error) {
	var p Page
	for _, r := range rows {
		if o := owner(r); !slices.Contains(p.Owners, o) {
			p.Owners = append(p.Owners, o)
		}
	}
	rows, p.Next = platform.TrimPage(rows, size, at)
	views := make([]V, len(rows))
	for i, r := range rows {
		views[i] = view(r)
	}
	var err error
	p.Body, err = platform.EncodeJSON(views)
	return p, err
}

// Triggers (Postgres only) notify Channel with the project of a deployment
// inserted, deleted or changed, from any process; an update of log_bytes
// alone (every stored batch of log lines; no page shows it) is not told.
func Triggers(ctx context.Context, idb bun.IDB) error {
	return db.ExecPostgres(ctx, idb,
		db.NotifyFunctionIgnoring("keelson_deployments_list_notify", Channel, "project_id", "log_bytes")+
			db.NotifyTrigger("keelson_deployments_list_change", "deployments", "keelson_deployments_list_notify"))
}
