package codehost

import (
	"testing"
	"time"
)

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
