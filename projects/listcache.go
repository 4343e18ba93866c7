package projects

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"sync"
	"sync/atomic"

	"github.com/danielgtaylor/huma/v2"
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
type listCache struct {
	max int64 // bytes of bodies; <= 0 disables the cache

	mu     sync.RWMutex
	gen    uint64
	size   int64
	owners map[string]map[listQuery]listPage

	live atomic.Bool // may serve and store (SQLite: always; Postgres: while the listener is proven)
}

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

func newListCache(max int64, live bool) *listCache {
	c := &listCache{max: max, owners: map[string]map[listQuery]listPage{}}
	c.live.Store(live && max > 0)
	return c
}

func (c *listCache) get(owner string, q listQuery) (listPage, bool) {
	if !c.live.Load() {
		return listPage{}, false
	}
	c.mu.RLock()
	p, ok := c.owners[owner][q]
	c.mu.RUnlock()
	return p, ok
}

// begin returns the generation to pass to put before reading the database.
func (c *listCache) begin() uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.gen
}

// put stores p unless anything was invalidated since begin returned gen.
func (c *listCache) put(gen uint64, owner string, q listQuery, p listPage) {
	n := int64(len(p.body))
	if !c.live.Load() || n > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen || !c.live.Load() {
		return
	}
	for o := range c.owners { // map order: a random owner goes first
		if c.size+n <= c.max {
			break
		}
		c.dropLocked(o)
	}
	m := c.owners[owner]
	if m == nil {
		m = map[listQuery]listPage{}
		c.owners[owner] = m
	}
	if old, ok := m[q]; ok {
		c.size -= int64(len(old.body))
	}
	m[q] = p
	c.size += n
}

func (c *listCache) dropLocked(owner string) {
	for _, p := range c.owners[owner] {
		c.size -= int64(len(p.body))
	}
	delete(c.owners, owner)
}

// invalidate drops every page of owner.
func (c *listCache) invalidate(owner string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.dropLocked(owner)
}

// invalidateAll drops every page.
func (c *listCache) invalidateAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clearLocked()
}

// Invalidate drops what a notification names: an owner, or "*" for all
// (db.Invalidator).
func (c *listCache) Invalidate(_, payload string) {
	if payload == "*" {
		c.invalidateAll()
		return
	}
	c.invalidate(payload)
}

// Reset empties the cache and sets whether it may serve (db.Invalidator).
func (c *listCache) Reset(live bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clearLocked()
	c.live.Store(live && c.max > 0)
}

func (c *listCache) clearLocked() {
	c.gen++
	c.size = 0
	clear(c.owners)
}

// ListChannel is the Postgres channel on which the projects table's triggers
// name the owner of a changed project.
const ListChannel = "keelson_projects_list"

// listTriggers (Postgres only) notify ListChannel with the owner id after any
// change of a projects row, from any process.
func listTriggers(ctx context.Context, idb bun.IDB) error {
	if !db.IsPostgres(idb) {
		return nil
	}
	_, err := idb.ExecContext(ctx, `
CREATE OR REPLACE FUNCTION keelson_projects_list_notify() RETURNS trigger AS $$
BEGIN
	IF TG_OP = 'DELETE' THEN
		PERFORM pg_notify('`+ListChannel+`', OLD.owner_id);
	ELSE
		PERFORM pg_notify('`+ListChannel+`', NEW.owner_id);
		IF TG_OP = 'UPDATE' AND OLD.owner_id IS DISTINCT FROM NEW.owner_id THEN
			PERFORM pg_notify('`+ListChannel+`', OLD.owner_id);
		END IF;
	END IF;
	RETURN NULL;
END $$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS keelson_projects_list_change ON projects;
CREATE TRIGGER keelson_projects_list_change AFTER INSERT OR UPDATE OR DELETE ON projects FOR EACH ROW
	EXECUTE FUNCTION keelson_projects_list_notify();`)
	return err
}

// listen keeps the cache exact across replicas (Postgres) until Close.
func (s *Service) listen() {
	if !db.IsPostgres(s.d.DB) || s.lists.max <= 0 || s.stopListen != nil {
		return
	}
	channels := []string{ListChannel}
	if s.d.PlanChannel != "" {
		channels = append(channels, s.d.PlanChannel)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stopListen = cancel
	s.listening.Add(1)
	go func() {
		defer s.listening.Done()
		db.Listen(ctx, s.d.DB, s.lists, db.ListenConfig{Channels: channels, Logger: s.d.Logger})
	}()
}

// changed invalidates owner's cached pages; every write to owner's projects
// calls it after the write (committed or not) and before answering.
func (s *Service) changed(owner string) { s.lists.invalidate(owner) }

// AccountPlanChanged drops userID's cached lists: the planName of projects
// following the account plan may have changed. The host calls it after an
// account plan assignment commits, before that request answers.
func (s *Service) AccountPlanChanged(userID string) { s.lists.invalidate(userID) }

// PlansChanged drops every cached list: a plan was created, changed or
// deleted, which may rename or move anyone's account plan.
func (s *Service) PlansChanged() { s.lists.invalidateAll() }

// cachedList answers GET /projects for owner: from the cache, or read,
// encoded and stored.
func (s *Service) cachedList(ctx context.Context, owner string, in *listInput) (listPage, error) {
	q := listQuery{status: in.Status, cursor: in.Cursor, size: in.Size()}
	if p, ok := s.lists.get(owner, q); ok {
		return p, nil
	}
	gen := s.lists.begin()
	after, err := platform.DecodeCursor(in.Cursor)
	if err != nil {
		return listPage{}, err
	}
	ps, next, err := s.List(ctx, owner, ListParams{Status: in.Status, Limit: q.size, After: after})
	if err != nil {
		return listPage{}, err
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // as huma.DefaultJSONFormat
	if err := enc.Encode(ps); err != nil {
		return listPage{}, err
	}
	p := listPage{body: b.Bytes(), next: next}
	s.lists.put(gen, owner, q, p)
	return p, nil
}

// listResponses is the 200 response of list-projects as Huma would derive it
// from a Body of []*Project: the handler writes encoded bytes through a body
// function (for which Huma derives no schema), so the document says what they are.
func listResponses(api huma.API) map[string]*huma.Response {
	f, _ := reflect.TypeFor[struct{ Body []*Project }]().FieldByName("Body")
	schema := huma.SchemaFromField(api.OpenAPI().Components.Schemas, f, "ListProjectsResponse")
	return map[string]*huma.Response{"200": {Content: map[string]*huma.MediaType{"application/json": {Schema: schema}}}}
}

// writePage writes an encoded page as Huma writes a body: the negotiated
// content type (every format of the API is JSON unless one was added; then
// the page is decoded and marshalled in it) and status 200.
func writePage(api huma.API, body []byte) func(huma.Context) {
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
		var v []*Project
		if err := json.Unmarshal(body, &v); err == nil {
			_ = api.Marshal(hctx.BodyWriter(), ct, v)
		}
	}
}
