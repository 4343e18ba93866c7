package auth

import (
	"bufio"
	"context"
	"encoding/base64"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/keelson-dev/keelson/platform/platformtest"
)

// smtpSession is what fakeSMTP saw of one session.
type smtpSession struct {
	auth, from, rcpt, data string
}

// fakeSMTP serves one SMTP session on loopback speaking the real protocol
// (EHLO, AUTH PLAIN, MAIL, RCPT, DATA, QUIT), with no STARTTLS offered.
func fakeSMTP(t *testing.T) (addr string, got <-chan smtpSession) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan smtpSession, 1)
	done := make(chan struct{})
	t.Cleanup(func() { l.Close(); <-done })
	go func() {
		defer close(done)
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var s smtpSession
		r := bufio.NewReader(c)
		w := func(line string) { _, _ = c.Write([]byte(line + "\r\n")) }
		w("220 localhost ESMTP fake")
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimRight(line, "\r\n")
			cmd := strings.ToUpper(strings.SplitN(line, " ", 2)[0])
			switch cmd {
			case "EHLO", "HELO":
				w("250-localhost")
				w("250-AUTH PLAIN")
				w("250 8BITMIME")
			case "AUTH":
				s.auth = line
				w("235 2.7.0 Authentication successful")
			case "MAIL":
				s.from = line
				w("250 OK")
			case "RCPT":
				s.rcpt = line
				w("250 OK")
			case "DATA":
				w("354 go ahead")
				var b strings.Builder
				for {
					dl, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if dl == ".\r\n" {
						break
					}
					b.WriteString(dl)
				}
				s.data = b.String()
				w("250 OK queued")
			case "QUIT":
				w("221 bye")
				ch <- s
				return
			default:
				w("502 unknown")
			}
		}
	}()
	return l.Addr().String(), ch
}

func TestSMTPMailer(t *testing.T) {
	addr, got := fakeSMTP(t)
	m, err := NewSMTPMailer("smtp://mailer:s3cret@"+addr, "Keelson <no-reply@example.com>")
	if err != nil {
		t.Fatal(err)
	}
	err = m.Send(context.Background(), Mail{To: "ada@example.com", Subject: "Reset your Keelson password",
		Text: "open\nhttps://app.example.com/reset-password?token=abc\n"})
	if err != nil {
		t.Fatal(err)
	}
	s := <-got
	wantAuth := "AUTH PLAIN " + base64.StdEncoding.EncodeToString([]byte("\x00mailer\x00s3cret"))
	if s.auth != wantAuth || s.from != "MAIL FROM:<no-reply@example.com> BODY=8BITMIME" && s.from != "MAIL FROM:<no-reply@example.com>" ||
		s.rcpt != "RCPT TO:<ada@example.com>" {
		t.Errorf("session %+v", s)
	}
	for _, h := range []string{"From: \"Keelson\" <no-reply@example.com>\r\n", "To: ada@example.com\r\n",
		"Subject: Reset your Keelson password\r\n", "Content-Type: text/plain; charset=utf-8\r\n",
		"\r\n\r\nopen\r\nhttps://app.example.com/reset-password?token=abc\r\n"} {
		if !strings.Contains(s.data, h) {
			t.Errorf("message lacks %q:\n%s", h, s.data)
		}
	}
	if err := m.Send(context.Background(), Mail{To: "a@example.com\r\nBcc: x@evil", Subject: "x"}); err == nil {
		t.Error("header injection accepted")
	}
}

func TestNewSMTPMailerErrorsHideThePassword(t *testing.T) {
	for _, u := range []string{"http://u:hunter2@host:25", "smtp://u:hunter2@:25", "smtp://u:hunter2@h%zz:25"} {
		_, err := NewSMTPMailer(u, "")
		if err == nil {
			t.Errorf("%s accepted", u)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("error text holds the password: %v", err)
		}
	}
	if _, err := NewSMTPMailer("smtp://host", "not an address"); err == nil {
		t.Error("bad sender accepted")
	}
}

func TestLogMailerLogsTheLinkForDevelopment(t *testing.T) {
	var buf platformtest.SyncBuffer
	m := LogMailer{Log: slog.New(slog.NewTextHandler(&buf, nil))}
	if err := m.Send(context.Background(), Mail{To: "ada@example.com", Subject: "s", Text: "https://app/reset-password?token=xyz"}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if !strings.Contains(out, "level=INFO") || !strings.Contains(out, "ada@example.com") || !strings.Contains(out, "token=xyz") {
		t.Errorf("log mailer wrote %q", out)
	}
}
