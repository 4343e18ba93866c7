// Package password hashes account passwords with argon2id into PHC strings
// (the parameters travel with each hash) and bounds how many hashes run at
// once, since each holds 19 MiB.
//
// Passwords are hashed with argon2id, m=19 MiB, t=2, p=1 (the OWASP
// minimum), 16-byte salt, 32-byte key, stored as a PHC string
// ($argon2id$v=19$m=19456,t=2,p=1$salt$hash). At most the module's
// Deps.PasswordHashConcurrency hashes run at once (default max(2, NumCPU)),
// so a burst of logins costs at most that many times 19 MiB.
package password

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"golang.org/x/crypto/argon2"
)

// Argon2id parameters: the OWASP Password Storage Cheat Sheet minimum
// (m=19 MiB, t=2, p=1). Stored hashes carry their parameters, so raising
// these later keeps old hashes verifiable.
const (
	argonMemoryKiB = 19 * 1024
	argonTime      = 2
	argonThreads   = 1
	argonSaltLen   = 16
	argonKeyLen    = 32
)

var errBadHash = errors.New("auth: malformed password hash")

// Hasher runs argon2id under a semaphore so that at most cap(sem) hashes (each
// holding argonMemoryKiB of memory) run at once, whatever the request burst.
type Hasher struct {
	sem   chan struct{}
	dummy string       // a hash of a random password, verified for unknown accounts
	runs  atomic.Int64 // hashes computed, for tests that check limits come first
}

// New returns a Hasher running at most concurrency hashes at once.
func New(concurrency int) (*Hasher, error) {
	h := &Hasher{sem: make(chan struct{}, concurrency)}
	dummy, err := h.Hash(context.Background(), rand.Text())
	if err != nil {
		return nil, err
	}
	h.dummy = dummy
	return h, nil
}

func (h *Hasher) acquire(ctx context.Context) error {
	select {
	case h.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *Hasher) release() { <-h.sem }

// Hash returns the PHC string of password with a fresh salt.
func (h *Hasher) Hash(ctx context.Context, password string) (string, error) {
	salt := make([]byte, argonSaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	if err := h.acquire(ctx); err != nil {
		return "", err
	}
	h.runs.Add(1)
	key := argon2.IDKey([]byte(password), salt, argonTime, argonMemoryKiB, argonThreads, argonKeyLen)
	h.release()
	b64 := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s",
		argon2.Version, argonMemoryKiB, argonTime, argonThreads, b64.EncodeToString(salt), b64.EncodeToString(key)), nil
}

// Verify reports whether password matches the PHC string encoded. An empty
// encoded (no password set) is checked against the dummy hash and never matches,
// so it costs the same time as a wrong password.
func (h *Hasher) Verify(ctx context.Context, password, encoded string) (bool, error) {
	match := true
	if encoded == "" {
		encoded, match = h.dummy, false
	}
	p, err := parsePHC(encoded)
	if err != nil {
		return false, err
	}
	if err := h.acquire(ctx); err != nil {
		return false, err
	}
	h.runs.Add(1)
	key := argon2.IDKey([]byte(password), p.salt, p.time, p.memory, p.threads, uint32(len(p.key)))
	h.release()
	return subtle.ConstantTimeCompare(key, p.key) == 1 && match, nil
}

type phc struct {
	memory, time uint32
	threads      uint8
	salt, key    []byte
}

func parsePHC(s string) (phc, error) {
	var p phc
	parts := strings.Split(s, "$")
	// "", "argon2id", "v=19", "m=..,t=..,p=..", salt, key
	if len(parts) != 6 || parts[1] != "argon2id" {
		return p, errBadHash
	}
	var v int
	if _, err := fmt.Sscanf(parts[2], "v=%d", &v); err != nil || v != argon2.Version {
		return p, errBadHash
	}
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &p.memory, &p.time, &p.threads); err != nil {
		return p, errBadHash
	}
	if p.memory == 0 || p.time == 0 || p.threads == 0 || p.memory > 1<<21 {
		return p, errBadHash
	}
	var err error
	if p.salt, err = base64.RawStdEncoding.DecodeString(parts[4]); err != nil {
		return p, errBadHash
	}
	if p.key, err = base64.RawStdEncoding.DecodeString(parts[5]); err != nil || len(p.key) < 16 {
		return p, errBadHash
	}
	return p, nil
}

// Runs is how many hashes were computed (tests check that limits come first).
func (h *Hasher) Runs() int64 { return h.runs.Load() }

// Concurrency is how many hashes may run at once.
func (h *Hasher) Concurrency() int { return cap(h.sem) }
