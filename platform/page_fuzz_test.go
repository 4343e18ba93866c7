package platform_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform"
)

// FuzzDecodeCursor: any cursor string decodes to a valid position or is a 400
// naming query.cursor; never a panic. A decoded cursor re-encodes to one
// that decodes to the same position. Seeds: testdata/fuzz/FuzzDecodeCursor.
func FuzzDecodeCursor(f *testing.F) {
	good := platform.Cursor{Time: time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC), ID: platform.NewID()}.Encode()
	for _, s := range []string{"", good, good + "A", good[:len(good)-2], "e30", "bnVsbA", "eyJ0IjoiIiwiaSI6IiJ9", "%%%", strings.Repeat("A", 4096)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := platform.DecodeCursor(s)
		if err != nil {
			var pe *platform.Error
			if !errors.As(err, &pe) || pe.Status != 400 || !strings.Contains(pe.Message, "query.cursor") {
				t.Fatalf("DecodeCursor(%q): %v, want a 400 naming query.cursor", s, err)
			}
			return
		}
		if s == "" {
			if c != nil {
				t.Fatalf("empty cursor decoded to %+v", c)
			}
			return
		}
		if !platform.ValidID(c.ID) {
			t.Fatalf("DecodeCursor(%q) gave invalid id %q", s, c.ID)
		}
		again, err := platform.DecodeCursor(c.Encode())
		if err != nil || !again.Time.Equal(c.Time) || again.ID != c.ID {
			t.Fatalf("round trip of %+v: %+v, %v", c, again, err)
		}
	})
}
