package apitokens

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/uptrace/bun"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// The auth and teams modules stand in as fakes here; the reference
// server's TestAPITokensE2E wires the real ones.

type usersFake struct{ gone sync.Map } // id -> true once deleted

func (u *usersFake) UserByID(_ context.Context, id string) (*User, error) {
	if _, ok := u.gone.Load(id); ok {
		return nil, platform.NotFound("user not found")
	}
	return &User{ID: id, Email: id + "@example.com"}, nil
}

type teamsFake map[string]platform.MemberRole // team -> the role of every user

func (t teamsFake) MemberRole(_ context.Context, teamID, _ string) (platform.MemberRole, error) {
	return t[teamID], nil
}

type sessions struct{}

func (sessions) Authenticate(context.Context, string) (platform.Principal, error) {
	return platform.Principal{}, platform.ErrUnauthorized
}

type env struct {
	svc   *Service
	users *usersFake
	now   atomic.Int64
	db    *bun.DB
}

func newEnv(t *testing.T, bdb *bun.DB, teams teamsFake) *env {
	e := &env{users: &usersFake{}, db: bdb}
	e.now.Store(time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC).UnixNano())
	svc, err := New(Deps{DB: bdb, Auth: sessions{}, Users: e.users, Teams: teams, MaxPerUser: 3,
		Clock: platform.ClockFunc(func() time.Time { return time.Unix(0, e.now.Load()).UTC() })})
	if err != nil {
		t.Fatal(err)
	}
	e.svc = svc
	return e
}

func (e *env) advance(d time.Duration) { e.now.Add(int64(d)) }

func each(t *testing.T, fn func(t *testing.T, bdb *bun.DB)) {
	dbtest.Each(t, []db.MigrationSet{Migrations()}, fn)
}

func code(err error) string {
	var pe *platform.Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// TestTokenCapUnderConcurrency: many creations at once store MaxPerUser
// tokens; the others are told the limit.
func TestTokenCapUnderConcurrency(t *testing.T) {
	each(t, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, nil)
		user := platform.NewID()
		var wg sync.WaitGroup
		var made, refused atomic.Int64
		for range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := e.svc.Create(context.Background(), user, &CreateRequest{Name: "ci", Scopes: []string{"projects:read"}})
				switch {
				case err == nil:
					made.Add(1)
				case code(err) == "TOKEN_LIMIT":
					refused.Add(1)
				default:
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		list, err := e.svc.List(context.Background(), user)
		if err != nil || made.Load() != 3 || refused.Load() != 9 || len(list) != 3 {
			t.Fatalf("made %d, refused %d, listed %d (%v); want 3, 9, 3", made.Load(), refused.Load(), len(list), err)
		}
	})
}

// TestAuthenticate: the principal is the creator narrowed by scopes and
// team; the last use is written at most once a minute; expiry, revocation
// and a deleted creator answer 401.
func TestAuthenticate(t *testing.T) {
	each(t, func(t *testing.T, bdb *bun.DB) {
		team := platform.NewID()
		e := newEnv(t, bdb, teamsFake{team: platform.MemberDeveloper})
		ctx := platform.WithClientAddr(context.Background(), "192.0.2.7")
		user := platform.NewID()
		exp := time.Unix(0, e.now.Load()).Add(time.Hour)
		tok, err := e.svc.Create(ctx, user, &CreateRequest{Name: "ci", Scopes: []string{"deployments:write", "projects:read"}, TeamID: team, ExpiresAt: &exp})
		if err != nil {
			t.Fatal(err)
		}
		p, err := e.svc.Authenticate(ctx, tok.Secret)
		if err != nil || p.UserID != user || p.TokenID != tok.ID || p.TeamID != team || len(p.Scopes) != 2 || p.Role != platform.RoleUser {
			t.Fatalf("principal %+v, %v", p, err)
		}
		lastUse := func() (time.Time, string) {
			ts, err := e.svc.List(ctx, user)
			if err != nil || len(ts) != 1 || ts[0].LastUsedAt == nil {
				t.Fatalf("list %+v %v", ts, err)
			}
			return *ts[0].LastUsedAt, ts[0].LastUsedAddr
		}
		first, addr := lastUse()
		if addr != "192.0.2.7" {
			t.Fatalf("last address %q", addr)
		}
		e.advance(30 * time.Second)
		if _, err := e.svc.Authenticate(platform.WithClientAddr(ctx, "192.0.2.8"), tok.Secret); err != nil {
			t.Fatal(err)
		}
		if at, addr := lastUse(); !at.Equal(first) || addr != "192.0.2.7" {
			t.Fatalf("written again within a minute: %v %s", at, addr)
		}
		e.advance(31 * time.Second)
		if _, err := e.svc.Authenticate(platform.WithClientAddr(ctx, "192.0.2.8"), tok.Secret); err != nil {
			t.Fatal(err)
		}
		if at, addr := lastUse(); !at.After(first) || addr != "192.0.2.8" {
			t.Fatalf("not written after a minute: %v %s", at, addr)
		}
		e.advance(time.Hour)
		if _, err := e.svc.Authenticate(ctx, tok.Secret); !errors.Is(err, platform.ErrUnauthorized) {
			t.Fatalf("expired: %v", err)
		}
	})
}

func TestRevokedAndOrphanedTokens(t *testing.T) {
	each(t, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, nil)
		ctx := context.Background()
		alice, bob := platform.NewID(), platform.NewID()
		a, err := e.svc.Create(ctx, alice, &CreateRequest{Name: "a", Scopes: []string{"projects:read"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.svc.Delete(ctx, bob, a.ID); !errors.Is(err, platform.ErrNotFound) {
			t.Fatalf("another account revokes: %v", err)
		}
		if err := e.svc.Delete(ctx, alice, a.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := e.svc.Authenticate(ctx, a.Secret); !errors.Is(err, platform.ErrUnauthorized) {
			t.Fatalf("revoked: %v", err)
		}
		b, err := e.svc.Create(ctx, bob, &CreateRequest{Name: "b", Scopes: []string{"projects:read"}})
		if err != nil {
			t.Fatal(err)
		}
		e.users.gone.Store(bob, true)
		if _, err := e.svc.Authenticate(ctx, b.Secret); !errors.Is(err, platform.ErrUnauthorized) {
			t.Fatalf("deleted creator: %v", err)
		}
		if n, err := bdb.NewSelect().Model((*tokenRow)(nil)).Where("user_id = ?", bob).Count(ctx); err != nil || n != 0 {
			t.Fatalf("a deleted creator's tokens: %d %v", n, err)
		}
	})
}

// TestTeamBoundCreation: a team-bound token needs membership (404) and a
// role that holds every scope (403), and stores nothing when refused.
func TestTeamBoundCreation(t *testing.T) {
	each(t, func(t *testing.T, bdb *bun.DB) {
		team := platform.NewID()
		e := newEnv(t, bdb, teamsFake{team: platform.MemberDeveloper})
		ctx := context.Background()
		user := platform.NewID()
		for _, c := range []struct {
			in   CreateRequest
			want int
		}{
			{CreateRequest{Name: "x", Scopes: []string{"domains:write"}, TeamID: team}, 403},
			{CreateRequest{Name: "x", Scopes: []string{"projects:read"}, TeamID: platform.NewID()}, 404},
			{CreateRequest{Name: "x", Scopes: []string{"projects:read"}, TeamID: "not-a-uuid"}, 404},
			{CreateRequest{Name: "x\x00", Scopes: []string{"projects:read"}}, 400},
		} {
			var pe *platform.Error
			if _, err := e.svc.Create(ctx, user, &c.in); !errors.As(err, &pe) || pe.Status != c.want {
				t.Fatalf("%+v: %v, want %d", c.in, err, c.want)
			}
		}
		if ts, err := e.svc.List(ctx, user); err != nil || len(ts) != 0 {
			t.Fatalf("refused creations stored %v %v", ts, err)
		}
		if _, err := e.svc.Create(ctx, user, &CreateRequest{Name: "deploy", Scopes: []string{"deployments:write"}, TeamID: team}); err != nil {
			t.Fatal(err)
		}
	})
}
