package platform

import (
	"fmt"
	"slices"
	"strings"
)

// MemberRole is what a user may do on a team's projects, and on a personal
// project (whose owner is its "owner"). Roles are ordered: each holds what
// the ones below it hold.
type MemberRole string

// Member roles, lowest first. The zero value is "no role" (not a member).
const (
	MemberViewer    MemberRole = "viewer"
	MemberDeveloper MemberRole = "developer"
	MemberAdmin     MemberRole = "admin"
	MemberOwner     MemberRole = "owner"
)

// MemberRoles lists the roles, lowest first.
func MemberRoles() []MemberRole {
	return []MemberRole{MemberViewer, MemberDeveloper, MemberAdmin, MemberOwner}
}

// Rank orders roles: 0 for no role (or an unknown one), viewer 1 ... owner 4.
func (r MemberRole) Rank() int {
	for i, x := range MemberRoles() {
		if x == r {
			return i + 1
		}
	}
	return 0
}

// Valid reports whether r is one of MemberRoles.
func (r MemberRole) Valid() bool { return r.Rank() > 0 }

// AtLeast reports whether r holds everything min holds.
func (r MemberRole) AtLeast(min MemberRole) bool { return r.Rank() > 0 && r.Rank() >= min.Rank() }

// Permission names one action on one kind of resource, "resource:action".
// Every project-scoped route asks for one; the role a caller holds on the
// project must be at least the permission's MinRole. (An API token's scopes
// will be permissions, narrowing what its creator's role allows.)
type Permission string

// Permissions of the project-scoped and team routes.
const (
	// ProjectsRead: read a project, its settings (secret values masked).
	ProjectsRead Permission = "projects:read"
	// ProjectsWrite: change settings and env vars that are not secret.
	ProjectsWrite Permission = "projects:write"
	// SecretsWrite: set, change or remove secret env vars and the webhook secret.
	SecretsWrite Permission = "secrets:write"
	// ProjectsDelete: delete a project, or move it to another owner.
	ProjectsDelete Permission = "projects:delete"
	// ProjectsCreate: create a project in a team.
	ProjectsCreate Permission = "projects:create"
	// PlansWrite: choose the project's plan.
	PlansWrite Permission = "plans:write"
	// DeploymentsRead: read deployments and stream their logs.
	DeploymentsRead Permission = "deployments:read"
	// DeploymentsWrite: deploy, redeploy, cancel.
	DeploymentsWrite Permission = "deployments:write"
	// DeploymentsDelete: delete a deployment with its logs.
	DeploymentsDelete Permission = "deployments:delete"
	// DomainsRead and DomainsWrite: a project's custom domains, and how its
	// hosts are served over HTTPS (the project's httpsRedirect, a domain's
	// hsts): admin, as turning HTTPS off or on for a host is the owner's call.
	DomainsRead  Permission = "domains:read"
	DomainsWrite Permission = "domains:write"
	// HooksRead and HooksWrite: a project's deploy hooks.
	HooksRead  Permission = "hooks:read"
	HooksWrite Permission = "hooks:write"
	// MembersRead: see a team and its members.
	MembersRead Permission = "members:read"
	// MembersWrite: invite, change roles (up to one's own), remove members.
	MembersWrite Permission = "members:write"
	// TeamsWrite: rename or delete the team.
	TeamsWrite Permission = "teams:write"
	// AuditRead: read the team's audit log.
	AuditRead Permission = "audit:read"
)

// minRoles is the one table of who may do what (README "Teams").
var minRoles = map[Permission]MemberRole{
	ProjectsRead: MemberViewer, DeploymentsRead: MemberViewer, DomainsRead: MemberViewer,
	HooksRead: MemberViewer, MembersRead: MemberViewer,
	ProjectsWrite: MemberDeveloper, DeploymentsWrite: MemberDeveloper,
	SecretsWrite: MemberAdmin, ProjectsDelete: MemberAdmin, ProjectsCreate: MemberAdmin,
	DeploymentsDelete: MemberAdmin, DomainsWrite: MemberAdmin, HooksWrite: MemberAdmin, MembersWrite: MemberAdmin,
	AuditRead:  MemberAdmin,
	PlansWrite: MemberOwner, TeamsWrite: MemberOwner,
}

// Permissions lists every permission, sorted: the scopes an API token may carry.
func Permissions() []Permission {
	out := make([]Permission, 0, len(minRoles))
	for p := range minRoles {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// Implies reports whether holding p also allows q: p itself, and the read
// permission of p's resource, so that a token that may change something may
// also read it, and the answer of its change (teams are read with
// members:read). secrets:write and plans:write imply nothing more.
func (p Permission) Implies(q Permission) bool {
	if p == q {
		return true
	}
	res, _, _ := strings.Cut(string(p), ":")
	if res == "teams" {
		res = "members"
	}
	read := Permission(res + ":read")
	_, known := minRoles[read]
	return known && q == read
}

// MinRole is the lowest role that holds p; an unknown permission needs owner.
func (p Permission) MinRole() MemberRole {
	if r, ok := minRoles[p]; ok {
		return r
	}
	return MemberOwner
}

// Allows reports whether role r holds permission p.
func (r MemberRole) Allows(p Permission) bool { return r.AtLeast(p.MinRole()) }

// Denied is the 403 of a member whose role does not hold p.
func Denied(r MemberRole, p Permission) *Error {
	return Forbidden(fmt.Sprintf("your role here is %s; this needs %s or above (%s)", r, p.MinRole(), p)).WithCode("ROLE_TOO_LOW")
}
