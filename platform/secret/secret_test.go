package secret_test

import (
	"strings"
	"testing"

	"github.com/keelson-dev/keelson/platform/secret"
)

func TestSealOpen(t *testing.T) {
	t.Parallel()
	s, err := secret.New("0123456789abcdef0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := s.Seal("hunter2")
	b, _ := s.Seal("hunter2")
	if a == b || strings.Contains(a, "hunter2") {
		t.Fatalf("sealing must be randomized and opaque: %q %q", a, b)
	}
	if got, err := s.Open(a); err != nil || got != "hunter2" {
		t.Fatalf("open: %q %v", got, err)
	}
	other, _ := secret.New("another key, also long enough!!")
	if _, err := other.Open(a); err == nil {
		t.Fatal("a different key opened the value")
	}
	tampered := a[:len(a)-2] + "AA"
	if _, err := s.Open(tampered); err == nil {
		t.Fatal("a tampered value opened")
	}
	if _, err := secret.New("short"); err == nil {
		t.Fatal("short key accepted")
	}
}
