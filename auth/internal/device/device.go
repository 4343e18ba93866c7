// Package device signs and checks the account module's device tokens.
package device

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"strings"
)

// A device token proves that a client logged in to an account before
// (OWASP "Slow Down Online Guessing Attacks with Device Cookies"): logins
// presenting one are limited per device only, so nobody else's failures,
// from any address, lock that device out. It is
// "v1.<user id>.<nonce>.<HMAC-SHA256 of both>", base64url, signed with a key
// derived from the JWT secret; it grants nothing but that limit (the
// password is still checked).
const devicePrefix = "v1."

// Tokens issues and checks device tokens.
type Tokens struct{ key []byte }

// NewTokens signs with a key derived from jwtSecret.
func NewTokens(jwtSecret []byte) Tokens {
	m := hmac.New(sha256.New, jwtSecret)
	m.Write([]byte("keelson device token"))
	return Tokens{key: m.Sum(nil)}
}

func (s Tokens) mac(userID, nonce string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(userID + "|" + nonce))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// New answers a fresh device token for userID.
func (s Tokens) New(userID string) string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	nonce := base64.RawURLEncoding.EncodeToString(b)
	return devicePrefix + base64.RawURLEncoding.EncodeToString([]byte(userID)) + "." + nonce + "." + s.mac(userID, nonce)
}

// Of answers the device of token when it is a genuine device token
// of userID, else "".
func (s Tokens) Of(token, userID string) string {
	rest, ok := strings.CutPrefix(token, devicePrefix)
	if !ok || len(token) > 512 {
		return ""
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 3 {
		return ""
	}
	uid, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil || string(uid) != userID {
		return ""
	}
	if !hmac.Equal([]byte(parts[2]), []byte(s.mac(userID, parts[1]))) {
		return ""
	}
	return parts[1]
}
