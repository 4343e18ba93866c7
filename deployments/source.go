package deployments

import (
	"context"

	"github.com/keelson-dev/keelson/platform"
)

// ProjectSource is what deployments needs from projects: the deploy settings
// of one project. It returns an error wrapping platform.ErrNotFound when the
// project does not exist or is being deleted. The reference server adapts the
// projects module to it.
type ProjectSource interface {
	ProjectForDeploy(ctx context.Context, projectID string) (*DeploySpec, error)
}

// DeploySpec is a project as a deployment sees it.
type DeploySpec struct {
	OwnerID      string
	Slug         string // URL-safe and unique: the app answers at <slug>.<apps-domain>
	Name         string
	RepoURL      string
	Branch       string // empty: the repository's default branch
	Framework    string
	Port         int
	BuildCommand string
	StartCommand string
	Region       string
	Env          []EnvVar // secret values in clear; never stored by this module
	Limits       Limits
	// MaxDeploymentsPerMonth caps deployments started per calendar month (UTC); 0 = unlimited.
	MaxDeploymentsPerMonth int
	PlanName               string // the plan the limits come from, for quota messages (may be empty)
	// PinnedHost is the host id the project's apps must run on ("" for any), PinnedQueue its task queue ("" when not registered).
	PinnedHost, PinnedQueue string
}

// GitCredentials authenticates clones of private repositories (the code-host
// module implements it with installation tokens). It returns nil, nil when the
// repository needs no credentials.
type GitCredentials interface {
	GitAuthFor(ctx context.Context, projectID, repoURL string) (*GitAuth, error)
}

// RepoAccess, when Deps.Git also implements it, is asked by Trigger whether
// the project's owner may still use its repository before a deployment is
// queued (the code-host module asks the code host with the owner's own
// token). Its refusal, a *platform.Error such as a 403 naming the
// repository or a 409 saying to link the code-host account again, is
// Trigger's answer, and nothing is queued.
type RepoAccess interface {
	CheckRepoAccess(ctx context.Context, projectID, repoURL string) error
}

// HostRouter routes a project's custom domains along with its apps-domain
// host in the DNS step (the reference server adapts the custom-domains module
// and the ingress to it). The ingress resolves each custom hostname to the
// project's route, so the step's one route switch moves every hostname.
type HostRouter interface {
	// RouteHosts points projectID's active custom domains at slug's route
	// and returns every hostname the project answers on, its apps-domain
	// host first.
	RouteHosts(ctx context.Context, projectID, slug string) ([]HostState, error)
}

// HostState is one hostname a project answers on, for the DNS step's log.
type HostState struct {
	Hostname string
	// Certificate says in words whether HTTPS is ready for it ("ready,
	// expires ...", "issued at the first HTTPS request", "HTTPS is off").
	Certificate string
}

// Access, when set (Deps.Access), decides who may act on a project's
// deployments: the projects module's one authorisation point, which knows
// teams and roles. Without it a project's owner account alone may.
type Access interface {
	// Authorize returns nil when userID's role on projectID holds perm, a
	// 404 *platform.Error when they hold none (or the project is gone), and
	// a 403 naming the role needed when theirs is lower.
	Authorize(ctx context.Context, userID, projectID string, perm platform.Permission) error
	// Accounts returns the owner accounts whose deployments userID may list:
	// their own and their teams'.
	Accounts(ctx context.Context, userID string) ([]string, error)
}
