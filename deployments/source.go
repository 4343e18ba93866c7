package deployments

import "context"

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
	// PlanName names the plan the limits come from, for quota messages (may be empty).
	PlanName string
}

// GitCredentials authenticates clones of private repositories (the code-host
// module implements it with installation tokens). It returns nil, nil when the
// repository needs no credentials.
type GitCredentials interface {
	GitAuthFor(ctx context.Context, projectID, repoURL string) (*GitAuth, error)
}
