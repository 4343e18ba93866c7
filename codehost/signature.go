package codehost

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// SignatureHeader is the header that carries a delivery's signature.
const SignatureHeader = "X-Hub-Signature-256"

// Sign returns the signature header value for body: "sha256=" and the hex
// HMAC-SHA256 of body under secret.
func Sign(secret string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// VerifySignature reports whether header is a valid "sha256=<hex>" signature
// of body under secret. The comparison is constant-time; an empty secret
// never verifies.
func VerifySignature(secret string, body []byte, header string) bool {
	if secret == "" {
		return false
	}
	hexSig, ok := strings.CutPrefix(strings.TrimSpace(header), "sha256=")
	if !ok || len(hexSig) != sha256.Size*2 {
		return false
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return hmac.Equal(got, mac.Sum(nil))
}
