package auditlog_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/humatest"
	"github.com/keelson-dev/keelson/auth/auditlog"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/audit"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/keelson-dev/keelson/platform/platformtest"
	"github.com/uptrace/bun"
)

// The prune loop is the package's only goroutine: none may outlive Close.
func TestMain(m *testing.M) { dbtest.MainCheck(m, func() error { return platformtest.FindLeaks() }) }

type noAuth struct{}

func (noAuth) Authenticate(context.Context, string) (platform.Principal, error) {
	return platform.Principal{}, platform.ErrUnauthorized
}

type noTeams struct{}

func (noTeams) MemberRole(context.Context, string, string) (platform.MemberRole, error) {
	return "", nil
}

// clock is a settable clock.
type clock struct{ at atomic.Pointer[time.Time] }

func (c *clock) Now() time.Time  { return *c.at.Load() }
func (c *clock) set(t time.Time) { c.at.Store(&t) }

func count(t *testing.T, bdb *bun.DB) int {
	t.Helper()
	n, err := bdb.NewSelect().Table("audit_events").Count(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return int(n)
}

func newService(t *testing.T, bdb *bun.DB, c *clock, retention time.Duration) *auditlog.Service {
	t.Helper()
	svc, err := auditlog.New(auditlog.Deps{DB: bdb, Auth: noAuth{}, Teams: noTeams{}, Retention: retention,
		PruneEvery: 10 * time.Millisecond, Clock: c})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// TestRecord: a row for the principal in ctx (or the entry's actor), with
// the address; none for nobody; none when the change's transaction rolls back.
func TestRecord(t *testing.T) {
	dbtest.Each(t, []db.MigrationSet{auditlog.Migrations()}, func(t *testing.T, bdb *bun.DB) {
		c := &clock{}
		c.set(time.Now().UTC())
		svc := newService(t, bdb, c, 0)
		ctx := context.Background()
		e := audit.Entry{Action: "project.create", ResourceType: "project", ResourceID: platform.NewID()}
		if err := svc.Record(ctx, bdb, e); err != nil || count(t, bdb) != 0 {
			t.Fatalf("nobody acting: err %v, %d rows", err, count(t, bdb))
		}
		user, token := platform.NewID(), platform.NewID()
		pctx := platform.WithClientAddr(platform.WithPrincipal(ctx, platform.Principal{UserID: user, TokenID: token}), "192.0.2.7")
		boom := errors.New("the change failed")
		err := db.InTx(pctx, bdb, func(ctx context.Context, tx bun.Tx) error {
			if err := svc.Record(ctx, tx, e); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) || count(t, bdb) != 0 {
			t.Fatalf("rolled back change: err %v, %d rows (want none)", err, count(t, bdb))
		}
		if err := svc.Record(pctx, bdb, e); err != nil {
			t.Fatal(err)
		}
		var row struct {
			ActorID string `bun:"actor_id"`
			TokenID string `bun:"token_id"`
			Addr    string `bun:"addr"`
			Action  string `bun:"action"`
		}
		if err := bdb.NewSelect().Table("audit_events").Column("actor_id", "token_id", "addr", "action").Scan(ctx, &row); err != nil {
			t.Fatal(err)
		}
		if row.ActorID != user || row.TokenID != token || row.Addr != "192.0.2.7" || row.Action != "project.create" {
			t.Fatalf("row %+v", row)
		}
		if err := svc.Record(ctx, bdb, audit.Entry{Action: "account.login", ActorID: user}); err != nil || count(t, bdb) != 2 {
			t.Fatalf("login row: err %v, %d rows", err, count(t, bdb))
		}
	})
}

// TestRetention: Prune deletes rows older than the retention only; Start
// prunes at once and then on its ticker, and Close ends the loop (goleak in
// TestMain proves nothing is left).
func TestRetention(t *testing.T) {
	dbtest.Each(t, []db.MigrationSet{auditlog.Migrations()}, func(t *testing.T, bdb *bun.DB) {
		c := &clock{}
		now := time.Now().UTC()
		svc := newService(t, bdb, c, 24*time.Hour)
		ctx := platform.WithPrincipal(context.Background(), platform.Principal{UserID: platform.NewID()})
		for _, at := range []time.Time{now.Add(-72 * time.Hour), now.Add(-25 * time.Hour), now.Add(-time.Hour), now} {
			c.set(at)
			if err := svc.Record(ctx, bdb, audit.Entry{Action: "team.update", ResourceType: "team"}); err != nil {
				t.Fatal(err)
			}
		}
		c.set(now)
		if n, err := svc.Prune(context.Background()); err != nil || n != 2 || count(t, bdb) != 2 {
			t.Fatalf("prune: %d deleted, err %v, %d left (want 2 and 2)", n, err, count(t, bdb))
		}
		c.set(now.Add(23*time.Hour + 30*time.Minute)) // the row of an hour before now passes a day
		if err := svc.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		platformtest.Eventually(t, 10*time.Second, "the loop pruned the row of a day ago", func() bool { return count(t, bdb) == 1 })
		if err := svc.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := svc.Close(context.Background()); err != nil { // twice
			t.Fatal(err)
		}
		never := newService(t, bdb, c, -1) // forever: no loop, Prune does nothing
		if n, err := never.Prune(context.Background()); n != 0 || err != nil {
			t.Fatalf("forever prune: %d %v", n, err)
		}
		if err := never.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := never.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// tokens answers a principal per bearer token.
type tokens map[string]platform.Principal

func (m tokens) Authenticate(_ context.Context, tok string) (platform.Principal, error) {
	if p, ok := m[tok]; ok {
		return p, nil
	}
	return platform.Principal{}, platform.ErrUnauthorized
}

type roles map[string]platform.MemberRole // user id -> role in the one team

func (r roles) MemberRole(_ context.Context, _, userID string) (platform.MemberRole, error) {
	return r[userID], nil
}

// TestTeamLogAccess: admin and owner read the team log; a viewer 403; an
// API token needs audit:read in its scopes (403) and its team (404 otherwise).
func TestTeamLogAccess(t *testing.T) {
	bdb := dbtest.SQLite(t, auditlog.Migrations())
	team, admin, viewer := platform.NewID(), platform.NewID(), platform.NewID()
	svc, err := auditlog.New(auditlog.Deps{DB: bdb, Teams: roles{admin: platform.MemberAdmin, viewer: platform.MemberViewer},
		Auth: tokens{
			"admin":      {UserID: admin},
			"viewer":     {UserID: viewer},
			"no-scope":   {UserID: admin, TokenID: platform.NewID(), Scopes: []platform.Permission{platform.ProjectsRead}},
			"other-team": {UserID: admin, TokenID: platform.NewID(), Scopes: []platform.Permission{platform.AuditRead}, TeamID: platform.NewID()},
			"scoped":     {UserID: admin, TokenID: platform.NewID(), Scopes: []platform.Permission{platform.AuditRead}, TeamID: team},
		}})
	if err != nil {
		t.Fatal(err)
	}
	_, api := humatest.New(t, platform.APIConfig("test", "1"))
	// Tokens may use every route here (the server lists the audit-log route).
	api.UseMiddleware(platform.TokenRules(api, func(*huma.Operation) platform.TokenRule { return platform.TokenRule{} }))
	if err := svc.Register(api); err != nil {
		t.Fatal(err)
	}
	for tok, want := range map[string]int{"admin": 200, "scoped": 200, "viewer": 403, "no-scope": 403, "other-team": 404} {
		resp := api.Get("/teams/"+team+"/audit-log", "Authorization: Bearer "+tok)
		if resp.Code != want {
			t.Errorf("team log as %s: %d %s, want %d", tok, resp.Code, resp.Body, want)
		}
	}
}
