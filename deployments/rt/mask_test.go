package rt_test

import (
	"strings"
	"testing"

	"github.com/keelson-dev/keelson/deployments/rt"
)

// What an attacker's build prints to get a secret into the stored log.
func TestLineSplitterMasksEveryWayASecretIsPrinted(t *testing.T) {
	t.Parallel()
	const token = "tok-S3cr3tValueXYZ123456"
	pem := "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj\n-----END PRIVATE KEY-----\n"
	withNL := "newline-secret-value\n"
	m := rt.NewMasker(token, pem, withNL, "x", "short7!")
	const maxLine = 64
	cases := map[string][]string{
		// The secret straddles the cut of an over-long line, in one write or byte by byte.
		"across the cut":                       {strings.Repeat("A", maxLine-5) + token + "tail\n"},
		"across the cut, bytewise":             strings.Split(strings.Repeat("B", maxLine-10)+token+"\n", ""),
		"across writes":                        {"prefix " + token[:7], token[7:15], token[15:] + " suffix\n"},
		"no trailing newline":                  {"at the end " + token},
		"value with newline":                   {"echo " + withNL},
		"each PEM line":                        {pem},
		"PEM lines at a cut":                   {strings.Repeat("C", maxLine-3) + "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC" + "\n"},
		"secret over the cut, no newline ever": {strings.Repeat("D", maxLine-4) + token + strings.Repeat("E", 3*maxLine)},
	}
	secrets := []string{token, "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC", "BKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj", "newline-secret-value", "S3cr3tValue"}
	for name, writes := range cases {
		var lines []string
		ls := &rt.LineSplitter{MaxLine: maxLine, Mask: m, Emit: func(l string) { lines = append(lines, l) }}
		for _, w := range writes {
			ls.Write([]byte(w))
		}
		ls.Flush()
		all := strings.Join(lines, "\n")
		for _, s := range secrets {
			if strings.Contains(all, s) {
				t.Errorf("%s: %q leaked in %q", name, s, lines)
			}
		}
		if !strings.Contains(all, "***") {
			t.Errorf("%s: nothing masked in %q", name, lines)
		}
		for _, l := range lines {
			if len(l) > maxLine+m.Longest() {
				t.Errorf("%s: line of %d bytes, want at most %d", name, len(l), maxLine+m.Longest())
			}
		}
	}
	// Values too short to mask are never masked: "x" does not eat the output.
	var lines []string
	ls := &rt.LineSplitter{MaxLine: maxLine, Mask: m, Emit: func(l string) { lines = append(lines, l) }}
	ls.Write([]byte("export x=1; short7! stays\n"))
	if len(lines) != 1 || lines[0] != "export x=1; short7! stays" {
		t.Errorf("short values were masked: %q", lines)
	}
	// Text around the masks survives, and long output is cut near maxLine.
	lines = nil
	ls.Write([]byte(strings.Repeat("z", 10*maxLine) + "\n"))
	if len(lines) < 9 || strings.Join(lines, "") != strings.Repeat("z", 10*maxLine) {
		t.Errorf("long line cut into %d pieces, or text lost", len(lines))
	}
}
