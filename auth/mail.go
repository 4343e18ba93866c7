package auth

import "github.com/keelson-dev/keelson/auth/mailer"

// Mail goes out through auth/mailer; these names keep the module's API.
type (
	// Mail is one plain-text message.
	Mail = mailer.Message
	// Mailer sends mail. SMTPMailer and LogMailer implement it.
	Mailer = mailer.Sender
	// LogMailer writes each mail to the log instead of sending it (development only).
	LogMailer = mailer.Log
	// SMTPMailer sends mail through an SMTP server.
	SMTPMailer = mailer.SMTP
)

// NewSMTPMailer is mailer.NewSMTP: rawURL is smtp:// or smtps://, from an address.
func NewSMTPMailer(rawURL, from string) (*SMTPMailer, error) { return mailer.NewSMTP(rawURL, from) }
