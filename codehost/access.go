package codehost

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/keelson-dev/keelson/platform"
)

// What a link is worth is what the code host lets its user reach: a linked
// organisation's installation may reach every repository of the
// organisation, its user (an outside collaborator, say) only some. So every
// use of a link (the repository listing, a clone, a push deployment, a
// deployment's trigger) asks the provider with the user's own token which
// of the installation's repositories they may access (checkLink), and so
// does RecheckLinks for each link at least every RecheckInterval.

var (
	// errAccessLost: the provider says the user cannot access the
	// installation (any more); the link has been dropped.
	errAccessLost = errors.New("the code host no longer lets the user access this installation")
	// errRelink: the user has no code-host token the provider accepts
	// (never linked, expired, revoked); their stored view was dropped.
	errRelink = errors.New("the user's code-host authorization is missing, expired or revoked")
)

// Codes of the refusals of a repository the caller's code-host access does
// not reach (Error.Code).
const (
	// CodeNoRepoAccess: the code host does not let the project's owner
	// access the repository (403).
	CodeNoRepoAccess = "CODEHOST_NO_REPOSITORY_ACCESS"
	// CodeRelink: the owner's code-host authorization must be linked again
	// before their installations' repositories can be used (409).
	CodeRelink = "CODEHOST_RELINK"
)

// relinkHint says what a user whose code-host token no longer works does.
const relinkHint = "link your code-host account again (GET /codehost/connect)"

// ownerRelinkHint says it about a project's owner.
const ownerRelinkHint = "the owner must link their code-host account again (GET /codehost/connect)"

// userToken answers the user's code-host token ("" when none is linked).
func (s *Service) userToken(ctx context.Context, userID string) (string, error) {
	if s.d.Accounts == nil {
		return "", nil
	}
	tok, err := s.d.Accounts.CodehostAccessToken(ctx, userID)
	return tok, wrap("linked account token", err)
}

// checkLink asks the provider, with tok (the user's own code-host token),
// which repositories of installationID userID may access, and records the
// answer. The view is stored (it decides which of the installation's
// deliveries the user sees) and the link marked checked. A user the provider
// says cannot access the installation loses the link (errAccessLost); one
// without a token the provider accepts loses the stored view and keeps the
// link, usable again once they link their code-host account again
// (errRelink). Any other error is the provider's or the store's, and changes
// nothing.
func (s *Service) checkLink(ctx context.Context, userID, tok string, installationID int64) ([]Repository, error) {
	var repos []Repository
	err := fmt.Errorf("no token: %w", platform.ErrUnauthorized)
	if tok != "" {
		repos, err = s.d.Provider.UserRepositories(ctx, tok, installationID)
	}
	now := s.now()
	switch {
	case err == nil:
		return repos, s.store.SetView(ctx, userID, installationID, repos, now)
	case errors.Is(err, platform.ErrNotFound):
		s.d.Log.InfoContext(ctx, "codehost: the user can no longer access the installation; link removed",
			"user_id", userID, "installation_id", installationID)
		if err := s.store.Unlink(ctx, userID, installationID); err != nil {
			return nil, err
		}
		return nil, errAccessLost
	case errors.Is(err, platform.ErrUnauthorized):
		if err := s.store.SetView(ctx, userID, installationID, nil, now); err != nil {
			return nil, err
		}
		return nil, errRelink
	}
	return nil, err
}

// relinkError is the 409 of a route whose caller must link their code-host
// account again.
func relinkError() *platform.Error {
	return platform.Conflict("your code-host authorization is missing, expired or revoked: " + relinkHint + ", then try again").
		WithCode(CodeRelink)
}

// unavailable is the 502 of a code host that did not answer.
func unavailable(what string, err error) *platform.Error {
	return &platform.Error{Status: http.StatusBadGateway, Message: "the code host did not answer " + what + "; try again later", Err: err}
}

// GitAuthFor returns a clone credential for repoURL when the project's owner
// linked an active installation that can access that repository and the code
// host, asked with the owner's own token, says the owner may access it too
// (matched by the provider's own html or clone URL, so a token is never sent
// to another host). It returns nil, nil when none applies (public
// repository, or not the provider's), and an error saying why when the
// repository is a private one of the owner's installations that the owner
// may not use (see CheckRepoAccess). The token is short-lived and never stored.
func (s *Service) GitAuthFor(ctx context.Context, projectID, repoURL string) (*GitAuth, error) {
	id, err := s.cloneAccess(ctx, projectID, repoURL)
	if err != nil || id == 0 {
		return nil, err
	}
	tok, _, err := s.d.Provider.InstallationToken(ctx, id)
	if err != nil {
		return nil, wrap("git auth: installation token", err)
	}
	return &GitAuth{Username: "x-access-token", Password: tok}, nil
}

// CheckRepoAccess tells whether the owner of projectID may still deploy
// repoURL as far as the code host is concerned: nil when it is not a private
// repository of an installation they linked, or when the code host, asked
// with the owner's own token, says they may access it. Otherwise a
// *platform.Error: 403 (CodeNoRepoAccess) when they may not (an outside
// collaborator on other repositories, removed from the organisation or the
// repository), 409 (CodeRelink) when their code-host authorization must be
// linked again, 502 when the code host did not answer. The deployments
// module asks before it queues a deployment.
func (s *Service) CheckRepoAccess(ctx context.Context, projectID, repoURL string) error {
	_, err := s.cloneAccess(ctx, projectID, repoURL)
	return err
}

// cloneAccess answers the installation through which the owner of projectID
// may clone repoURL, or 0 when none of the owner's installations applies,
// or the refusal when the repository is a private one of an installation the
// owner linked that the code host does not let the owner access.
func (s *Service) cloneAccess(ctx context.Context, projectID, repoURL string) (int64, error) {
	if s.configured() != nil || repoURL == "" {
		return 0, nil
	}
	want := normalizeRepoURL(repoURL)
	if want == "" {
		return 0, nil
	}
	ownerID, err := s.projectOwner(ctx, projectID, repoURL)
	if err != nil || ownerID == "" {
		return 0, err
	}
	insts, err := s.store.UserInstallations(ctx, ownerID, InstallationActive)
	if err != nil || len(insts) == 0 {
		return 0, wrap("git auth: installations", err)
	}
	tok, err := s.userToken(ctx, ownerID)
	if err != nil {
		return 0, err
	}
	var refusal error
	for _, in := range insts {
		repos, err := s.checkLink(ctx, ownerID, tok, in.InstallationID)
		if err == nil && findRepo(repos, want) != nil {
			return in.InstallationID, nil
		}
		if refusal == nil {
			refusal = s.refusal(ctx, in.InstallationID, want, err)
		}
	}
	return 0, refusal
}

// refusal says why the owner may not clone want through installation id,
// whose user view did not hold it (viewErr: why not, nil when the view was
// read): nil when want is not a private repository of the installation (a
// public one is cloned without credentials; another host's needs none).
func (s *Service) refusal(ctx context.Context, id int64, want string, viewErr error) error {
	if viewErr != nil && !errors.Is(viewErr, errAccessLost) && !errors.Is(viewErr, errRelink) {
		platform.Logger(ctx).ErrorContext(ctx, "codehost: list the user's repositories", "installation_id", id, "err", viewErr)
		return unavailable("the repository access check", viewErr)
	}
	all, err := s.d.Provider.Repositories(ctx, id)
	if errors.Is(err, platform.ErrNotFound) {
		return nil // uninstalled: it gives no credentials anyway
	}
	if err != nil {
		platform.Logger(ctx).ErrorContext(ctx, "codehost: list the installation's repositories", "installation_id", id, "err", err)
		return unavailable("the repository access check", err)
	}
	r := findRepo(all, want)
	if r == nil || !r.Private {
		return nil
	}
	if errors.Is(viewErr, errRelink) {
		return platform.Conflict(fmt.Sprintf("the project owner's code-host authorization is missing, expired or revoked, so their access to %s cannot be confirmed: %s", r.FullName, ownerRelinkHint)).
			WithCode(CodeRelink)
	}
	return platform.Forbidden(fmt.Sprintf("the code host does not let the project's owner access %s (only the repositories they may access themselves can be deployed)", r.FullName)).
		WithCode(CodeNoRepoAccess)
}

// projectOwner answers the owner of projectID when the project uses
// repoURL, else "".
func (s *Service) projectOwner(ctx context.Context, projectID, repoURL string) (string, error) {
	projects, err := s.d.Projects.ProjectsForRepository(ctx, []string{repoURL}, "")
	if err != nil {
		return "", wrap("git auth: projects", err)
	}
	for _, p := range projects {
		if p.ProjectID == projectID {
			return p.OwnerID, nil
		}
	}
	return "", nil
}

// findRepo answers the repository of repos whose clone or html URL is want
// (normalized), or nil.
func findRepo(repos []Repository, want string) *Repository {
	for i, r := range repos {
		if normalizeRepoURL(r.CloneURL) == want || normalizeRepoURL(r.HTMLURL) == want {
			return &repos[i]
		}
	}
	return nil
}

// pushAccess tells whether the owner of a project may deploy the pushed
// repository of installationID: "" when the code host, asked with the
// owner's own token, lists it among the repositories the owner may access,
// else the detail of the refusal to record. An error is the provider's or
// the store's: the delivery is tried again.
func (s *Service) pushAccess(ctx context.Context, ownerID string, installationID int64, repo Repository) (string, error) {
	tok, err := s.userToken(ctx, ownerID)
	if err != nil {
		return "", err
	}
	repos, err := s.checkLink(ctx, ownerID, tok, installationID)
	switch {
	case errors.Is(err, errAccessLost):
		return "the code host no longer lets the project's owner access this installation, so its link was removed", nil
	case errors.Is(err, errRelink):
		return "the project owner's code-host authorization is missing, expired or revoked, so their access to " +
			repo.FullName + " cannot be confirmed: " + ownerRelinkHint, nil
	case err != nil:
		return "", fmt.Errorf("repository access of the project's owner: %w", err)
	}
	for _, r := range repos {
		if repo.ID > 0 && r.ID == repo.ID || repo.ID <= 0 && r.FullName == repo.FullName {
			return "", nil
		}
	}
	return "the code host does not let the project's owner access " + repo.FullName, nil
}

// RecheckLinks re-checks, with each user's own code-host token, every link
// to an active installation not checked for RecheckInterval: a user the code
// host no longer lets access the installation loses the link, one whose
// token no longer works loses the installation's repositories until they
// link their code-host account again. It answers how many links it checked;
// a link the provider did not answer for stays due. The worker calls it on
// its clock, every RecheckInterval/24.
func (s *Service) RecheckLinks(ctx context.Context) (int, error) {
	if s.configured() != nil {
		return 0, nil
	}
	due, err := s.store.DueLinks(ctx, s.now().Add(-s.d.RecheckInterval), 1000)
	if err != nil {
		return 0, err
	}
	tokens := map[string]string{}
	var errs []error
	checked := 0
	for _, l := range due {
		tok, ok := tokens[l.UserID]
		if !ok {
			if tok, err = s.userToken(ctx, l.UserID); err != nil {
				errs = append(errs, err)
				continue
			}
			tokens[l.UserID] = tok
		}
		_, err := s.checkLink(ctx, l.UserID, tok, l.InstallationID)
		if err != nil && !errors.Is(err, errAccessLost) && !errors.Is(err, errRelink) {
			errs = append(errs, fmt.Errorf("installation %d: %w", l.InstallationID, err))
			continue
		}
		checked++
	}
	return checked, errors.Join(errs...)
}
