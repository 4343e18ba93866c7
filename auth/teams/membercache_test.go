package teams

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/platform/platformtest"
	"github.com/uptrace/bun"
)

// TestTeamsOfSeesEveryWrite: TeamsOf is cached, and every membership write
// (create, join, role change, removal, leaving, team deletion) shows in the
// next TeamsOf of the same service at once; on Postgres a second service on
// the same database (a replica) hears of each through LISTEN/NOTIFY.
func TestTeamsOfSeesEveryWrite(t *testing.T) {
	each(t, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, true)
		ctx := context.Background()
		replica := newEnv(t, bdb, true).svc
		for _, s := range []*Service{e.svc, replica} {
			if err := s.Start(ctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close(ctx) })
		}
		owner, bob := e.user("owner@example.com"), e.user("bob@example.com")
		want := func(what, user string, teams ...string) {
			t.Helper()
			slices.Sort(teams)
			for range 2 { // the second answer comes from the cache
				got, err := e.svc.TeamsOf(ctx, user)
				if err != nil || !slices.Equal(got, teams) {
					t.Fatalf("%s: TeamsOf = %v, %v; want %v", what, got, err, teams)
				}
			}
			if !db.IsPostgres(bdb) {
				return
			}
			platformtest.Eventually(t, 20*time.Second, what+" on the replica", func() bool {
				got, err := replica.TeamsOf(ctx, user)
				return err == nil && slices.Equal(got, teams)
			})
		}
		want("before", owner)
		want("before", bob)
		a, err := e.svc.Create(ctx, owner, "crew")
		if err != nil {
			t.Fatal(err)
		}
		want("created", owner, a.ID)
		b, err := e.svc.Create(ctx, owner, "other")
		if err != nil {
			t.Fatal(err)
		}
		want("second team", owner, a.ID, b.ID)
		for _, team := range []string{a.ID, b.ID} {
			if _, err := e.svc.Invite(ctx, owner, team, "bob@example.com", platform.MemberDeveloper); err != nil {
				t.Fatal(err)
			}
			if _, err := e.svc.Accept(ctx, bob, e.mail.token(t, "bob@example.com")); err != nil {
				t.Fatal(err)
			}
			e.mail.sent = map[string][]string{}
		}
		want("joined", bob, a.ID, b.ID)
		wantOwner := func(what, team, owner string) {
			t.Helper()
			services := []*Service{e.svc, e.svc} // the second answer from the cache
			if db.IsPostgres(bdb) {
				services = append(services, replica) // one process per SQLite database
			}
			for _, s := range services {
				ok := func() bool {
					got, err := s.TeamOwner(ctx, team)
					if owner == "" {
						return errors.Is(err, platform.ErrNotFound)
					}
					return err == nil && got == owner
				}
				if s == replica {
					platformtest.Eventually(t, 20*time.Second, what+" on the replica", ok)
				} else if !ok() {
					t.Fatalf("%s: TeamOwner(%s) is not %q", what, team, owner)
				}
			}
			// Members, the uncached reader of the modules built before teams, agrees.
			got, err := Members{DB: bdb}.TeamOwner(ctx, team)
			if (owner == "" && !errors.Is(err, platform.ErrNotFound)) || (owner != "" && (err != nil || got != owner)) {
				t.Fatalf("%s: Members.TeamOwner(%s) = %q, %v; want %q", what, team, got, err, owner)
			}
		}
		wantOwner("a user's id is no team", owner, "")
		wantOwner("the creator owns the team", a.ID, owner)
		if _, err := e.svc.SetRole(ctx, owner, a.ID, bob, platform.MemberOwner); err != nil {
			t.Fatal(err)
		}
		if _, err := e.svc.SetRole(ctx, bob, a.ID, owner, platform.MemberAdmin); err != nil {
			t.Fatal(err)
		}
		want("role changed", bob, a.ID, b.ID)
		wantOwner("the owner stepped down", a.ID, bob)
		if _, err := e.svc.SetRole(ctx, bob, a.ID, owner, platform.MemberOwner); err != nil {
			t.Fatal(err)
		}
		if _, err := e.svc.SetRole(ctx, owner, a.ID, bob, platform.MemberAdmin); err != nil {
			t.Fatal(err)
		}
		if err := e.svc.Remove(ctx, owner, a.ID, bob); err != nil {
			t.Fatal(err)
		}
		want("removed", bob, b.ID)
		if err := e.svc.Leave(ctx, bob, b.ID); err != nil {
			t.Fatal(err)
		}
		want("left", bob)
		if err := e.svc.Delete(ctx, owner, b.ID); err != nil {
			t.Fatal(err)
		}
		want("team deleted", owner, a.ID)
	})
}
