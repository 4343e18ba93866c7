package teams

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/mail"
	"strings"
	"time"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// Invitation is a pending invitation as listed: never its token.
type Invitation struct {
	ID        string              `json:"id"`
	TeamID    string              `json:"teamId"`
	Email     string              `json:"email"`
	Role      platform.MemberRole `json:"role" enum:"owner,admin,developer,viewer"`
	InvitedBy string              `json:"invitedBy" doc:"User id of the member who invited"`
	CreatedAt time.Time           `json:"createdAt"`
	ExpiresAt time.Time           `json:"expiresAt"`
}

// SchemaName names the type in the OpenAPI document.
func (Invitation) SchemaName() string { return "TeamInvitation" }

func (r *inviteRow) out() *Invitation {
	return &Invitation{ID: r.ID, TeamID: r.TeamID, Email: r.Email, Role: platform.MemberRole(r.Role),
		InvitedBy: r.InvitedBy, CreatedAt: r.CreatedAt.UTC(), ExpiresAt: r.ExpiresAt.UTC()}
}

func hashToken(tok string) string {
	sum := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(sum[:])
}

// checkSeats refuses a member beyond the first when the team's plan has no
// teamMembers (403 naming the plan).
func (s *Service) checkSeats(ctx context.Context, teamID string) error {
	n, err := s.d.DB.NewSelect().Model((*memberRow)(nil)).Where("team_id = ?", teamID).Count(ctx)
	if err != nil || n < 1 {
		return db.Translate(err)
	}
	owner, err := s.TeamOwner(ctx, teamID)
	if err != nil {
		return err
	}
	plan, members, err := s.d.Plans.TeamPlan(ctx, teamID, owner)
	if err != nil {
		return fmt.Errorf("teams: team plan: %w", err)
	}
	if !members {
		return platform.Forbidden(fmt.Sprintf("plan %s does not include team members (teamMembers): a team on it has only its creator; "+
			"an admin can put the team on a plan with teamMembers (PUT /plans/{id}/teams/{teamId})", plan)).WithCode("QUOTA_EXCEEDED")
	}
	return nil
}

// mayInvite reports whether a member of role may invite (and so, until it
// is accepted, grant) invited: admin and above, the owner role owner only.
func mayInvite(role, invited platform.MemberRole) bool {
	return role.Allows(platform.MembersWrite) && (invited != platform.MemberOwner || role == platform.MemberOwner)
}

// dropInvitesBeyond deletes, in tx, the pending invitations userID made to
// teamID that role (their new one; "" once they left) may no longer grant:
// an invitation is worth what its inviter may grant, not what they once could.
func dropInvitesBeyond(ctx context.Context, tx bun.Tx, teamID, userID string, role platform.MemberRole) error {
	q := tx.NewDelete().Model((*inviteRow)(nil)).Where("team_id = ? AND invited_by = ?", teamID, userID)
	switch {
	case mayInvite(role, platform.MemberOwner):
		return nil
	case mayInvite(role, platform.MemberAdmin):
		q = q.Where("role = ?", platform.MemberOwner)
	}
	_, err := q.Exec(ctx)
	return err
}

// Invite mails an invitation to join teamID with role to email (admin; the
// owner role: owner) and answers it. A pending invitation to the same
// address is replaced.
func (s *Service) Invite(ctx context.Context, userID, teamID, email string, role platform.MemberRole) (*Invitation, error) {
	addr, err := mail.ParseAddress(strings.TrimSpace(email))
	if err != nil || addr.Name != "" || strings.ContainsAny(addr.Address, "\r\n") {
		return nil, platform.Invalid("email: must be an email address")
	}
	email = strings.ToLower(addr.Address)
	if !role.Valid() {
		return nil, platform.Invalid("role: must be one of owner, admin, developer, viewer")
	}
	mine, err := s.access(ctx, s.d.DB, teamID, userID, platform.MembersWrite)
	if err != nil {
		return nil, err
	}
	if role == platform.MemberOwner && mine != platform.MemberOwner {
		return nil, platform.Forbidden("only an owner invites an owner").WithCode("ROLE_TOO_LOW")
	}
	if err := s.checkSeats(ctx, teamID); err != nil {
		return nil, err
	}
	if err := s.limitInvite(ctx, teamID, email); err != nil {
		return nil, err
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	tok := base64.RawURLEncoding.EncodeToString(b)
	now := s.now()
	row := &inviteRow{ID: platform.NewID(), TeamID: teamID, Email: email, Role: string(role), TokenHash: hashToken(tok),
		InvitedBy: userID, CreatedAt: now, ExpiresAt: now.Add(s.d.InviteTTL)}
	err = db.InTx(ctx, s.d.DB, func(ctx context.Context, tx bun.Tx) error {
		// Under the team's lock, as role changes: an inviter removed or
		// demoted meanwhile invites nobody.
		if err := db.LockTx(ctx, tx, "keelson:team:"+teamID); err != nil {
			return err
		}
		if current, err := memberRole(ctx, tx, teamID, userID); err != nil {
			return err
		} else if !mayInvite(current, role) {
			return platform.Conflict("your role in this team changed meanwhile; try again")
		}
		if _, err := tx.NewDelete().Model((*inviteRow)(nil)).Where("team_id = ? AND email = ?", teamID, email).Exec(ctx); err != nil {
			return err
		}
		if _, err := tx.NewInsert().Model(row).Exec(ctx); err != nil {
			return err
		}
		return s.record(ctx, tx, teamID, "invitation.create", "invitation", row.ID, "invited "+email+" as "+string(role))
	})
	if err != nil {
		return nil, db.Translate(err)
	}
	s.mailInvite(ctx, row, tok)
	return row.out(), nil
}

// limitInvite spends one invitation mail of the team's and of the address's budgets.
func (s *Service) limitInvite(ctx context.Context, teamID, email string) error {
	if s.d.Limiter == nil {
		return nil
	}
	if err := s.d.Limiter.Allow(ctx, "team-invite:team:"+teamID, s.d.TeamInviteLimit.Max, s.d.TeamInviteLimit.Per); err != nil {
		return err
	}
	return s.d.Limiter.AllowMailTo(ctx, email)
}

func (s *Service) mailInvite(ctx context.Context, row *inviteRow, tok string) {
	if s.d.Mailer == nil {
		return
	}
	var name string
	_ = s.d.DB.NewSelect().Model((*teamRow)(nil)).Column("name").Where("id = ?", row.TeamID).Scan(ctx, &name)
	link := s.d.FrontendURL + "/invite?token=" + tok
	text := fmt.Sprintf("You are invited to join the Keelson team %s as %s.\n\nAccept while signed in with this address (%s), verified:\n%s\n\n"+
		"The link works once and expires on %s.", name, row.Role, row.Email, link, row.ExpiresAt.Format(time.RFC1123))
	if err := s.d.Mailer.Send(ctx, row.Email, "Invitation to the team "+name, text); err != nil {
		s.d.Log.WarnContext(ctx, "teams: invitation mail not sent", "team_id", row.TeamID, "invitation_id", row.ID, "err", err)
	}
}

// Invitations returns a page of the team's pending invitations, newest first (admin).
func (s *Service) Invitations(ctx context.Context, userID, teamID string, page platform.PageParams) ([]*Invitation, string, error) {
	after, err := s.teamPage(ctx, teamID, userID, platform.MembersWrite, page)
	if err != nil {
		return nil, "", err
	}
	q := s.d.DB.NewSelect().Model((*inviteRow)(nil)).Where("team_id = ? AND expires_at > ?", teamID, s.now())
	rows, next, err := db.ReadPage(ctx, q, db.Keyset{Time: "created_at", ID: "id"}, after, page.Size(),
		func(last inviteRow) platform.Cursor { return platform.Cursor{Time: last.CreatedAt, ID: last.ID} })
	if err != nil {
		return nil, "", db.Translate(err)
	}
	out := make([]*Invitation, len(rows))
	for i := range rows {
		out[i] = rows[i].out()
	}
	return out, next, nil
}

// Revoke deletes a pending invitation (admin).
func (s *Service) Revoke(ctx context.Context, userID, teamID, id string) error {
	if _, err := s.access(ctx, s.d.DB, teamID, userID, platform.MembersWrite); err != nil {
		return err
	}
	// An invitation accepted meanwhile is not found either.
	return db.DeleteScoped(ctx, s.d.DB, id, "team_id", teamID, platform.NotFound("invitation not found"),
		func(ctx context.Context, tx bun.Tx, row *inviteRow) error {
			return s.record(ctx, tx, teamID, "invitation.revoke", "invitation", id, "revoked the invitation of "+row.Email)
		})
}

var errNoInvite = platform.NotFound("invitation not found: it was used, revoked, or has expired")

// Accept makes userID a member as the invitation with token says, when
// their verified email is the invited one; the invitation is used up.
func (s *Service) Accept(ctx context.Context, userID, token string) (*Team, error) {
	if len(token) != 43 {
		return nil, errNoInvite
	}
	row := new(inviteRow)
	if err := s.d.DB.NewSelect().Model(row).Where("token_hash = ?", hashToken(token)).Scan(ctx); err != nil {
		if err = db.Translate(err); errors.Is(err, platform.ErrNotFound) {
			return nil, errNoInvite
		}
		return nil, err
	}
	if !s.now().Before(row.ExpiresAt) {
		return nil, errNoInvite
	}
	u, err := s.d.Users.UserByID(ctx, userID)
	if err != nil {
		return nil, err
	}
	if !u.EmailVerified || !strings.EqualFold(u.Email, row.Email) {
		return nil, platform.Forbidden("this invitation is for another email address: accept it signed in as the invited account, " +
			"whose email must be verified").WithCode("INVITATION_NOT_YOURS")
	}
	if err := s.checkSeats(ctx, row.TeamID); err != nil {
		return nil, err
	}
	if err := s.join(ctx, row, userID); err != nil {
		return nil, err
	}
	s.tell(ctx, row.TeamID, userID, "You joined team %s", "You are now a member of the Keelson team %s, as "+row.Role+".")
	return s.Get(ctx, userID, row.TeamID)
}

// join adds the member and uses the invitation up, once: of two accepts of
// one token only the one that deletes it adds a member.
func (s *Service) join(ctx context.Context, row *inviteRow, userID string) error {
	err := db.InTx(ctx, s.d.DB, func(ctx context.Context, tx bun.Tx) error {
		res, err := tx.NewDelete().Model((*inviteRow)(nil)).Where("id = ?", row.ID).Exec(ctx)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return errNoInvite
		}
		// An invitation made before its inviter was removed or demoted (and
		// so not dropped with their role) grants nothing either.
		if by, err := memberRole(ctx, tx, row.TeamID, row.InvitedBy); err != nil {
			return err
		} else if !mayInvite(by, platform.MemberRole(row.Role)) {
			return errNoInvite
		}
		if role, err := memberRole(ctx, tx, row.TeamID, userID); err != nil {
			return err
		} else if role != "" {
			return platform.Conflict("you are already a member of this team (as " + string(role) + ")")
		}
		m := &memberRow{TeamID: row.TeamID, UserID: userID, Role: row.Role, CreatedAt: s.now()}
		if _, err = tx.NewInsert().Model(m).Exec(ctx); err != nil {
			return err
		}
		return s.record(ctx, tx, row.TeamID, "member.join", "member", userID, "joined as "+row.Role+" (invitation "+row.ID+")")
	})
	s.membersChanged(userID, row.TeamID)
	return db.Translate(err)
}
