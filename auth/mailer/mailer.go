// Package mailer sends the account module's mail: a Sender (SMTP, or the
// log for development) and a bounded Queue that runs mail jobs off the
// request path. It knows nothing of accounts or tokens.
package mailer

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net"
	netmail "net/mail"
	"net/smtp"
	"net/url"
	"strings"
	"time"
)

// Message is one plain-text message.
type Message struct {
	To      string
	Subject string
	Text    string
}

// Sender sends mail. SMTP and Log implement it.
type Sender interface {
	Send(ctx context.Context, m Message) error
}

// Log writes each mail to the log instead of sending it: DESIGN.md's
// development fallback when KEELSON_SMTP_URL is unset. The body, and so any
// reset link in it, is logged at INFO, which is the point: a developer without
// SMTP needs the link. Never use it where the log is less private than mail.
type Log struct{ Log *slog.Logger }

// Send logs m.
func (l Log) Send(ctx context.Context, m Message) error {
	log := l.Log
	if log == nil {
		return errors.New("auth: LogMailer has no logger")
	}
	log.InfoContext(ctx, "mail not sent: no SMTP configured (KEELSON_SMTP_URL); logging it instead (development only)",
		"to", m.To, "subject", m.Subject, "body", m.Text)
	return nil
}

// SMTP sends mail through an SMTP server with net/smtp. It upgrades
// with STARTTLS when the server offers it (smtp://) or connects over TLS
// (smtps://), and authenticates with PLAIN when the URL has a user; net/smtp
// refuses PLAIN over an unencrypted connection except to localhost.
type SMTP struct {
	addr, host string
	implicit   bool
	user, pass string
	from       string // envelope sender
	fromHeader string // From: header, with display name
	// TLSConfig overrides the TLS settings (tests with a private CA). Optional.
	TLSConfig *tls.Config
	// Timeout bounds one whole send. Default 30s.
	Timeout time.Duration
}

// NewSMTP parses rawURL (smtp://user:pass@host:port or smtps://...) and
// from (an address, optionally with a display name). It does not connect.
func NewSMTP(rawURL, from string) (*SMTP, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, errors.New("SMTP URL is not a valid URL") // the URL may hold a password: never echo it
	}
	m := &SMTP{Timeout: 30 * time.Second}
	switch u.Scheme {
	case "smtp":
	case "smtps":
		m.implicit = true
	default:
		return nil, errors.New("SMTP URL must start with smtp:// or smtps://")
	}
	m.host = u.Hostname()
	if m.host == "" {
		return nil, errors.New("SMTP URL has no host")
	}
	port := u.Port()
	if port == "" {
		port = "587"
		if m.implicit {
			port = "465"
		}
	}
	m.addr = net.JoinHostPort(m.host, port)
	if u.User != nil {
		m.user = u.User.Username()
		m.pass, _ = u.User.Password()
	}
	if from == "" {
		from = "Keelson <no-reply@" + m.host + ">"
	}
	addr, err := netmail.ParseAddress(from)
	if err != nil {
		return nil, fmt.Errorf("mail sender %q is not a valid address", from)
	}
	m.from, m.fromHeader = addr.Address, addr.String()
	return m, nil
}

// Send delivers msg to msg.To.
func (m *SMTP) Send(ctx context.Context, msg Message) error {
	if strings.ContainsAny(msg.To+msg.Subject, "\r\n") {
		return errors.New("auth: mail header holds a line break")
	}
	ctx, cancel := context.WithTimeout(ctx, m.Timeout)
	defer cancel()
	tlsConf := m.TLSConfig
	if tlsConf == nil {
		tlsConf = &tls.Config{ServerName: m.host, MinVersion: tls.VersionTLS12}
	}
	d := net.Dialer{}
	var conn net.Conn
	var err error
	if m.implicit {
		conn, err = (&tls.Dialer{NetDialer: &d, Config: tlsConf}).DialContext(ctx, "tcp", m.addr)
	} else {
		conn, err = d.DialContext(ctx, "tcp", m.addr)
	}
	if err != nil {
		return fmt.Errorf("smtp: connect %s: %w", m.addr, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	c, err := smtp.NewClient(conn, m.host)
	if err != nil {
		conn.Close()
		return fmt.Errorf("smtp: greeting: %w", err)
	}
	defer c.Close()
	if !m.implicit {
		if ok, _ := c.Extension("STARTTLS"); ok {
			if err := c.StartTLS(tlsConf); err != nil {
				return fmt.Errorf("smtp: starttls: %w", err)
			}
		}
	}
	if m.user != "" {
		if err := c.Auth(smtp.PlainAuth("", m.user, m.pass, m.host)); err != nil {
			return fmt.Errorf("smtp: auth: %w", err)
		}
	}
	if err := c.Mail(m.from); err != nil {
		return fmt.Errorf("smtp: MAIL FROM: %w", err)
	}
	if err := c.Rcpt(msg.To); err != nil {
		return fmt.Errorf("smtp: RCPT TO: %w", err)
	}
	w, err := c.Data()
	if err != nil {
		return fmt.Errorf("smtp: DATA: %w", err)
	}
	idb := make([]byte, 12)
	_, _ = rand.Read(idb)
	var b strings.Builder
	fmt.Fprintf(&b, "From: %s\r\nTo: %s\r\nSubject: %s\r\nDate: %s\r\nMessage-ID: <%s@%s>\r\n",
		m.fromHeader, msg.To, mime.QEncoding.Encode("utf-8", msg.Subject), time.Now().UTC().Format(time.RFC1123Z), hex.EncodeToString(idb), m.host)
	b.WriteString("MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n")
	b.WriteString(strings.ReplaceAll(strings.ReplaceAll(msg.Text, "\r\n", "\n"), "\n", "\r\n"))
	if _, err := w.Write([]byte(b.String())); err != nil {
		return fmt.Errorf("smtp: write: %w", err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("smtp: end of data: %w", err)
	}
	return c.Quit()
}
