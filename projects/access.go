package projects

import (
	"context"
	"errors"
	"fmt"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// Teams is what projects needs from the teams module: a user's role in a
// team, and the teams a user belongs to.
type Teams interface {
	// MemberRole returns "" when userID is not a member of teamID (or there is no such team).
	MemberRole(ctx context.Context, teamID, userID string) (platform.MemberRole, error)
	TeamsOf(ctx context.Context, userID string) ([]string, error)
}

// Access is a user's standing on a project: its owning account (the user
// of a personal project, or the team), the team ("" when personal) and the
// user's role.
type Access struct {
	ProjectID, OwnerID, TeamID string
	Role                       platform.MemberRole
}

// roleOf is userID's role on the project of row: owner of their personal
// project, their team role on a team's, none otherwise.
func (s *Service) roleOf(ctx context.Context, userID string, r *projectRow) (platform.MemberRole, error) {
	if userID == "" {
		return "", nil
	}
	if r.TeamID == "" && r.OwnerID == userID {
		return platform.MemberOwner, nil
	}
	if r.TeamID == "" || s.d.Teams == nil || !platform.ValidID(r.TeamID) {
		return "", nil
	}
	role, err := s.d.Teams.MemberRole(ctx, r.TeamID, userID)
	if err != nil {
		return "", wrap("team role", err)
	}
	return role, nil
}

// get returns project id (DELETED ones only when withDeleted) when userID
// holds perm on it: 404 when they hold no role (or it is absent), 403
// naming the role needed when theirs is lower. This is the one place every
// project-scoped route of every module is authorised (through Authorize).
func (s *Service) get(ctx context.Context, idb bun.IDB, userID, id string, withDeleted bool, perm platform.Permission) (*projectRow, platform.MemberRole, error) {
	if !platform.ValidID(id) {
		return nil, "", notFound()
	}
	row, err := s.row(ctx, idb, id, withDeleted)
	if err != nil {
		if err = db.Translate(err); isNotFound(err) {
			return nil, "", notFound()
		}
		return nil, "", wrap("get", err)
	}
	role, err := s.roleOf(ctx, userID, row)
	if err != nil {
		return nil, "", err
	}
	if err := platform.Grant(ctx, row.TeamID, role, perm, notFound()); err != nil {
		return nil, "", err // an API token also needs perm among its scopes, and its team
	}
	return row, role, nil
}

// Authorize answers userID's access to project projectID (not deleted) when
// their role holds perm; otherwise a 404 (no role: the project does not
// exist for them) or a 403 naming the role needed. Other modules authorise
// their project-scoped routes through it.
func (s *Service) Authorize(ctx context.Context, userID, projectID string, perm platform.Permission) (*Access, error) {
	row, role, err := s.get(ctx, s.d.DB, userID, projectID, false, perm)
	if err != nil {
		return nil, err
	}
	return &Access{ProjectID: row.ID, OwnerID: row.OwnerID, TeamID: row.TeamID, Role: role}, nil
}

// Accounts returns the accounts whose projects userID may read: their own
// and their teams'.
func (s *Service) Accounts(ctx context.Context, userID string) ([]string, error) {
	if s.d.Teams == nil {
		return platform.TokenAccounts(ctx, []string{userID}), nil
	}
	teams, err := s.d.Teams.TeamsOf(ctx, userID)
	return platform.TokenAccounts(ctx, append([]string{userID}, teams...)), wrap("teams of user", err)
}

// TeamProjects counts the projects teamID owns that are not DELETED.
func (s *Service) TeamProjects(ctx context.Context, teamID string) (int, error) {
	return Counts{DB: s.d.DB}.TeamProjects(ctx, teamID)
}

// Counts answers from the database alone what modules built before this one
// ask of projects (plans, teams), so projects can be built on them.
type Counts struct{ DB bun.IDB }

// TeamProjects counts the projects teamID owns that are not DELETED.
func (c Counts) TeamProjects(ctx context.Context, teamID string) (int, error) {
	n, err := c.DB.NewSelect().Model((*projectRow)(nil)).
		Where("owner_id = ? AND team_id = ? AND status <> ?", teamID, teamID, StatusDeleted).Count(ctx)
	return int(n), wrap("team projects", err)
}

// PlanInUse reports whether a project that is not DELETED uses plan name
// (plans.UsageChecker).
func (c Counts) PlanInUse(ctx context.Context, name string) (bool, error) {
	n, err := c.DB.NewSelect().Model((*projectRow)(nil)).
		Where("plan_name = ? AND status <> ?", name, StatusDeleted).Count(ctx)
	if err != nil {
		return false, wrap("plan in use", err)
	}
	return n > 0, nil
}

// createOwner is the account a new project of userID belongs to: userID,
// or teamID when the caller may create projects there.
func (s *Service) createOwner(ctx context.Context, userID, teamID string) (string, error) {
	if teamID == "" { // a team-bound API token cannot reach the personal account
		return userID, platform.Grant(ctx, "", platform.MemberOwner, platform.ProjectsCreate,
			platform.Forbidden("this API token is bound to a team: name it as teamId"))
	}
	role, err := s.roleOf(ctx, userID, &projectRow{OwnerID: teamID, TeamID: teamID})
	if err != nil {
		return "", err
	}
	return teamID, platform.Grant(ctx, teamID, role, platform.ProjectsCreate, platform.NotFound("team not found"))
}

// TransferInput is the body of POST /projects/{id}/transfer.
type TransferInput struct {
	TeamID string `json:"teamId,omitempty" maxLength:"36" doc:"The team to move the project to; empty or absent: the caller's own account"`
}

func (TransferInput) SchemaName() string { return "TransferProjectRequest" } // OpenAPI schema name

// Transfer moves project id to teamID (or, with "", to userID's own
// account). The caller must be admin or owner of both sides; the target's
// maxProjects quota applies.
func (s *Service) Transfer(ctx context.Context, userID, id, teamID string) (*Project, error) {
	row, _, err := s.get(ctx, s.d.DB, userID, id, false, platform.ProjectsDelete)
	if err != nil {
		return nil, err
	}
	if row.Status != StatusActive {
		return nil, platform.Conflict("project is being deleted (status " + row.Status + "); it cannot move")
	}
	to, err := s.createOwner(ctx, userID, teamID)
	if err != nil {
		return nil, err
	}
	if to != row.OwnerID {
		if err := s.move(ctx, row, to, teamID, userID); err != nil {
			return nil, err
		}
	}
	return s.Get(ctx, userID, id)
}

// move changes the project's owner, taking a slot of the maxProjects the new
// owner counts against and giving back the one it held, in one transaction
// (a move between a user's account and a team borrowing their plan gives back
// and takes a slot of the same counter).
func (s *Service) move(ctx context.Context, row *projectRow, to, teamID, userID string) error {
	plan, quota, err := s.d.Plans.QuotaPlan(ctx, to)
	if err != nil {
		return wrap("account plan", err)
	}
	if err := s.create.prepare(ctx, s.d.DB); err != nil {
		return wrap("prepare", err)
	}
	err = db.InTx(ctx, s.d.DB, func(ctx context.Context, tx bun.Tx) error {
		if err := giveBackSlot(ctx, tx, row.ID); err != nil {
			return err
		}
		res, err := tx.NewUpdate().Model((*projectRow)(nil)).Set("owner_id = ?", to).Set("team_id = ?", teamID).
			Set("created_by = ?", userID).Set("quota_id = ?", quota).Set("updated_at = ?", s.now()).
			Where("id = ? AND owner_id = ? AND status = ?", row.ID, row.OwnerID, StatusActive).Exec(ctx)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return platform.Conflict("the project changed meanwhile (deleted or moved); try again")
		}
		if err := s.record(ctx, tx, row, "project.transfer", "moved to account "+to); err != nil {
			return err
		}
		return s.takeSlot(ctx, tx, quota, plan)
	})
	s.changed(row.OwnerID)
	s.changed(to)
	if err != nil {
		var pe *platform.Error
		if errors.As(err, &pe) {
			return err
		}
		return wrap("transfer", err)
	}
	s.d.Logger.InfoContext(ctx, "project moved", "project_id", row.ID, "from", row.OwnerID, "to", to, "user_id", userID)
	if err := s.events.OwnerChanged.Publish(ctx, OwnerChanged{ProjectID: row.ID, OwnerID: to}); err != nil {
		return fmt.Errorf("projects: the project moved, but its deployments and domains did not follow yet: %w", err)
	}
	return nil
}

// checkHost refuses a changed host pin unless the caller has the platform
// ADMIN role (checked before the host: no one else learns which host ids
// exist), then a host Deps.CheckHost refuses. Sending back the pin is fine.
func (s *Service) checkHost(ctx context.Context, cur *projectRow, host *string) error {
	if host == nil || *host == cur.Host {
		return nil
	}
	if p, _ := platform.PrincipalFrom(ctx); !p.IsAdmin() {
		return platform.Forbidden("pinning a project to a host needs the platform ADMIN role")
	}
	if *host == "" {
		return nil
	}
	if s.d.CheckHost == nil {
		return platform.Invalidf("host %q is not registered", *host)
	}
	return s.d.CheckHost(ctx, *host)
}

// checkSettingsRole refuses a settings update beyond role: secret env vars
// and the webhook secret need admin (a developer sends secrets back masked,
// unchanged), a changed httpsRedirect admin (DomainsWrite), another plan
// owner. A developer sending back the plan name a GET showed keeps the
// stored choice.
func (s *Service) checkSettingsRole(ctx context.Context, role platform.MemberRole, cur *projectRow, in *SettingsInput) error {
	if in.HTTPSRedirect != nil && *in.HTTPSRedirect == cur.KeepHTTP {
		if denied := platform.Grant(ctx, cur.TeamID, role, platform.DomainsWrite, nil); denied != nil {
			return denied
		}
	}
	if denied := platform.Grant(ctx, cur.TeamID, role, platform.SecretsWrite, nil); denied != nil {
		if in.WebhookSecret != nil {
			return denied
		}
		stored, err := decodeEnv(cur.EnvVars)
		if err != nil {
			return err
		}
		secrets, left := map[string]bool{}, 0
		for _, e := range stored {
			secrets[e.K] = e.S
			if e.S {
				left++
			}
		}
		for _, e := range in.EnvVars {
			if e.IsSecret != secrets[e.Key] || (e.IsSecret && e.Value != Mask) {
				return denied
			}
			if e.IsSecret {
				left--
			}
		}
		if left != 0 { // a secret was left out: removed
			return denied
		}
	}
	denied := platform.Grant(ctx, cur.TeamID, role, platform.PlansWrite, nil)
	if denied == nil || in.PlanName == cur.PlanName {
		return nil
	}
	shown := cur.PlanName
	if shown == "" {
		acct, err := s.d.Plans.AccountPlan(ctx, cur.OwnerID)
		if err != nil {
			return wrap("account plan", err)
		}
		shown = acct.Name
	}
	if in.PlanName != shown {
		return denied
	}
	in.PlanName = cur.PlanName
	return nil
}
