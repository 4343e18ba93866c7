package domains_test

import (
	"context"
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/danielgtaylor/huma/v2/humatest"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/keelson-dev/keelson/platform/events"
	"github.com/keelson-dev/keelson/platform/platformtest"
	"github.com/keelson-dev/keelson/projects/domains"
	"github.com/keelson-dev/keelson/projects/domains/dnstest"
	"github.com/uptrace/bun"
)

// TestMain also fails the binary when a goroutine outlives the tests (the
// re-check loop, a notice in flight, the DNS server's watchers).
func TestMain(m *testing.M) { dbtest.MainCheck(m, func() error { return platformtest.FindLeaks() }) }

// Two accounts; the real authenticator is the auth module's (the reference
// server's e2e tests use it).
var aliceID, bobID = platform.NewID(), platform.NewID()

const (
	asAlice = "Authorization: Bearer alice"
	asBob   = "Authorization: Bearer bob"
)

type tokenAuth struct{}

func (tokenAuth) Authenticate(_ context.Context, tok string) (platform.Principal, error) {
	switch tok {
	case "alice":
		return platform.Principal{UserID: aliceID, Role: platform.RoleUser}, nil
	case "bob":
		return platform.Principal{UserID: bobID, Role: platform.RoleUser}, nil
	}
	return platform.Principal{}, platform.ErrUnauthorized
}

// projectsFake stands in for the projects module (tested on its own and,
// wired to this one, by the reference server's e2e tests).
type projectsFake struct {
	mu sync.Mutex
	m  map[string]fakeProject
}

type fakeProject struct {
	owner string
	domains.Project
}

func (f *projectsFake) add(owner, slug, plan string, custom bool) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := platform.NewID()
	f.m[id] = fakeProject{owner, domains.Project{Slug: slug, PlanName: plan, CustomDomains: custom}}
	return id
}

func (f *projectsFake) remove(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, id)
}

func (f *projectsFake) setPlan(id, plan string, custom bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.m[id]
	p.PlanName, p.CustomDomains = plan, custom
	f.m[id] = p
}

func (f *projectsFake) Project(_ context.Context, owner, id string) (*domains.Project, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.m[id]
	if !ok || p.owner != owner {
		return nil, platform.NotFound("project not found")
	}
	out := p.Project
	return &out, nil
}

type mail struct{ to, subject, text string }

type mailbox struct {
	mu   sync.Mutex
	sent []mail
}

func (m *mailbox) Notify(_ context.Context, userID, subject, text string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sent = append(m.sent, mail{userID, subject, text})
	return nil
}

func (m *mailbox) to(userID string) []mail {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []mail
	for _, x := range m.sent {
		if x.to == userID {
			out = append(out, x)
		}
	}
	return out
}

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

const appsDomain = "apps.keelson.test"

type env struct {
	svc      *domains.Service
	api      humatest.TestAPI
	dns      *dnstest.Server
	projects *projectsFake
	mail     *mailbox
	clock    *clock
	bdb      *bun.DB

	changedMu sync.Mutex
	changed   []string // projects ActiveChanged was called for, in order
}

// changes are the projects ActiveChanged was called for so far.
func (e *env) changes() []string {
	e.changedMu.Lock()
	defer e.changedMu.Unlock()
	return slices.Clone(e.changed)
}

func (e *env) wantChanges(t *testing.T, want ...string) {
	t.Helper()
	if got := e.changes(); !slices.Equal(got, want) {
		t.Fatalf("ActiveChanged calls: %v, want %v", got, want)
	}
}

func sets() []db.MigrationSet { return []db.MigrationSet{domains.Migrations()} }

func setup(t *testing.T, bdb *bun.DB, tweak ...func(*domains.Deps)) *env {
	t.Helper()
	e := &env{dns: dnstest.Start(t), projects: &projectsFake{m: map[string]fakeProject{}}, mail: &mailbox{},
		clock: &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}, bdb: bdb}
	_, e.api = humatest.New(t, platform.APIConfig("test", "1"))
	d := domains.Deps{DB: bdb, Auth: tokenAuth{}, Projects: e.projects, Notifier: e.mail, AppsDomain: appsDomain,
		PublicURL: "https://api.keelson.test", FrontendURL: "https://console.keelson.test:8443",
		IngressIPs: []netip.Addr{netip.MustParseAddr("203.0.113.7"), netip.MustParseAddr("2001:db8::7")},
		Resolvers:  []string{e.dns.DNS}, MaxPerProject: 3, CheckInterval: time.Hour, Clock: e.clock}
	for _, f := range tweak {
		f(&d)
	}
	svc, err := domains.New(d)
	if err != nil {
		t.Fatal(err)
	}
	svc.ActiveChanged().Subscribe(events.Notify(func(ev domains.ActiveChanged) {
		e.changedMu.Lock()
		defer e.changedMu.Unlock()
		e.changed = append(e.changed, ev.ProjectID)
	}))
	if err := svc.Register(e.api); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := svc.Close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	e.svc = svc
	return e
}

func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}

// add POSTs hostname to project as who and wants status want.
func (e *env) add(t *testing.T, who, project, hostname string, want int) (*domains.Domain, string) {
	t.Helper()
	resp := e.api.Post("/projects/"+project+"/domains", who, map[string]any{"hostname": hostname})
	if resp.Code != want {
		t.Fatalf("POST domains %q: %d %s, want %d", hostname, resp.Code, resp.Body, want)
	}
	if want != 201 {
		return nil, resp.Body.String()
	}
	return decode[*domains.Domain](t, resp.Body.Bytes()), resp.Body.String()
}

func (e *env) verify(t *testing.T, who, project, id string) *domains.Domain {
	t.Helper()
	resp := e.api.Post("/projects/"+project+"/domains/"+id+"/verify", who)
	if resp.Code != 200 {
		t.Fatalf("verify: %d %s", resp.Code, resp.Body)
	}
	return decode[*domains.Domain](t, resp.Body.Bytes())
}

func (e *env) get(t *testing.T, who, project, id string) *domains.Domain {
	t.Helper()
	resp := e.api.Get("/projects/"+project+"/domains/"+id, who)
	if resp.Code != 200 {
		t.Fatalf("get: %d %s", resp.Code, resp.Body)
	}
	return decode[*domains.Domain](t, resp.Body.Bytes())
}

// record returns d's record of type typ.
func record(t *testing.T, d *domains.Domain, typ string) domains.Record {
	t.Helper()
	for _, r := range d.Records {
		if r.Type == typ {
			return r
		}
	}
	t.Fatalf("no %s record in %+v", typ, d.Records)
	return domains.Record{}
}

func wantStatus(t *testing.T, d *domains.Domain, status, errPart string) {
	t.Helper()
	if d.Status != status || !strings.Contains(d.LastError, errPart) || (errPart == "" && d.LastError != "") {
		t.Fatalf("domain %s: status %q lastError %q; want %q with %q", d.Hostname, d.Status, d.LastError, status, errPart)
	}
}

// activate makes d's records right and verifies it.
func (e *env) activate(t *testing.T, who, project string, d *domains.Domain) {
	t.Helper()
	e.dns.SetTXT(record(t, d, "TXT").Name, record(t, d, "TXT").Value)
	e.dns.SetCNAME(d.Hostname, record(t, d, "CNAME").Value)
	wantStatus(t, e.verify(t, who, project, d.ID), domains.StatusActive, "")
}

// checkAfter advances the clock by d and runs the periodic check once.
func (e *env) checkAfter(t *testing.T, d time.Duration) int {
	t.Helper()
	e.clock.advance(d)
	n, err := e.svc.CheckDue(context.Background())
	if err != nil {
		t.Fatalf("CheckDue: %v", err)
	}
	return n
}
