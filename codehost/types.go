package codehost

import (
	"context"
	"net/http"
	"time"

	"github.com/keelson-dev/keelson/codehost/forge"
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
	// UserInstallations lists the installations of the app that the user
	// whose code-host user token this is may access (their own account's and
	// their organisations'), all pages gathered. It asks the provider with the
	// user's token, never the app's. A rejected token wraps
	// platform.ErrUnauthorized.
	UserInstallations(ctx context.Context, userToken string) ([]Installation, error)
	// UserRepositories lists the repositories of installation installationID
	// that the user whose code-host user token this is may access themselves
	// (an organisation's outside collaborator: only the repositories they
	// were added to), all pages gathered, asked with the user's token. A
	// rejected token wraps platform.ErrUnauthorized; an installation the user
	// cannot access (or that is gone) wraps platform.ErrNotFound.
	UserRepositories(ctx context.Context, userToken string, installationID int64) ([]Repository, error)
	// InstallationToken returns an access token for the installation, cached
	// until shortly before it expires.
	InstallationToken(ctx context.Context, installationID int64) (token string, expiresAt time.Time, err error)
	// ParseEvent decodes a webhook payload whose signature was already
	// verified. event is the provider's event name (e.g. "push").
	ParseEvent(event string, payload []byte) (*Event, error)
}

// Repository is a repository an installation can access.
type Repository = forge.Repository

// Installation is one installation of the app on an account.
type Installation = forge.Installation

// Event is a decoded webhook delivery.
type Event = forge.Event

// Event kinds this module acts on; others are recorded and ignored.
const (
	EventPing                     = forge.EventPing
	EventPush                     = forge.EventPush
	EventInstallation             = forge.EventInstallation
	EventInstallationRepositories = forge.EventInstallationRepositories
)

// Push is the part of a push event that decides deployments.
type Push = forge.Push

// RepoProject is a project whose repository matched a push. The host adapts
// the projects module to ProjectLookup.
type RepoProject struct {
	ProjectID        string
	OwnerID          string
	AutoDeploy       bool
	AutoDeployBranch string // empty: the repository's default branch
	RepoURL          string
	// HasWebhookSecret: a repository webhook may be signed with the
	// project's secret (only such projects are tried as its signers).
	HasWebhookSecret bool
}

// ProjectLookup finds the projects tied to a repository, by any of its URLs
// (as the provider spells them) or its provider repository id, and tells
// whether a user owns a project.
type ProjectLookup interface {
	ProjectsForRepository(ctx context.Context, repoURLs []string, codehostRepoID string) ([]RepoProject, error)
	// OwnsProject reports whether userID owns projectID (false when the
	// project does not exist).
	OwnsProject(ctx context.Context, userID, projectID string) (bool, error)
	// MayDeploy reports whether userID's own role on projectID lets them
	// deploy it, decided as for a push deployment the project's owner
	// (RepoProject.OwnerID) triggers: by that role alone, never by the
	// caller's. The owner's code-host link gives the project clone
	// credentials only while it is true. An error is one of reading it.
	MayDeploy(ctx context.Context, userID, projectID string) (bool, error)
}

// Deployer starts a deployment of a project at a commit. A quota refusal comes
// back as a *platform.Error with status 403 (wrapping platform.ErrForbidden).
type Deployer interface {
	Trigger(ctx context.Context, projectID, ownerID, commitSHA, reason string) (deploymentID string, err error)
}

// LinkedAccounts reports the code-host identity a Keelson user linked through
// the auth module's OAuth flow: its login and the user's own code-host access
// token ("" for both when none is linked). Installations are linked only after
// the provider, asked with that token, says the user may access them.
type LinkedAccounts interface {
	CodehostLogin(ctx context.Context, userID string) (string, error)
	CodehostAccessToken(ctx context.Context, userID string) (string, error)
}

// IdentityConnector sends a browser through the code host's OAuth to link
// the user's code-host identity, and then on to next. It answers the URL to
// open and the cookie that binds it to the browser that asked (the auth
// module's one-time connect ticket).
type IdentityConnector interface {
	ConnectFirst(ctx context.Context, userID, next string) (connectURL string, cookie *http.Cookie, err error)
}

// GitAuth is an HTTP basic credential for cloning a repository.
type GitAuth struct {
	Username string
	Password string
}

// SignatureHeader is the header that carries a delivery's signature.
const SignatureHeader = forge.SignatureHeader

// Sign returns the signature header value for body (forge.Sign).
func Sign(secret string, body []byte) string { return forge.Sign(secret, body) }

// VerifySignature reports whether header is a valid signature of body under secret (forge.VerifySignature).
func VerifySignature(secret string, body []byte, header string) bool {
	return forge.VerifySignature(secret, body, header)
}
