package main

import (
	"context"
	"net/http"
	"testing"

	"github.com/keelson-dev/keelson/examples/apiclient"
)

// teams drives the team, member and invitation routes, the team plan and a
// project's transfer through the generated client: a team on plan pro, a
// member invited, accepted, promoted and removed, a project moved in and
// out, and the team deleted.
func (e *statusEnv) teams(t *testing.T) {
	ctx := context.Background()
	owner := e.rec.client(t, e.ts, e.ts.signupVerified(t, "team-owner@example.com"))
	member := e.rec.client(t, e.ts, e.ts.signupVerified(t, "team-member@example.com"))
	admin := e.rec.client(t, e.ts, e.admin)
	team, err := owner.CreateTeamWithResponse(ctx, apiclient.TeamRequest{Name: "ops"})
	want(t, "create team", team, err, http.StatusCreated)
	id := team.JSON201.Id
	list, err := owner.ListTeamsWithResponse(ctx, nil)
	want(t, "list teams", list, err, http.StatusOK)
	got, err := owner.GetTeamWithResponse(ctx, id)
	want(t, "get team", got, err, http.StatusOK)
	ren, err := owner.UpdateTeamWithResponse(ctx, id, apiclient.TeamRequest{Name: "operations"})
	want(t, "rename team", ren, err, http.StatusOK)
	plans, err := admin.ListPlansWithResponse(ctx)
	want(t, "list plans", plans, err, http.StatusOK)
	for _, p := range *plans.JSON200 {
		if p.Name == "pro" {
			as, err := admin.AssignTeamPlanWithResponse(ctx, p.Id, id)
			want(t, "assign team plan", as, err, http.StatusNoContent)
		}
	}
	inv, err := owner.CreateTeamInvitationWithResponse(ctx, id, apiclient.CreateTeamInvitationRequest{Email: "nobody@example.com", Role: "viewer"})
	want(t, "invite", inv, err, http.StatusCreated)
	invs, err := owner.ListTeamInvitationsWithResponse(ctx, id, nil)
	want(t, "list invitations", invs, err, http.StatusOK)
	rv, err := owner.RevokeTeamInvitationWithResponse(ctx, id, inv.JSON201.Id)
	want(t, "revoke invitation", rv, err, http.StatusNoContent)
	inv, err = owner.CreateTeamInvitationWithResponse(ctx, id, apiclient.CreateTeamInvitationRequest{Email: "team-member@example.com", Role: "developer"})
	want(t, "invite member", inv, err, http.StatusCreated)
	acc, err := member.AcceptTeamInvitationWithResponse(ctx, apiclient.AcceptTeamInvitationRequest{
		Token: loggedLink(t, e.ts.Logs, "team-member@example.com", "/invite?token=")})
	want(t, "accept", acc, err, http.StatusOK)
	ms, err := owner.ListTeamMembersWithResponse(ctx, id, nil)
	want(t, "list members", ms, err, http.StatusOK)
	memberID := ""
	for _, m := range *ms.JSON200 {
		if m.Email == "team-member@example.com" {
			memberID = m.UserId
		}
	}
	up, err := owner.UpdateTeamMemberWithResponse(ctx, id, memberID, apiclient.TeamMemberRoleRequest{Role: "admin"})
	want(t, "promote", up, err, http.StatusOK)
	e.teamTransfer(t, owner, id)
	rm, err := owner.RemoveTeamMemberWithResponse(ctx, id, memberID)
	want(t, "remove member", rm, err, http.StatusNoContent)
	inv, err = owner.CreateTeamInvitationWithResponse(ctx, id, apiclient.CreateTeamInvitationRequest{Email: "team-member@example.com", Role: "viewer"})
	want(t, "invite again", inv, err, http.StatusCreated)
	acc, err = member.AcceptTeamInvitationWithResponse(ctx, apiclient.AcceptTeamInvitationRequest{
		Token: loggedLink(t, e.ts.Logs, "team-member@example.com", "/invite?token=")})
	want(t, "accept again", acc, err, http.StatusOK)
	lv, err := member.LeaveTeamWithResponse(ctx, id)
	want(t, "leave", lv, err, http.StatusNoContent)
	leave := "member.leave"
	tlog, err := owner.ListTeamAuditLogWithResponse(ctx, id, &apiclient.ListTeamAuditLogParams{Action: &leave})
	want(t, "team audit log", tlog, err, http.StatusOK)
	if len(*tlog.JSON200) != 1 || (*tlog.JSON200)[0].ResourceType != "member" {
		t.Fatalf("team audit log of member.leave: %+v", *tlog.JSON200)
	}
	gone, err := member.ListTeamAuditLogWithResponse(ctx, id, nil)
	want(t, "team audit log after leaving", gone, err, http.StatusNotFound)
	alog, err := member.ListAccountAuditLogWithResponse(ctx, nil)
	want(t, "account audit log", alog, err, http.StatusOK)
	del, err := owner.DeleteTeamWithResponse(ctx, id)
	want(t, "delete team", del, err, http.StatusNoContent)
}

// teamTransfer moves a new project of the owner into the team and back.
func (e *statusEnv) teamTransfer(t *testing.T, owner *apiclient.ClientWithResponses, team string) {
	ctx := context.Background()
	work, _ := newRepo(t, map[string]string{"index.html": "<h1>t</h1>\n"})
	p, err := owner.CreateProjectWithResponse(ctx, apiclient.CreateProjectRequest{Name: "moving", RepoUrl: work, Framework: "static", Port: 8080})
	want(t, "create project", p, err, http.StatusCreated)
	in, err := owner.TransferProjectWithResponse(ctx, p.JSON201.Id, apiclient.TransferProjectRequest{TeamId: &team})
	want(t, "transfer in", in, err, http.StatusOK)
	out, err := owner.TransferProjectWithResponse(ctx, p.JSON201.Id, apiclient.TransferProjectRequest{})
	want(t, "transfer out", out, err, http.StatusOK)
	del, err := owner.DeleteProjectWithResponse(ctx, p.JSON201.Id)
	want(t, "delete project", del, err, http.StatusAccepted)
}

// apiTokens drives the API token routes through the generated client: a
// token made, listed (used once first) and revoked.
func (e *statusEnv) apiTokens(t *testing.T) {
	ctx := context.Background()
	c := e.rec.client(t, e.ts, e.ts.signup(t, "token-maker@example.com"))
	made, err := c.CreateApiTokenWithResponse(ctx, apiclient.CreateAPITokenRequest{Name: "ci", Scopes: []string{"projects:read"}})
	want(t, "create API token", made, err, http.StatusCreated)
	used := e.rec.client(t, e.ts, made.JSON201.Token)
	ps, err := used.ListProjectsWithResponse(ctx, nil)
	want(t, "list projects with an API token", ps, err, http.StatusOK)
	list, err := c.ListApiTokensWithResponse(ctx)
	want(t, "list API tokens", list, err, http.StatusOK)
	if n := len(*list.JSON200); n != 1 || (*list.JSON200)[0].LastUsedAt == nil {
		t.Fatalf("listed tokens: %+v", *list.JSON200)
	}
	del, err := c.DeleteApiTokenWithResponse(ctx, made.JSON201.Id)
	want(t, "revoke API token", del, err, http.StatusNoContent)
}
