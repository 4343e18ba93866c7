package apitokens

import (
	"reflect"
	"strings"
	"testing"

	"github.com/keelson-dev/keelson/platform"
)

func TestTokenFormat(t *testing.T) {
	seen := map[string]bool{}
	for range 200 {
		tok, lookup, hash := newToken()
		if len(tok) != TokenLen || !strings.HasPrefix(tok, "kls_"+lookup) || len(hash) != 64 || seen[tok] {
			t.Fatalf("token %q lookup %q hash %q", tok, lookup, hash)
		}
		seen[tok] = true
		if got, ok := parseToken(tok); !ok || got != lookup {
			t.Fatalf("parse %q: %q %v", tok, got, ok)
		}
		// One changed character anywhere after the prefix fails the checksum.
		for _, i := range []int{4, 20, TokenLen - 1} {
			b := []byte(tok)
			b[i] = map[bool]byte{true: 'a', false: 'b'}[b[i] != 'a']
			if _, ok := parseToken(string(b)); ok {
				t.Fatalf("tampered token %q accepted", b)
			}
		}
	}
	for _, bad := range []string{"", "kls_", "ghp_" + strings.Repeat("a", TokenLen-4), "kls_" + strings.Repeat("-", TokenLen-4)} {
		if _, ok := parseToken(bad); ok {
			t.Fatalf("%q accepted", bad)
		}
	}
}

func TestCheckScopes(t *testing.T) {
	got, err := checkScopes([]string{"deployments:write", "projects:read", "deployments:write"})
	if err != nil || strings.Join(got, " ") != "deployments:write projects:read" {
		t.Fatalf("%v %v", got, err)
	}
	if _, err := checkScopes([]string{"projects:read", "root"}); err == nil || !strings.Contains(err.Error(), `scopes[1]: unknown scope "root"`) {
		t.Fatalf("unknown scope: %v", err)
	}
}

func TestDepsValidate(t *testing.T) {
	if _, err := New(Deps{}); err == nil || !strings.Contains(err.Error(), "DB is required") {
		t.Fatalf("New(Deps{}): %v", err)
	}
}

// The scopes field's description lists every permission (the client and the
// API document show it), so a new permission cannot be left out of it.
func TestScopesDocListsEveryPermission(t *testing.T) {
	f, _ := reflect.TypeOf(CreateRequest{}).FieldByName("Scopes")
	for _, p := range platform.Permissions() {
		if !strings.Contains(f.Tag.Get("doc"), " "+string(p)) {
			t.Errorf("CreateRequest.Scopes' doc does not list %s", p)
		}
	}
}

// FuzzParseToken: any string is either refused or a well-formed token whose
// lookup part is its first characters after the prefix and whose checksum
// holds; parsing never panics.
func FuzzParseToken(f *testing.F) {
	tok, _, _ := newToken()
	for _, s := range []string{tok, tok[:len(tok)-1] + "0", "kls_", "", strings.Repeat("z", TokenLen), "kls_" + strings.Repeat("\xff", TokenLen-4)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		lookup, ok := parseToken(s)
		if !ok {
			return
		}
		cut := len(s) - checksumLen
		if len(s) != TokenLen || !platform.IsAPIToken(s) || lookup != s[4:4+lookupLen] || checksum(s[:cut]) != s[cut:] {
			t.Fatalf("accepted %q (lookup %q)", s, lookup)
		}
	})
}
