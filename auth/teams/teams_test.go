package teams

import (
	"context"
	"errors"
	"regexp"
	"strings"
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

// The other modules stand in as fakes here (the auth, plans and projects
// modules are tested on their own, and wired to this one by the reference
// server's TestTeamsE2E).

type usersFake map[string]*User

func (u usersFake) UserByID(_ context.Context, id string) (*User, error) {
	if x, ok := u[id]; ok {
		return x, nil
	}
	return nil, platform.NotFound("user not found")
}

type plansFake struct{ members bool }

func (p plansFake) TeamPlan(context.Context, string, string) (string, bool, error) {
	if p.members {
		return "pro", true, nil
	}
	return "free", false, nil
}

type projectsFake struct{}

func (projectsFake) TeamProjects(context.Context, string) (int, error) { return 0, nil }

type mailbox struct {
	mu   sync.Mutex
	sent map[string][]string // to -> texts
}

func (m *mailbox) Send(_ context.Context, to, _, text string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sent[to] = append(m.sent[to], text)
	return nil
}

var tokenRE = regexp.MustCompile(`/invite\?token=([A-Za-z0-9_-]{43})`)

// token is the token of the last invitation mailed to addr.
func (m *mailbox) token(t *testing.T, addr string) string {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := len(m.sent[addr]) - 1; i >= 0; i-- {
		if s := tokenRE.FindStringSubmatch(m.sent[addr][i]); s != nil {
			return s[1]
		}
	}
	t.Fatalf("no invitation mailed to %s", addr)
	return ""
}

type authFake struct{}

func (authFake) Authenticate(context.Context, string) (platform.Principal, error) {
	return platform.Principal{}, platform.ErrUnauthorized
}

type env struct {
	svc   *Service
	mail  *mailbox
	now   atomic.Int64 // unix nanoseconds of the clock
	users usersFake
}

func newEnv(t *testing.T, bdb *bun.DB, members bool) *env {
	t.Helper()
	e := &env{mail: &mailbox{sent: map[string][]string{}}, users: usersFake{}}
	e.now.Store(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	svc, err := New(Deps{DB: bdb, Auth: authFake{}, Users: e.users, Plans: plansFake{members}, Projects: projectsFake{},
		Mailer: e.mail, FrontendURL: "https://app.example.test",
		Clock: platform.ClockFunc(func() time.Time { return time.Unix(0, e.now.Load()).UTC() })})
	if err != nil {
		t.Fatal(err)
	}
	e.svc = svc
	return e
}

// user adds an account with a verified email and answers its id.
func (e *env) user(email string) string {
	id := platform.NewID()
	e.users[id] = &User{ID: id, Email: email, EmailVerified: true}
	return id
}

func each(t *testing.T, fn func(t *testing.T, bdb *bun.DB)) {
	dbtest.Each(t, []db.MigrationSet{Migrations()}, fn)
}

// TestInvitationIsSingleUse: one token accepted by its account from many
// requests at once adds one member; the others are told it is used.
func TestInvitationIsSingleUse(t *testing.T) {
	each(t, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, true)
		ctx := context.Background()
		owner, bob := e.user("owner@example.com"), e.user("bob@example.com")
		team, err := e.svc.Create(ctx, owner, "crew")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.svc.Invite(ctx, owner, team.ID, "Bob@Example.com", platform.MemberDeveloper); err != nil {
			t.Fatal(err)
		}
		tok := e.mail.token(t, "bob@example.com")
		var ok atomic.Int32
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := e.svc.Accept(ctx, bob, tok)
				switch {
				case err == nil:
					ok.Add(1)
				case !errors.Is(err, platform.ErrNotFound) && !errors.Is(err, platform.ErrConflict):
					t.Errorf("accept: %v", err)
				}
			}()
		}
		wg.Wait()
		ms, _, err := e.svc.Members(ctx, owner, team.ID, platform.PageParams{})
		if ok.Load() != 1 || err != nil || len(ms) != 2 {
			t.Fatalf("%d accepts succeeded, members %d (%v); want 1 and 2", ok.Load(), len(ms), err)
		}
	})
}

// TestTeamKeepsAnOwner: two owners stepping down at once leave one owner.
func TestTeamKeepsAnOwner(t *testing.T) {
	each(t, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, true)
		ctx := context.Background()
		a, b := e.user("a@example.com"), e.user("b@example.com")
		team, err := e.svc.Create(ctx, a, "crew")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.svc.Invite(ctx, a, team.ID, "b@example.com", platform.MemberOwner); err != nil {
			t.Fatal(err)
		}
		if _, err := e.svc.Accept(ctx, b, e.mail.token(t, "b@example.com")); err != nil {
			t.Fatal(err)
		}
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i, who := range []string{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if i == 0 {
					_, errs[i] = e.svc.SetRole(ctx, who, team.ID, who, platform.MemberAdmin)
				} else {
					errs[i] = e.svc.Leave(ctx, who, team.ID)
				}
			}()
		}
		wg.Wait()
		failed := 0
		for _, err := range errs {
			if err != nil {
				if !errors.Is(err, platform.ErrConflict) {
					t.Fatalf("step down: %v", err)
				}
				failed++
			}
		}
		owner, err := e.svc.TeamOwner(ctx, team.ID)
		if failed != 1 || err != nil || owner == "" {
			t.Fatalf("%d of 2 refused, owner %q (%v); want 1 refused and an owner left", failed, owner, err)
		}
	})
}

// TestInvitationRules: expiry on the injected clock, the verified address
// only, and the plan's teamMembers.
func TestInvitationRules(t *testing.T) {
	each(t, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, true)
		ctx := context.Background()
		owner, bob, eve := e.user("owner@example.com"), e.user("bob@example.com"), e.user("eve@example.com")
		team, err := e.svc.Create(ctx, owner, "crew")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.svc.Invite(ctx, owner, team.ID, "bob@example.com", platform.MemberViewer); err != nil {
			t.Fatal(err)
		}
		tok := e.mail.token(t, "bob@example.com")
		if _, err := e.svc.Accept(ctx, eve, tok); !errors.Is(err, platform.ErrForbidden) {
			t.Fatalf("eve accepts bob's invitation: %v", err)
		}
		e.users[bob].EmailVerified = false
		if _, err := e.svc.Accept(ctx, bob, tok); !errors.Is(err, platform.ErrForbidden) {
			t.Fatalf("unverified bob accepts: %v", err)
		}
		e.users[bob].EmailVerified = true
		e.now.Add(int64(DefaultInviteTTL))
		if _, err := e.svc.Accept(ctx, bob, tok); !errors.Is(err, platform.ErrNotFound) {
			t.Fatalf("expired invitation: %v", err)
		}
		if invs, _, err := e.svc.Invitations(ctx, owner, team.ID, platform.PageParams{}); err != nil || len(invs) != 0 {
			t.Fatalf("expired invitation listed: %v %v", invs, err)
		}

		free := newEnv(t, bdb, false)
		_, err = free.svc.Invite(ctx, owner, team.ID, "carol@example.com", platform.MemberViewer)
		if !errors.Is(err, platform.ErrForbidden) || !strings.Contains(err.Error(), "plan free does not include team members") {
			t.Fatalf("invite on a plan without teamMembers: %v", err)
		}
	})
}

// TestInvitationDiesWithInvitersRight: an invitation grants only what its
// inviter may still grant when it is accepted. An admin who invites an
// account of their own as admin, then is removed, gets back in through it
// no more; nor does an owner invitation of an owner demoted to admin, nor
// an invitation of an admin demoted to viewer. The invitations stop being
// listed at once.
func TestInvitationDiesWithInvitersRight(t *testing.T) {
	each(t, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, true)
		ctx := context.Background()
		owner := e.user("owner@example.com")
		team, err := e.svc.Create(ctx, owner, "crew")
		if err != nil {
			t.Fatal(err)
		}
		join := func(email string, role platform.MemberRole) string {
			t.Helper()
			id := e.user(email)
			if _, err := e.svc.Invite(ctx, owner, team.ID, email, role); err != nil {
				t.Fatal(err)
			}
			if _, err := e.svc.Accept(ctx, id, e.mail.token(t, email)); err != nil {
				t.Fatal(err)
			}
			return id
		}
		mallory, demoted, coOwner := join("mallory@example.com", platform.MemberAdmin),
			join("demoted@example.com", platform.MemberAdmin), join("co@example.com", platform.MemberOwner)
		cases := []struct {
			inviter, alt string
			role         platform.MemberRole
			then         func() error
		}{
			{mallory, "mallory.alt@example.com", platform.MemberAdmin, func() error { return e.svc.Remove(ctx, owner, team.ID, mallory) }},
			{demoted, "demoted.alt@example.com", platform.MemberDeveloper, func() error {
				_, err := e.svc.SetRole(ctx, owner, team.ID, demoted, platform.MemberViewer)
				return err
			}},
			{coOwner, "co.alt@example.com", platform.MemberOwner, func() error {
				_, err := e.svc.SetRole(ctx, owner, team.ID, coOwner, platform.MemberAdmin)
				return err
			}},
		}
		for _, c := range cases {
			alt := e.user(c.alt)
			if _, err := e.svc.Invite(ctx, c.inviter, team.ID, c.alt, c.role); err != nil {
				t.Fatalf("%s invites %s: %v", c.inviter, c.alt, err)
			}
			tok := e.mail.token(t, c.alt)
			if err := c.then(); err != nil {
				t.Fatal(err)
			}
			invs, _, err := e.svc.Invitations(ctx, owner, team.ID, platform.PageParams{})
			if err != nil {
				t.Fatal(err)
			}
			for _, inv := range invs {
				if inv.Email == c.alt {
					t.Errorf("invitation of %s as %s still pending after its inviter lost the right to grant it", c.alt, c.role)
				}
			}
			if _, err := e.svc.Accept(ctx, alt, tok); !errors.Is(err, platform.ErrNotFound) {
				t.Errorf("%s accepts an invitation its inviter may no longer grant: %v, want 404", c.alt, err)
			}
			if role, _ := e.svc.MemberRole(ctx, team.ID, alt); role != "" {
				t.Errorf("%s joined as %s", c.alt, role)
			}
		}
	})
}
