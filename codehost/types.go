package codehost

import (
	"context"
	"time"
)

// Provider is what this module needs from a code-hosting provider's app. The
// GitHub adapter (codehost/github) implements it; tests point it at a local fake.
type Provider interface {
	// InstallURL is the provider page where a user installs the app; the
	// provider sends state back to the install callback.
	InstallURL(state string) string
	// Installation fetches an installation as the app. It returns an error
	// wrapping platform.ErrNotFound when the provider does not know it.
	Installation(ctx context.Context, installationID int64) (*Installation, error)
	// Repositories lists every repository the installation can access, all
	// pages gathered. It returns an error wrapping platform.ErrNotFound when the
	// installation is gone.
	Repositories(ctx context.Context, installationID int64) ([]Repository, error)
	// InstallationToken returns an access token for the installation, cached
	// until shortly before it expires.
	InstallationToken(ctx context.Context, installationID int64) (token string, expiresAt time.Time, err error)
	// ParseEvent decodes a webhook payload whose signature was already
	// verified. event is the provider's event name (e.g. "push").
	ParseEvent(event string, payload []byte) (*Event, error)
}

// Installation is one installation of the app on an account.
type Installation struct {
	ID                  int64
	AccountLogin        string
	AccountID           int64
	AccountType         string // "User" or "Organization"
	RepositorySelection string // "all" or "selected"
	Suspended           bool
}

// Repository is a repository an installation can access.
type Repository struct {
	ID            int64
	Name          string
	FullName      string
	Owner         string
	Private       bool
	HTMLURL       string
	CloneURL      string
	DefaultBranch string
}

// Event kinds this module acts on; others are recorded and ignored.
const (
	EventPing                     = "ping"
	EventPush                     = "push"
	EventInstallation             = "installation"
	EventInstallationRepositories = "installation_repositories"
)

// Event is a decoded webhook delivery.
type Event struct {
	Kind           string // the provider's event name
	Action         string // e.g. "created", "added"; empty for push and ping
	InstallationID int64  // 0 when the event carries none (e.g. an app ping)
	Push           *Push
	Installation   *Installation // installation events
	ReposAdded     []Repository  // installation events (created) and installation_repositories
	ReposRemoved   []Repository
}

// Push is the part of a push event that decides deployments.
type Push struct {
	Ref               string // refs/heads/<branch> or refs/tags/<tag>
	Before, After     string
	Deleted           bool
	HeadCommitMessage string
	Repository        Repository
	Pusher            string
}

// RepoProject is a project whose repository matched a push. The host adapts
// the projects module to ProjectLookup.
type RepoProject struct {
	ProjectID        string
	OwnerID          string
	AutoDeploy       bool
	AutoDeployBranch string // empty: the repository's default branch
	RepoURL          string
}

// ProjectLookup finds the projects tied to a repository, by any of its URLs
// (as the provider spells them) or its provider repository id.
type ProjectLookup interface {
	ProjectsForRepository(ctx context.Context, repoURLs []string, codehostRepoID string) ([]RepoProject, error)
}

// Deployer starts a deployment of a project at a commit. A quota refusal comes
// back as a *platform.Error with status 403 (wrapping platform.ErrForbidden).
type Deployer interface {
	Trigger(ctx context.Context, projectID, ownerID, commitSHA, reason string) (deploymentID string, err error)
}

// LinkedAccounts reports the provider login a Keelson user linked through the
// auth module's OAuth flow ("" when none). Optional.
type LinkedAccounts interface {
	CodehostLogin(ctx context.Context, userID string) (string, error)
}

// GitAuth is an HTTP basic credential for cloning a repository.
type GitAuth struct {
	Username string
	Password string
}
