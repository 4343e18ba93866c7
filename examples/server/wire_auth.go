package main

import (
	"context"

	"github.com/keelson-dev/keelson/auth"
	"github.com/keelson-dev/keelson/auth/auditlog"
)

// buildAuth builds the auth module and makes it the
// bearer authenticator (a.Authn) of every other module. With KEELSON_SMTP_URL
// unset, reset mails are logged (development fallback, DESIGN.md section 2).
func (a *App) buildAuth(ctx context.Context) error {
	log := a.Log.With("module", "auth")
	var mailer auth.Mailer = auth.LogMailer{Log: log}
	if a.Cfg.SMTPURL != "" {
		m, err := auth.NewSMTPMailer(a.Cfg.SMTPURL, a.Cfg.MailFrom)
		if err != nil {
			return &ConfigError{"KEELSON_SMTP_URL", err.Error()}
		}
		mailer = m
	}
	svc, err := auth.New(auth.Deps{
		DB:          a.DB,
		Sealer:      a.Sealer,
		Mailer:      mailer,
		Logger:      log,
		Audit:       auditlog.Recorder{}, // the audit-log module's rows; it is built after teams
		JWTSecret:   a.JWTSecret,
		AdminEmails: a.Cfg.AdminEmails,
		FrontendURL: a.Cfg.FrontendURL,

		TrustedProxies: a.Cfg.TrustedProxies,
	})
	if err != nil {
		return err
	}
	// The mail senders start after the migrations and stop at shutdown,
	// sending what is queued (within the shutdown deadline).
	a.add(svc)
	a.Auth = svc
	a.Mailer = mailer
	a.Authn = svc
	return nil
}
