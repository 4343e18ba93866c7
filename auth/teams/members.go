package teams

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// Create makes a team whose owner is userID.
func (s *Service) Create(ctx context.Context, userID, name string) (*Team, error) {
	name, err := teamName(name)
	if err != nil {
		return nil, err
	}
	now := s.now()
	row := &teamRow{ID: platform.NewID(), Name: name, CreatedBy: userID, CreatedAt: now, UpdatedAt: now}
	err = db.InTx(ctx, s.d.DB, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewInsert().Model(row).Exec(ctx); err != nil {
			return err
		}
		m := &memberRow{TeamID: row.ID, UserID: userID, Role: string(platform.MemberOwner), CreatedAt: now}
		if _, err := tx.NewInsert().Model(m).Exec(ctx); err != nil {
			return err
		}
		return s.record(ctx, tx, row.ID, "team.create", "team", row.ID, "created team "+strconv.Quote(name))
	})
	s.membersChanged(userID, row.ID)
	if err != nil {
		return nil, fmt.Errorf("teams: create: %w", db.Translate(err))
	}
	s.d.Log.InfoContext(ctx, "team created", "team_id", row.ID, "user_id", userID)
	return row.out(string(platform.MemberOwner)), nil
}

// teamWithRole is a team row with the caller's role in it.
type teamWithRole struct {
	teamRow `bun:",extend"`
	Role    string `bun:"role"`
}

// List returns a page of the teams userID belongs to, newest first.
func (s *Service) List(ctx context.Context, userID string, page platform.PageParams) ([]*Team, string, error) {
	after, err := platform.DecodeCursor(page.Cursor)
	if err != nil {
		return nil, "", err
	}
	q := s.d.DB.NewSelect().TableExpr("teams AS t").ColumnExpr("t.*, m.role").
		Join("JOIN team_members AS m ON m.team_id = t.id").Where("m.user_id = ?", userID)
	if p, _ := platform.PrincipalFrom(ctx); p.IsToken() && p.TeamID != "" {
		q = q.Where("t.id = ?", p.TeamID) // a team-bound API token sees its team only
	}
	rows, next, err := db.ReadPage(ctx, q, db.Keyset{Time: "t.created_at", ID: "t.id"}, after, page.Size(),
		func(last teamWithRole) platform.Cursor { return platform.Cursor{Time: last.CreatedAt, ID: last.ID} })
	if err != nil {
		return nil, "", fmt.Errorf("teams: list: %w", db.Translate(err))
	}
	out := make([]*Team, len(rows))
	for i := range rows {
		out[i] = rows[i].out(rows[i].Role)
	}
	return out, next, nil
}

// Get returns team id as userID sees it (404 unless a member).
func (s *Service) Get(ctx context.Context, userID, id string) (*Team, error) {
	role, err := s.access(ctx, s.d.DB, id, userID, platform.MembersRead)
	if err != nil {
		return nil, err
	}
	row := new(teamRow)
	if err := s.d.DB.NewSelect().Model(row).Where("id = ?", id).Scan(ctx); err != nil {
		if err = db.Translate(err); errors.Is(err, platform.ErrNotFound) {
			return nil, notFound()
		}
		return nil, err
	}
	return row.out(string(role)), nil
}

// Rename changes the team's name (owner).
func (s *Service) Rename(ctx context.Context, userID, id, name string) (*Team, error) {
	name, err := teamName(name)
	if err != nil {
		return nil, err
	}
	if _, err := s.access(ctx, s.d.DB, id, userID, platform.TeamsWrite); err != nil {
		return nil, err
	}
	err = db.InTx(ctx, s.d.DB, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewUpdate().Model((*teamRow)(nil)).Set("name = ?", name).Set("updated_at = ?", s.now()).
			Where("id = ?", id).Exec(ctx); err != nil {
			return err
		}
		return s.record(ctx, tx, id, "team.update", "team", id, "renamed the team to "+strconv.Quote(name))
	})
	if err != nil {
		return nil, db.Translate(err)
	}
	return s.Get(ctx, userID, id)
}

// Delete removes a team that owns no project (owner), with its members and invitations.
func (s *Service) Delete(ctx context.Context, userID, id string) error {
	if _, err := s.access(ctx, s.d.DB, id, userID, platform.TeamsWrite); err != nil {
		return err
	}
	n, err := s.d.Projects.TeamProjects(ctx, id)
	if err != nil {
		return err
	}
	if n > 0 {
		return platform.Conflict(fmt.Sprintf("the team still owns %d project(s); delete them or transfer them to another owner first", n))
	}
	err = db.InTx(ctx, s.d.DB, func(ctx context.Context, tx bun.Tx) error {
		for _, m := range []any{(*inviteRow)(nil), (*memberRow)(nil)} {
			if _, err := tx.NewDelete().Model(m).Where("team_id = ?", id).Exec(ctx); err != nil {
				return err
			}
		}
		if _, err := tx.NewDelete().Model((*teamRow)(nil)).Where("id = ?", id).Exec(ctx); err != nil {
			return err
		}
		return s.record(ctx, tx, id, "team.delete", "team", id, "deleted the team")
	})
	s.teamsOf.InvalidateAll() // its members, whoever they were
	if err != nil {
		return db.Translate(err)
	}
	s.d.Log.InfoContext(ctx, "team deleted", "team_id", id, "user_id", userID)
	if s.d.Dependents != nil {
		if err := s.d.Dependents.TeamDeleted(ctx, id); err != nil {
			s.d.Log.ErrorContext(ctx, "team deleted, but not what other modules keep of it", "team_id", id, "err", err)
		}
	}
	return nil
}

// Members returns a page of the team's members, first joined first.
func (s *Service) Members(ctx context.Context, userID, id string, page platform.PageParams) ([]*Member, string, error) {
	after, err := s.teamPage(ctx, id, userID, platform.MembersRead, page)
	if err != nil {
		return nil, "", err
	}
	q := s.d.DB.NewSelect().Model((*memberRow)(nil)).Where("team_id = ?", id)
	rows, next, err := db.ReadPage(ctx, q, db.Keyset{Time: "created_at", ID: "user_id", Ascending: true}, after, page.Size(),
		func(last memberRow) platform.Cursor { return platform.Cursor{Time: last.CreatedAt, ID: last.UserID} })
	if err != nil {
		return nil, "", db.Translate(err)
	}
	out := make([]*Member, 0, len(rows))
	for _, r := range rows {
		m := &Member{UserID: r.UserID, Role: platform.MemberRole(r.Role), JoinedAt: r.CreatedAt.UTC()}
		if u, err := s.d.Users.UserByID(ctx, r.UserID); err == nil {
			m.Email = u.Email
		}
		out = append(out, m)
	}
	return out, next, nil
}

// teamPage decodes page's cursor (400 first), then checks that userID holds
// perm in teamID: the gate of every list of a team's rows.
func (s *Service) teamPage(ctx context.Context, teamID, userID string, perm platform.Permission, page platform.PageParams) (*platform.Cursor, error) {
	after, err := platform.DecodeCursor(page.Cursor)
	if err != nil {
		return nil, err
	}
	if _, err := s.access(ctx, s.d.DB, teamID, userID, perm); err != nil {
		return nil, err
	}
	return after, nil
}

// owners counts the team's owners (in tx, under the team's lock).
func owners(ctx context.Context, tx bun.Tx, teamID string) (int64, error) {
	return tx.NewSelect().Model((*memberRow)(nil)).Where("team_id = ? AND role = ?", teamID, platform.MemberOwner).Count(ctx)
}

var errLastOwner = platform.Conflict("a team keeps at least one owner: make another member owner first").WithCode("LAST_OWNER")

// memberChange runs fn on target's membership of teamID under the team's
// lock, after the caller's checks: the caller holds perm (or is the target,
// when self is allowed), only an owner touches an owner or the owner role,
// and the last owner stays one.
type memberChange struct {
	teamID, caller, target string
	perm                   platform.Permission
	self                   bool                // the caller may act on themselves without perm
	newRole                platform.MemberRole // "" removes the member
}

func (s *Service) change(ctx context.Context, c memberChange) (old platform.MemberRole, err error) {
	err = db.InTx(ctx, s.d.DB, func(ctx context.Context, tx bun.Tx) error {
		if err := db.LockTx(ctx, tx, "keelson:team:"+c.teamID); err != nil {
			return err
		}
		mine, err := memberRole(ctx, tx, c.teamID, c.caller)
		if err != nil {
			return err
		}
		if mine == "" || (c.self && c.caller == c.target) {
			// Leaving needs no permission (tokens cannot leave: TokenRules).
			err = platform.Grant(ctx, c.teamID, mine, platform.MembersRead, notFound())
		} else {
			err = platform.Grant(ctx, c.teamID, mine, c.perm, notFound())
		}
		if err != nil {
			return err
		}
		if old, err = memberRole(ctx, tx, c.teamID, c.target); err != nil {
			return err
		}
		if old == "" {
			return platform.NotFound("member not found")
		}
		if (old == platform.MemberOwner || c.newRole == platform.MemberOwner) && mine != platform.MemberOwner {
			return platform.Forbidden("only an owner grants, changes or removes the owner role").WithCode("ROLE_TOO_LOW")
		}
		if old == platform.MemberOwner && c.newRole != platform.MemberOwner {
			if n, err := owners(ctx, tx, c.teamID); err != nil {
				return err
			} else if n <= 1 {
				return errLastOwner
			}
		}
		q := tx.NewUpdate().Model((*memberRow)(nil)).Set("role = ?", c.newRole).Where("team_id = ? AND user_id = ?", c.teamID, c.target)
		if c.newRole == "" {
			_, err = tx.NewDelete().Model((*memberRow)(nil)).Where("team_id = ? AND user_id = ?", c.teamID, c.target).Exec(ctx)
		} else {
			_, err = q.Exec(ctx)
		}
		if err != nil {
			return err
		}
		if err := dropInvitesBeyond(ctx, tx, c.teamID, c.target, c.newRole); err != nil {
			return err
		}
		action, summary := c.audit(old)
		return s.record(ctx, tx, c.teamID, action, "member", c.target, summary)
	})
	s.membersChanged(c.target, c.teamID)
	return old, db.Translate(err)
}

// audit names the change for the audit log: its action and summary.
func (c memberChange) audit(old platform.MemberRole) (action, summary string) {
	switch {
	case c.newRole != "":
		return "member.role", fmt.Sprintf("role of user %s: %s -> %s", c.target, old, c.newRole)
	case c.self && c.caller == c.target:
		return "member.leave", fmt.Sprintf("left the team (was %s)", old)
	}
	return "member.remove", fmt.Sprintf("removed user %s (was %s)", c.target, old)
}

// SetRole changes a member's role (admin; the owner role: owner).
func (s *Service) SetRole(ctx context.Context, userID, teamID, target string, role platform.MemberRole) (*Member, error) {
	if !role.Valid() {
		return nil, platform.Invalid("role: must be one of owner, admin, developer, viewer")
	}
	if !platform.ValidID(teamID) {
		return nil, notFound()
	}
	old, err := s.change(ctx, memberChange{teamID: teamID, caller: userID, target: target, perm: platform.MembersWrite, newRole: role})
	if err != nil {
		return nil, err
	}
	if old != role {
		s.tell(ctx, teamID, target, "Your role in team %s is now "+string(role),
			"Your role in the Keelson team %s changed from "+string(old)+" to "+string(role)+".")
	}
	var row memberRow
	if err := s.d.DB.NewSelect().Model(&row).Where("team_id = ? AND user_id = ?", teamID, target).Scan(ctx); err != nil {
		return nil, db.Translate(err)
	}
	m := &Member{UserID: target, Role: role, JoinedAt: row.CreatedAt.UTC()}
	if u, err := s.d.Users.UserByID(ctx, target); err == nil {
		m.Email = u.Email
	}
	return m, nil
}

// Remove takes target out of the team (admin; an owner: owner). They lose
// the team's projects at once: every route asks their role again.
func (s *Service) Remove(ctx context.Context, userID, teamID, target string) error {
	if !platform.ValidID(teamID) {
		return notFound()
	}
	if _, err := s.change(ctx, memberChange{teamID: teamID, caller: userID, target: target, perm: platform.MembersWrite}); err != nil {
		return err
	}
	s.tell(ctx, teamID, target, "You were removed from team %s", "You are no longer a member of the Keelson team %s.")
	return nil
}

// Leave takes the caller out of the team; the last owner cannot leave.
func (s *Service) Leave(ctx context.Context, userID, teamID string) error {
	if !platform.ValidID(teamID) {
		return notFound()
	}
	_, err := s.change(ctx, memberChange{teamID: teamID, caller: userID, target: userID, perm: platform.MembersWrite, self: true})
	return err
}

// tell mails userID about their membership of teamID; a failure is logged.
// subject and text hold one %s, the team's name.
func (s *Service) tell(ctx context.Context, teamID, userID, subject, text string) {
	if s.d.Mailer == nil {
		return
	}
	var name string
	_ = s.d.DB.NewSelect().Model((*teamRow)(nil)).Column("name").Where("id = ?", teamID).Scan(ctx, &name)
	u, err := s.d.Users.UserByID(ctx, userID)
	if err == nil {
		err = s.d.Mailer.Send(ctx, u.Email, fmt.Sprintf(subject, name), fmt.Sprintf(text, name))
	}
	if err != nil {
		s.d.Log.WarnContext(ctx, "teams: member notice not sent", "team_id", teamID, "user_id", userID, "err", err)
	}
}
