// Package emailaddr checks and shows account email addresses: the one form
// they are stored and compared in, and a masked form for messages. It is not
// where mail is sent (auth's Mailer).
package emailaddr

import (
	"errors"
	"net/mail"
	"strings"
)

// Normalize trims and lower-cases e and checks that it is a bare address
// (no display name, no spaces).
func Normalize(e string) (string, error) {
	e = strings.ToLower(strings.TrimSpace(e))
	if len(e) > 254 || strings.ContainsAny(e, " \t\r\n") {
		return "", errors.New("expected a plain email address")
	}
	a, err := mail.ParseAddress(e)
	if err != nil || a.Address != e || !strings.Contains(e[strings.LastIndexByte(e, '@')+1:], ".") && !strings.HasSuffix(e, "@localhost") {
		return "", errors.New("expected a plain email address")
	}
	return e, nil
}

// Mask shows enough of an address to recognise it: "a***@example.com".
func Mask(e string) string {
	at := strings.LastIndexByte(e, '@')
	if at < 1 {
		return "***"
	}
	return e[:1] + "***" + e[at:]
}
