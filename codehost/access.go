package codehost

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/keelson-dev/keelson/codehost/internal/store"
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
	// CodeLinkMemberCannotDeploy: the team member whose code-host link a
	// team project uses may no longer deploy it, so their installations'
	// private repositories are not cloned for it (409).
	CodeLinkMemberCannotDeploy = "CODEHOST_LINK_MEMBER_CANNOT_DEPLOY"
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
	if may, err := s.ownerMayDeploy(ctx, ownerID, projectID, insts, want); !may || err != nil {
		return 0, err // barred: no credentials, and a private repository is refused
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
	r, err := s.privateRepo(ctx, id, want)
	if r == nil || err != nil {
		return err
	}
	if errors.Is(viewErr, errRelink) {
		return platform.Conflict(fmt.Sprintf("the project owner's code-host authorization is missing, expired or revoked, so their access to %s cannot be confirmed: %s", r.FullName, ownerRelinkHint)).
			WithCode(CodeRelink)
	}
	return platform.Forbidden(fmt.Sprintf("the code host does not let the project's owner access %s (only the repositories they may access themselves can be deployed)", r.FullName)).
		WithCode(CodeNoRepoAccess)
}

// privateRepo answers want when it is a private repository of installation
// id, asked as the app (never with a user's token): nil when it is not one
// (a public one is cloned without credentials; another host's needs none)
// or the installation is gone (it gives no credentials anyway), a 502 when
// the code host did not answer.
func (s *Service) privateRepo(ctx context.Context, id int64, want string) (*Repository, error) {
	all, err := s.d.Provider.Repositories(ctx, id)
	if errors.Is(err, platform.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		platform.Logger(ctx).ErrorContext(ctx, "codehost: list the installation's repositories", "installation_id", id, "err", err)
		return nil, unavailable("the repository access check", err)
	}
	if r := findRepo(all, want); r != nil && r.Private {
		return r, nil
	}
	return nil, nil
}

// ownerMayDeploy tells whether the owner's installations insts may lend
// projectID clone credentials: only while the owner may deploy the project.
// A team member removed or demoted since they created it or moved it in
// may not, and as for their push deployments, their code-host link then
// acts for the team no more: false, with the refusal when want is a private
// repository of insts (nil when it is not: cloned without credentials). It
// fails closed: when the owner's role cannot be read, false and a 503.
func (s *Service) ownerMayDeploy(ctx context.Context, ownerID, projectID string, insts []store.InstallationRow, want string) (bool, error) {
	may, err := s.d.Projects.MayDeploy(ctx, ownerID, projectID)
	if err != nil {
		platform.Logger(ctx).ErrorContext(ctx, "codehost: may the project's owner deploy it", "project_id", projectID, "err", err)
		return false, &platform.Error{Status: http.StatusServiceUnavailable, Err: platform.ErrUnavailable,
			Message: "whether the member whose code-host link the project uses may still deploy it could not be read; try again later"}
	}
	if may {
		return true, nil
	}
	for _, in := range insts {
		r, err := s.privateRepo(ctx, in.InstallationID, want)
		if err != nil {
			return false, err
		}
		if r != nil {
			return false, platform.Conflict(fmt.Sprintf("the project uses the code-host link of the member who created it or moved it into "+
				"its team, and that member is no longer allowed to deploy it, so their access to %s is not used: a team admin "+
				"can move the project to their own account and back into the team (POST /projects/%s/transfer) to have it use "+
				"their own code-host link, or give that member back a role that may deploy", r.FullName, projectID)).
				WithCode(CodeLinkMemberCannotDeploy)
		}
	}
	return false, nil
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
