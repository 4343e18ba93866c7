// Package onetime is the account module's one-time codes: TOTP (RFC 6238,
// SHA-1, 6 digits, 30 s, per DESIGN.md section 4), recovery codes and the
// opaque tokens of links and refresh tokens (stored as Hash). It
// stores nothing: the module keeps the sealed secret, the last accepted time
// step and the recovery codes' hashes.
package onetime

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"time"

	"github.com/pquerna/otp"
	"github.com/pquerna/otp/totp"
)

const (
	period = 30
	skew   = 1 // accept one time step either side of now (clock drift)
)

// Opts are the TOTP parameters.
var Opts = totp.ValidateOpts{Period: period, Digits: otp.DigitsSix, Algorithm: otp.AlgorithmSHA1}

// Generate makes a new TOTP secret for account at issuer.
func Generate(issuer, account string) (*otp.Key, error) {
	return totp.Generate(totp.GenerateOpts{
		Issuer: issuer, AccountName: account, Period: period,
		Digits: otp.DigitsSix, Algorithm: otp.AlgorithmSHA1, SecretSize: 20,
	})
}

// Match answers the time step near now for which code is secret's code and
// which is later than last, or -1 for none.
func Match(secret, code string, now time.Time, last int64) (int64, error) {
	at := now.Unix() / period
	var matched int64 = -1
	for st := at - skew; st <= at+skew; st++ {
		want, err := totp.GenerateCodeCustom(secret, time.Unix(st*period, 0).UTC(), Opts)
		if err != nil {
			return -1, err
		}
		if subtle.ConstantTimeCompare([]byte(want), []byte(code)) == 1 && st > last && matched < 0 {
			matched = st
		}
	}
	return matched, nil
}

// Shaped reports whether code looks like a TOTP code (six digits).
func Shaped(code string) bool {
	if len(code) != 6 {
		return false
	}
	for _, r := range code {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

var recoveryEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// NewRecoveryCode returns 60 random bits as xxxx-xxxx-xxxx (lower-case base32).
func NewRecoveryCode() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	s := strings.ToLower(recoveryEncoding.EncodeToString(b))[:12]
	return s[:4] + "-" + s[4:8] + "-" + s[8:]
}

// NormalizeRecovery makes "ABCD EFGH-ijkl" and "abcdefghijkl" the same code.
func NormalizeRecovery(code string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(code) {
		switch {
		case r == '-' || r == ' ':
		case (r >= 'a' && r <= 'z') || (r >= '2' && r <= '7'):
			b.WriteRune(r)
		default:
			return ""
		}
	}
	if b.Len() != 12 {
		return ""
	}
	return b.String()
}

// NewToken returns 32 random bytes, base64url, and their SHA-256 hex,
// which is what we store.
func NewToken() (raw, hash string) {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	raw = base64.RawURLEncoding.EncodeToString(b)
	return raw, Hash(raw)
}

// Hash is the SHA-256 hex of a token or code: what is stored of it.
func Hash(raw string) string {
	sum := sha256.Sum256([]byte(raw))
	return hex.EncodeToString(sum[:])
}
