package main

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// TestConfigTableMatchesREADME: docs/CONFIG.md's Configuration table is the
// one settings renders, row for row, and README's is the same for the basic
// settings, so a variable is documented once (in settings) and neither file
// can drift from what the server reads. KEELSON_UPDATE_README=1 rewrites both
// tables from settings.
func TestConfigTableMatchesREADME(t *testing.T) {
	checkConfigTable(t, "../../docs/CONFIG.md", configTable(false))
	checkConfigTable(t, "../../README.md", configTable(true))
}

func checkConfigTable(t *testing.T, path, want string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "| variable | default | meaning |")
	if start < 0 {
		t.Fatalf("%s has no Configuration table (| variable | default | meaning |)", path)
	}
	// The table ends at a blank line or at the end of the file.
	end := len(doc)
	if i := strings.Index(doc[start:], "\n\n"); i >= 0 {
		end = start + i + 1
	}
	got := doc[start:end]
	if got == want {
		return
	}
	if os.Getenv("KEELSON_UPDATE_README") == "1" {
		if err := os.WriteFile(path, []byte(doc[:start]+want+doc[end:]), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s's Configuration table rewritten from settings", path)
		return
	}
	gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(gl), len(wl)) {
		var g, w string
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if g != w {
			t.Fatalf("%s's Configuration table differs from settings (settings.go) at row %d:\n%s:   %s\nsettings: %s\n(KEELSON_UPDATE_README=1 go test -run TestConfigTableMatchesREADME ./examples/server rewrites it)", path, i-1, path, g, w)
		}
	}
}

// TestSettingsTable: every setting has a name, a default shown in the table and
// words saying what it does, and no variable is listed twice.
func TestSettingsTable(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range settings {
		switch {
		case !strings.HasPrefix(s.name, "KEELSON_"):
			t.Errorf("%q: not a KEELSON_ variable", s.name)
		case seen[s.name]:
			t.Errorf("%s is listed twice", s.name)
		case s.def == "" && s.shown == "":
			t.Errorf("%s: no default for the table (def or shown)", s.name)
		case s.doc == "" || strings.Contains(s.doc, "\n") || strings.Contains(s.doc, "|"):
			t.Errorf("%s: doc must be one table cell (non-empty, no newline, no |)", s.name)
		case s.parse == nil:
			t.Errorf("%s: no parse", s.name)
		}
		seen[s.name] = true
	}
}

// TestConfigParseThenValidate: parsing only reads values of the right kind;
// a Config assembled in code (an embedder's, or one a test changed) is
// checked by Validate the same way the environment's is.
func TestConfigParseThenValidate(t *testing.T) {
	c, err := ParseConfig(func(k string) string {
		return map[string]string{"KEELSON_MAX_CONNS": "3", "KEELSON_ENGINE": "temporal"}[k]
	})
	if err != nil {
		t.Fatalf("ParseConfig took a small number and an engine name without judging them: %v", err)
	}
	var ce *ConfigError
	if err := c.Validate(); !errors.As(err, &ce) || ce.Var != "KEELSON_MAX_CONNS" {
		t.Fatalf("Validate: %v, want KEELSON_MAX_CONNS out of range", err)
	}
	c.MaxConns = DefaultMaxConns
	if err := c.Validate(); !errors.As(err, &ce) || ce.Var != "KEELSON_TEMPORAL_ADDRESS" {
		t.Fatalf("Validate: %v, want KEELSON_TEMPORAL_ADDRESS required by KEELSON_ENGINE=temporal", err)
	}
	if _, err := ParseConfig(func(k string) string { return map[string]string{"KEELSON_MAX_CONNS": "many"}[k] }); !errors.As(err, &ce) ||
		ce.Var != "KEELSON_MAX_CONNS" || !strings.Contains(ce.Problem, `"many"`) {
		t.Fatalf("ParseConfig(KEELSON_MAX_CONNS=many): %v, want an error naming the variable and the value", err)
	}
	d, err := LoadConfig(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if d.Addr != ":8080" || d.MailFrom == "" || d.AppsDomain != "localhost" || len(d.Regions) != 1 || d.LogRetention <= 0 {
		t.Fatalf("defaults not applied: %+v", d)
	}
}
