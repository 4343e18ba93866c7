package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"strconv"

	"github.com/keelson-dev/keelson/codehost"
	"github.com/keelson-dev/keelson/codehost/github"
	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/examples/glue"
	"github.com/keelson-dev/keelson/projects"
)

// buildCodehost builds the code-host app integration (GitHub). Without the app's settings the routes answer 503 naming the missing
// ones; an app id or private key that is set but invalid stops start-up.
//
// Codehost is built after projects and deployments and gets them directly:
// pushes trigger deployments, commit statuses read their results. The
// reverse question (clones of private repositories get installation
// tokens, glue.CodehostGit) reads a.Codehost when a deployment asks.
func (a *App) buildCodehost(ctx context.Context) error {
	c := a.Cfg
	mac := hmac.New(sha256.New, a.JWTSecret)
	mac.Write([]byte("keelson codehost install state v1"))
	d := codehost.Deps{
		DB:          a.DB,
		Auth:        a.Authn,
		StateKey:    mac.Sum(nil),
		FrontendURL: c.FrontendURL,
		Projects:    glue.ProjectRepos{Projects: a.Projects},
		Secrets:     a.Projects,
		Deployer:    glue.PushDeployer{Deployments: a.Deployments},
		Accounts:    a.OAuth, // users' linked code-host logins
		Log:         a.Log.With("module", "codehost"),
		Missing:     github.Missing(c.CodehostAppID, c.CodehostAppSlug, c.CodehostAppPrivateKey, c.CodehostWebhookSecret),
		// Set alone, it already verifies the app's deliveries (a ping sent
		// while the app's id and key are still being set up answers 200).
		WebhookSecret: c.CodehostWebhookSecret,
	}
	d.Connector = glue.OAuthConnector{OAuth: a.OAuth}
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
		d.Statuses, d.Results = prov, glue.DeploymentResults{Deployments: a.Deployments}
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

var _ codehost.ProjectSecrets = (*projects.Service)(nil)

var _ deployments.GitCredentials = glue.CodehostGit{}

var _ deployments.RepoAccess = glue.CodehostGit{}
