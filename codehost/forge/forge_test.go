package forge

import (
	"testing"
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
