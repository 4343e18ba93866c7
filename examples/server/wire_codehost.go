package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"net/http"
	"strconv"

	"github.com/keelson-dev/keelson/auth/oauth"
	"github.com/keelson-dev/keelson/codehost"
	"github.com/keelson-dev/keelson/codehost/github"
	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/projects"
)

// buildCodehost builds the code-host app integration (GitHub). Without the app's settings the routes answer 503 naming the missing
// ones; an app id or private key that is set but invalid stops start-up.
//
// Codehost is built after projects and deployments and gets them directly:
// pushes trigger deployments, commit statuses read their results. The
// reverse question (clones of private repositories get installation
// tokens, codehostGit) reads a.Codehost when a deployment asks.
func (a *App) buildCodehost(ctx context.Context) error {
	c := a.Cfg
	mac := hmac.New(sha256.New, a.JWTSecret)
	mac.Write([]byte("keelson codehost install state v1"))
	d := codehost.Deps{
		DB:          a.DB,
		Auth:        a.Authn,
		StateKey:    mac.Sum(nil),
		FrontendURL: c.FrontendURL,
		Projects:    projectRepos{a.Projects},
		Secrets:     a.Projects,
		Deployer:    deploymentsTrigger{a.Deployments},
		Accounts:    a.OAuth, // users' linked code-host logins
		Log:         a.Log.With("module", "codehost"),
		Missing:     github.Missing(c.CodehostAppID, c.CodehostAppSlug, c.CodehostAppPrivateKey, c.CodehostWebhookSecret),
		// Set alone, it already verifies the app's deliveries (a ping sent
		// while the app's id and key are still being set up answers 200).
		WebhookSecret: c.CodehostWebhookSecret,
	}
	d.Connector = oauthConnector{a.OAuth}
	if len(d.Missing) == 0 {
		appID, err := strconv.ParseInt(c.CodehostAppID, 10, 64)
		if err != nil || appID <= 0 {
			return &ConfigError{"KEELSON_CODEHOST_APP_ID", "must be the app's numeric id"}
		}
		key, err := github.ParsePrivateKey(c.CodehostAppPrivateKey)
		if err != nil {
			return &ConfigError{"KEELSON_CODEHOST_APP_PRIVATE_KEY", "must be the app's RSA private key (PEM, or @file)"}
		}
		prov, err := github.New(github.Config{
			AppID: appID, AppSlug: c.CodehostAppSlug, PrivateKey: key,
			APIURL: c.CodehostAPIURL, WebURL: c.CodehostWebURL,
		})
		if err != nil {
			return &ConfigError{"KEELSON_CODEHOST_APP_SLUG", err.Error()}
		}
		d.Provider = prov
		d.Statuses, d.Results = prov, deploymentResults{a.Deployments}
	} else {
		a.Log.Info("code-host app not configured: its /codehost routes answer 503; repository webhooks signed with a project's webhookSecret are accepted",
			"missing", d.Missing)
	}
	svc, err := codehost.New(d)
	if err != nil {
		return err
	}
	a.add(svc)
	a.Codehost = svc
	return nil
}

// projectRepos adapts the projects module to codehost.ProjectLookup.
type projectRepos struct{ s *projects.Service }

func (p projectRepos) ProjectsForRepository(ctx context.Context, urls []string, repoID string) ([]codehost.RepoProject, error) {
	links, err := p.s.ProjectsForRepository(ctx, urls, repoID)
	if err != nil {
		return nil, err
	}
	out := make([]codehost.RepoProject, len(links))
	for i, l := range links {
		out[i] = codehost.RepoProject{
			ProjectID: l.ProjectID, OwnerID: l.OwnerID, AutoDeploy: l.AutoDeploy,
			AutoDeployBranch: l.AutoDeployBranch, RepoURL: l.RepoURL, HasWebhookSecret: l.HasWebhookSecret,
		}
	}
	return out, nil
}

var _ codehost.ProjectSecrets = (*projects.Service)(nil)

// deploymentResults adapts the deployments module to codehost.DeploymentResults
// (the final commit status of a push deployment).
type deploymentResults struct{ s *deployments.Service }

func (r deploymentResults) DeploymentResult(ctx context.Context, ownerID, id string) (*codehost.DeploymentResult, error) {
	d, err := r.s.Get(ctx, ownerID, id)
	if err != nil {
		return nil, err
	}
	res := &codehost.DeploymentResult{Ended: d.Status.Terminal(), Succeeded: d.Status == deployments.StatusLive}
	switch {
	case d.Status == deployments.StatusLive:
		res.URL = d.DeployedURL
	case d.Status == deployments.StatusCancelled:
		res.Error = "the deployment was cancelled"
	case res.Ended:
		res.Error = d.ErrorMessage
	}
	return res, nil
}

// OwnsProject implements codehost.ProjectLookup.
func (p projectRepos) OwnsProject(ctx context.Context, userID, projectID string) (bool, error) {
	_, err := p.s.Get(ctx, userID, projectID)
	if errors.Is(err, platform.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// oauthConnector adapts the oauth module to codehost.IdentityConnector: a
// one-time connect ticket, bound to the asking browser by its cookie, whose
// successful link continues to next (the app's install page).
type oauthConnector struct{ o *oauth.Service }

func (c oauthConnector) ConnectFirst(ctx context.Context, userID, next string) (string, *http.Cookie, error) {
	t, err := c.o.IssueConnectTicket(ctx, userID, next)
	if err != nil {
		return "", nil, err
	}
	return t.ConnectURL, t.Cookie, nil
}

// deploymentsTrigger adapts the deployments module to codehost.Deployer; a
// quota refusal passes through as its 403 *platform.Error.
type deploymentsTrigger struct{ s *deployments.Service }

func (t deploymentsTrigger) Trigger(ctx context.Context, projectID, ownerID, sha, reason string) (string, error) {
	d, err := t.s.Trigger(ctx, deployments.TriggerParams{ProjectID: projectID, OwnerID: ownerID, CommitSHA: sha, Reason: reason})
	if err != nil {
		return "", err
	}
	return d.ID, nil
}

// codehostGit adapts the codehost module to deployments.GitCredentials and
// RepoAccess: installation tokens for the private repositories of the
// project owner's installations that the owner may access themselves.
//
// It is the one question between modules that runs against the build
// order: codehost triggers deployments, and deployments asks codehost for
// clone credentials, both at run time, and neither answer is in a table
// alone (the code host is asked with the owner's token). So it reads the
// service the codehost build stores in *s, before any module starts; a
// nil service (never built) answers as a code host with no app does.
type codehostGit struct{ s **codehost.Service }

var _ deployments.GitCredentials = codehostGit{}

var _ deployments.RepoAccess = codehostGit{}

// CheckRepoAccess implements deployments.RepoAccess: a deployment of a
// private repository of the owner's installations is queued only when the
// code host, asked with the owner's own token, lets the owner access it.
func (g codehostGit) CheckRepoAccess(ctx context.Context, projectID, repoURL string) error {
	if *g.s == nil {
		return nil
	}
	return (*g.s).CheckRepoAccess(ctx, projectID, repoURL)
}

func (g codehostGit) GitAuthFor(ctx context.Context, projectID, repoURL string) (*deployments.GitAuth, error) {
	if *g.s == nil {
		return nil, nil
	}
	auth, err := (*g.s).GitAuthFor(ctx, projectID, repoURL)
	if err != nil || auth == nil {
		return nil, err
	}
	return &deployments.GitAuth{Username: auth.Username, Password: auth.Password}, nil
}
