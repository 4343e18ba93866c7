package codehost

import (
	"testing"
	"time"
)

// GitHub's published test vector:
// https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries#testing-the-webhook-payload-validation
func TestSignatureGitHubTestVector(t *testing.T) {
	const (
		secret = "It's a Secret to Everybody"
		body   = "Hello, World!"
		want   = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
	)
	if got := Sign(secret, []byte(body)); got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
	if !VerifySignature(secret, []byte(body), want) {
		t.Fatal("the published signature does not verify")
	}
}

func TestVerifySignatureRejects(t *testing.T) {
	const secret = "It's a Secret to Everybody"
	good := Sign(secret, []byte("Hello, World!"))
	for name, c := range map[string]struct {
		secret, body, header string
	}{
		"other body":      {secret, "Hello, World?", good},
		"other secret":    {"It's a Secret to Somebody", "Hello, World!", good},
		"empty secret":    {"", "Hello, World!", Sign("", []byte("Hello, World!"))},
		"missing":         {secret, "Hello, World!", ""},
		"no prefix":       {secret, "Hello, World!", good[len("sha256="):]},
		"sha1 prefix":     {secret, "Hello, World!", "sha1=" + good[len("sha256="):]},
		"truncated":       {secret, "Hello, World!", good[:len(good)-2]},
		"not hex":         {secret, "Hello, World!", "sha256=" + string(make([]byte, 64))},
		"one digit wrong": {secret, "Hello, World!", good[:len(good)-1] + "0"},
	} {
		if VerifySignature(c.secret, []byte(c.body), c.header) {
			t.Errorf("%s: verified, want rejected", name)
		}
	}
}

func TestStateRoundTripAndRejects(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	s, err := newState(key, "user-1", now, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	id, user, exp, err := parseState(key, s, now.Add(time.Minute))
	if err != nil || user != "user-1" || id == "" || !exp.Equal(now.Add(10*time.Minute)) {
		t.Fatalf("parseState = %q %q %v %v", id, user, exp, err)
	}
	if _, _, _, err := parseState(key, s, now.Add(11*time.Minute)); err != errStateExpired {
		t.Fatalf("expired state: err = %v, want errStateExpired", err)
	}
	if _, _, _, err := parseState([]byte("another key of thirty-two bytes!"), s, now); err != errStateInvalid {
		t.Fatalf("state under another key: err = %v, want errStateInvalid", err)
	}
	tampered := s[:len(s)-3] + "abc"
	if _, _, _, err := parseState(key, tampered, now); err != errStateInvalid {
		t.Fatalf("tampered state: err = %v, want errStateInvalid", err)
	}
}
