package apitokens

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"hash/crc32"
	"strings"

	"github.com/keelson-dev/keelson/platform"
)

const (
	base62      = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	lookupLen   = 12
	secretLen   = 32
	checksumLen = 6
	// TokenLen is the length of every API token.
	TokenLen = len(platform.APITokenPrefix) + lookupLen + secretLen + checksumLen
)

// newToken returns a fresh token, its lookup part and the hash to store.
func newToken() (token, lookup, hash string) {
	body := randomBase62(lookupLen + secretLen)
	token = platform.APITokenPrefix + body + checksum(platform.APITokenPrefix+body)
	return token, body[:lookupLen], hashOf(token)
}

// parseToken returns the lookup part of a well-formed token (prefix,
// length, alphabet, checksum), or false.
func parseToken(tok string) (lookup string, ok bool) {
	if len(tok) != TokenLen || !platform.IsAPIToken(tok) {
		return "", false
	}
	rest := tok[len(platform.APITokenPrefix):]
	for i := 0; i < len(rest); i++ {
		if strings.IndexByte(base62, rest[i]) < 0 {
			return "", false
		}
	}
	cut := len(tok) - checksumLen
	if checksum(tok[:cut]) != tok[cut:] {
		return "", false
	}
	return rest[:lookupLen], true
}

func hashOf(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// checksum is the CRC32 (IEEE) of s in checksumLen base62 digits.
func checksum(s string) string {
	n := crc32.ChecksumIEEE([]byte(s))
	out := make([]byte, checksumLen)
	for i := checksumLen - 1; i >= 0; i-- {
		out[i] = base62[n%62]
		n /= 62
	}
	return string(out)
}

// randomBase62 returns n characters from crypto/rand, without modulo bias
// (bytes of 248 and above are drawn again).
func randomBase62(n int) string {
	out := make([]byte, 0, n)
	buf := make([]byte, 2*n)
	for len(out) < n {
		_, _ = rand.Read(buf) // never fails (crypto/rand panics instead)
		for _, b := range buf {
			if b < 248 && len(out) < n {
				out = append(out, base62[b%62])
			}
		}
	}
	return string(out)
}
