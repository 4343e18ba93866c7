package auditsum

import "testing"

func TestSettings(t *testing.T) {
	got := Settings([]Field{{"region", "a", "b"}, {"buildCommand", "x", "x"}, {"webhookSecret", "s1", "s2"}},
		map[string]string{"KEEP": "1", "GONE": "2", "CHANGED": "sealed-1"},
		map[string]string{"KEEP": "1", "CHANGED": "sealed-2", "NEW": "v"})
	want := "changed region, webhookSecret; env vars set: CHANGED, NEW; env vars removed: GONE"
	if got != want {
		t.Fatalf("Settings = %q, want %q", got, want)
	}
	if got := Settings(nil, map[string]string{"A": "1"}, map[string]string{"A": "1"}); got != "no change" {
		t.Fatalf("Settings of nothing = %q", got)
	}
}
