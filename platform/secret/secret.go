// Package secret seals small secrets at rest (secret env values, provider
// tokens, TOTP secrets) with AES-256-GCM under the server's KEELSON_SECRET_KEY.
// It is not a key-management system: rotating the key means re-sealing.
package secret

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
)

const prefix = "v1:"

// ErrOpen means a sealed value could not be opened (wrong key or tampered).
var ErrOpen = errors.New("secret: cannot open sealed value")

// Sealer seals and opens strings. Its zero value is unusable; use New.
type Sealer struct{ aead cipher.AEAD }

// New derives a 256-bit key from key (any length, at least 16 bytes of
// entropy expected) and returns a Sealer.
func New(key string) (*Sealer, error) {
	if len(key) < 16 {
		return nil, errors.New("secret: key must be at least 16 characters")
	}
	sum := sha256.Sum256([]byte("keelson-seal-v1:" + key))
	block, err := aes.NewCipher(sum[:])
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Sealer{aead: aead}, nil
}

// Seal encrypts plaintext; the result is printable and safe to store.
func (s *Sealer) Seal(plaintext string) (string, error) {
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	ct := s.aead.Seal(nonce, nonce, []byte(plaintext), nil)
	return prefix + base64.RawStdEncoding.EncodeToString(ct), nil
}

// Open decrypts a value from Seal.
func (s *Sealer) Open(sealed string) (string, error) {
	raw, ok := strings.CutPrefix(sealed, prefix)
	if !ok {
		return "", ErrOpen
	}
	b, err := base64.RawStdEncoding.DecodeString(raw)
	if err != nil || len(b) < s.aead.NonceSize() {
		return "", ErrOpen
	}
	pt, err := s.aead.Open(nil, b[:s.aead.NonceSize()], b[s.aead.NonceSize():], nil)
	if err != nil {
		return "", ErrOpen
	}
	return string(pt), nil
}
