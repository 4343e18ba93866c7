package main

import (
	"context"

	"github.com/keelson-dev/keelson/auth/oauth"
)

// buildOAuth builds the OAuth login and linking flows (/auth/codehost*,
// /auth/idp*, /auth/oauth/exchange) on the auth module's accounts. Providers
// without settings answer 503 on their routes; the idp is discovered at first
// use, so it need not be up at start.
func (a *App) buildOAuth(ctx context.Context) error {
	svc, err := oauth.New(oauth.Deps{
		DB:           a.DB,
		Accounts:     a.Auth,
		Authn:        a.Authn,
		Sealer:       a.Sealer,
		Logger:       a.Log.With("module", "oauth"),
		PublicURL:    a.Cfg.PublicURL,
		FrontendURL:  a.Cfg.FrontendURL,
		RedirectMode: a.Cfg.OAuthRedirectMode,
		Codehost: oauth.CodehostConfig{
			ClientID: a.Cfg.CodehostClientID, ClientSecret: a.Cfg.CodehostClientSecret,
			WebURL: a.Cfg.CodehostWebURL, APIURL: a.Cfg.CodehostAPIURL,
		},
		IDP: oauth.IDPConfig{Issuer: a.Cfg.IDPIssuer, ClientID: a.Cfg.IDPClientID, ClientSecret: a.Cfg.IDPClientSecret},
	})
	if err != nil {
		return err
	}
	a.add(svc)
	a.OAuth = svc
	return nil
}
