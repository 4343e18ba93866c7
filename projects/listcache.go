package projects

import (
	"context"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// listCache keeps the pages GET /projects answered, encoded, per owner and
// query (status, page size, cursor), so a repeated list needs no query and no
// encoding while nothing it shows changed. Its memory is bounded by max bytes
// of bodies: a put beyond it first drops whole owners.
//
// It is exact, not timed. Every write to the projects table (create,
// settings, delete, the teardown's status changes) invalidates the owner
// after it commits and before it answers, and so does every change of what
// planName shows for projects that follow the account plan (an account plan
// assignment invalidates the user, a plan created, changed or deleted
// invalidates everyone: the host wires that edge from the plans module). A
// read that raced a write cannot store what it read: puts carry the
// generation seen before the query, and every invalidation bumps it. So a
// request sees its own writes, and on SQLite (one process per database) every
// write at once.
//
// On Postgres other replicas learn of a change through LISTEN/NOTIFY
// (db.Listen): triggers on projects name the owner, whoever wrote, and the
// plans module's triggers (Deps.PlanChannel) name the user or "*". The
// window: a replica may answer a page from before another replica's write
// from that write's commit until its listener has received the notification
// (the time NOTIFY takes to travel, about a millisecond on one host). Until
// the listener has proven its connection with a ping of its own the cache
// serves nothing, and it is emptied and bypassed whenever the connection
// fails or a ping goes unanswered.
type listCache = db.ExactCache[listQuery, listPage]

// listQuery is what a page depends on besides its owner.
type listQuery struct {
	status, cursor string
	size           int
}

// listPage is one answered page: the body as Huma's JSON format writes it
// (json.Encoder without HTML escaping, trailing newline) and X-Next-Cursor.
type listPage struct {
	body []byte
	next string
}

// newListCache bounds the cache by max bytes of bodies.
func newListCache(max int64, live bool) *listCache {
	return db.NewExactCache[listQuery, listPage](max, func(p listPage) int64 { return int64(len(p.body)) }, live)
}

// ListChannel is the Postgres channel on which the projects table's triggers
// name the owner of a changed project.
const ListChannel = "keelson_projects_list"

// listTriggers (Postgres only) notify ListChannel with the owner id after any
// change of a projects row, from any process.
func listTriggers(ctx context.Context, idb bun.IDB) error {
	return db.ExecPostgres(ctx, idb, db.NotifyFunction("keelson_projects_list_notify", ListChannel, "owner_id")+
		db.NotifyTrigger("keelson_projects_list_change", "projects", "keelson_projects_list_notify"))
}

// rowCache keeps the ACTIVE project rows get read (GET /projects/{id}, and
// Authorize: every project-scoped route of every module), at most
// rowCacheSize, under their owner: exact the same way, by the same
// invalidations (changed, the triggers on projects; a plan change drops
// them too, needlessly). Only ACTIVE rows are kept: a deletion's teardown
// claims its row (teardown_at) without telling anyone until it ends. What
// the caller may do with the row (roleOf, platform.Grant) is decided on
// every request; its account plan's name is asked on every request too.
type rowCache = db.RowCache[projectRow]

const rowCacheSize = 10_000

func newRowCache(on, live bool) *rowCache {
	if !on {
		return db.NewRowCache[projectRow](0, false)
	}
	return db.NewRowCache[projectRow](rowCacheSize, live)
}

// row reads project id (DELETED too when withDeleted); a project not DELETED
// through the row cache when idb is the pool (not a transaction).
func (s *Service) row(ctx context.Context, idb bun.IDB, id string, withDeleted bool) (*projectRow, error) {
	switch {
	case withDeleted:
		return s.byIDAny.One(ctx, idb, id)
	case idb != bun.IDB(s.d.DB): // a transaction reads what it sees
		return s.byID.One(ctx, idb, id)
	}
	return s.rows.Read(ctx, id, func(ctx context.Context, id string) (*projectRow, error) { return s.byID.One(ctx, idb, id) },
		func(r *projectRow) (string, bool) { return r.OwnerID, r.Status == StatusActive })
}

// listen keeps the caches exact across replicas (Postgres) until Close.
func (s *Service) listen() {
	if !db.IsPostgres(s.d.DB) || !s.lists.Enabled() || s.stopListen != nil {
		return
	}
	channels := []string{ListChannel}
	if s.d.PlanChannel != "" {
		channels = append(channels, s.d.PlanChannel)
	}
	s.stopListen = db.StartListen(s.d.DB, db.Invalidators{s.lists, s.rows}, db.ListenConfig{Channels: channels, Logger: s.d.Logger})
}

// changed invalidates owner's cached pages and rows; every write to owner's
// projects calls it after the write (committed or not) and before answering.
func (s *Service) changed(owner string) {
	s.lists.InvalidateOwner(owner)
	s.rows.InvalidateOwner(owner)
}

// AccountPlanChanged drops userID's cached lists: the planName of projects
// following the account plan may have changed. The host calls it after an
// account plan assignment commits, before that request answers.
func (s *Service) AccountPlanChanged(userID string) { s.lists.InvalidateOwner(userID) }

// PlansChanged drops every cached list: a plan was created, changed or
// deleted, which may rename or move anyone's account plan.
func (s *Service) PlansChanged() { s.lists.InvalidateAll() }

// cachedList answers GET /projects for owner: from the cache, or read,
// encoded and stored.
func (s *Service) cachedList(ctx context.Context, owner string, in *listInput) (listPage, error) {
	q := listQuery{status: in.Status, cursor: in.Cursor, size: in.Size()}
	accounts, err := s.Accounts(ctx, owner)
	if err != nil {
		return listPage{}, err
	}
	if len(accounts) != 1 || accounts[0] != owner { // teams, or a team-bound API token
		return s.teamList(ctx, accounts, in)
	}
	if p, ok := s.lists.Get(owner, q); ok {
		return p, nil
	}
	gen := s.lists.Begin()
	after, err := platform.DecodeCursor(in.Cursor)
	if err != nil {
		return listPage{}, err
	}
	ps, next, err := s.List(ctx, owner, ListParams{Status: in.Status, Limit: q.size, After: after})
	if err != nil {
		return listPage{}, err
	}
	body, err := platform.EncodeJSON(ps) // as huma.DefaultJSONFormat
	if err != nil {
		return listPage{}, err
	}
	p := listPage{body: body, next: next}
	s.lists.Put(gen, owner, q, p)
	return p, nil
}

// teamList answers GET /projects for a member of teams, uncached.
func (s *Service) teamList(ctx context.Context, accounts []string, in *listInput) (listPage, error) {
	after, err := platform.DecodeCursor(in.Cursor)
	if err != nil {
		return listPage{}, err
	}
	ps, next, err := s.listAccounts(ctx, accounts, ListParams{Status: in.Status, Limit: in.Size(), After: after})
	if err != nil {
		return listPage{}, err
	}
	body, err := platform.EncodeJSON(ps)
	return listPage{body: body, next: next}, err
}
