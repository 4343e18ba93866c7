package teams

import (
	"context"
	"slices"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// memberCache keeps, per user, the teams they belong to (TeamsOf), which
// the routes that list what a user may see ask on every request (GET
// /projects, a project's deployments): while nothing changed, no query.
//
// It is exact, not timed, like the projects list cache (db.ExactCache):
// every write to team_members here (a team created or deleted, a member
// joining, removed, leaving or given another role) invalidates the users it
// touched after it commits (or fails) and before it answers; a read that
// raced such a write cannot store what it read. On Postgres other replicas
// hear of a change through LISTEN/NOTIFY (a trigger on team_members names
// the user, whoever wrote); until the listener has proven its connection
// the cache serves nothing, and it is emptied and bypassed whenever the
// connection fails.
//
// It keeps TeamOwner's answers the same way, under the team's id (an id
// that is no team's, a user's, is kept as no owner): the trigger names the
// team too, and the writes here invalidate it.
type memberCache = db.ExactCache[cacheKind, []string]

// cacheKind tells what an entry of the member cache holds.
type cacheKind uint8

const (
	teamsOfUser cacheKind = iota // owner: a user; the ids of their teams
	ownerOfTeam                  // owner: a team id; its first owner (none: not a team)
)

// memberCacheUsers bounds the users whose teams are kept.
const memberCacheUsers = 100_000

// MembersChannel is the Postgres channel on which the team_members trigger
// names a user whose memberships changed.
const MembersChannel = "keelson_team_members"

// memberTriggers (Postgres only) notify MembersChannel with the user id after
// any change of a team_members row, from any process.
func memberTriggers(ctx context.Context, idb bun.IDB) error {
	return db.ExecPostgres(ctx, idb,
		db.NotifyFunction("keelson_team_members_notify", MembersChannel, "user_id")+
			db.NotifyFunction("keelson_team_members_team_notify", MembersChannel, "team_id")+
			db.NotifyTrigger("keelson_team_members_change", "team_members", "keelson_team_members_notify")+
			db.NotifyTrigger("keelson_team_members_team_change", "team_members", "keelson_team_members_team_notify"))
}

// TeamsOf returns the ids of the teams userID belongs to.
func (s *Service) TeamsOf(ctx context.Context, userID string) ([]string, error) {
	if ids, ok := s.teamsOf.Get(userID, teamsOfUser); ok {
		return slices.Clone(ids), nil
	}
	gen := s.teamsOf.Begin()
	var ids []string
	err := s.d.DB.NewSelect().Model((*memberRow)(nil)).Column("team_id").
		Where("user_id = ?", userID).Order("team_id").Scan(ctx, &ids)
	if err != nil {
		return nil, db.Translate(err)
	}
	s.teamsOf.Put(gen, userID, teamsOfUser, slices.Clone(ids))
	return ids, nil
}

// TeamOwner returns the owner whose account plan the team follows until it
// has its own: the owner who joined first. An unknown team wraps
// platform.ErrNotFound.
func (s *Service) TeamOwner(ctx context.Context, teamID string) (string, error) {
	if !platform.ValidID(teamID) {
		return "", notFound()
	}
	ids, ok := s.teamsOf.Get(teamID, ownerOfTeam)
	if !ok {
		gen := s.teamsOf.Begin()
		var err error
		if ids, err = firstOwner(ctx, s.d.DB, teamID); err != nil {
			return "", err
		}
		s.teamsOf.Put(gen, teamID, ownerOfTeam, ids)
	}
	if len(ids) == 0 {
		return "", notFound()
	}
	return ids[0], nil
}

// firstOwner reads the owner who joined teamID first (none: an empty slice).
func firstOwner(ctx context.Context, idb bun.IDB, teamID string) ([]string, error) {
	var ids []string
	err := idb.NewSelect().Model((*memberRow)(nil)).Column("user_id").
		Where("team_id = ? AND role = ?", teamID, platform.MemberOwner).
		OrderExpr("created_at ASC, user_id ASC").Limit(1).Scan(ctx, &ids)
	return ids, db.Translate(err)
}

// Members answers questions about teams' members from the database alone,
// with no service and no cache: the modules built before this one (API
// tokens, plans; teams needs both) ask it. Its answers are the service's.
type Members struct{ DB bun.IDB }

// MemberRole returns userID's role in teamID, as Service.MemberRole.
func (m Members) MemberRole(ctx context.Context, teamID, userID string) (platform.MemberRole, error) {
	return memberRole(ctx, m.DB, teamID, userID)
}

// TeamOwner returns the owner who joined teamID first, as Service.TeamOwner.
func (m Members) TeamOwner(ctx context.Context, teamID string) (string, error) {
	if !platform.ValidID(teamID) {
		return "", notFound()
	}
	ids, err := firstOwner(ctx, m.DB, teamID)
	if err != nil {
		return "", err
	}
	if len(ids) == 0 {
		return "", notFound()
	}
	return ids[0], nil
}

// membersChanged drops what the cache keeps of users and teams; every write
// to team_members calls it after the write (committed or not), before
// answering.
func (s *Service) membersChanged(ids ...string) {
	for _, id := range ids {
		s.teamsOf.InvalidateOwner(id)
	}
}
