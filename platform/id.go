package platform

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/google/uuid"
)

// ID identifies a stored resource. IDs are UUID strings (DESIGN.md section 4).
type ID = string

// NewID returns a new random (version 7, time-ordered) UUID string.
func NewID() ID {
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.NewString()
	}
	return id.String()
}

// ValidID reports whether s is a well-formed UUID in canonical form.
func ValidID(s string) bool {
	if len(s) != 36 {
		return false
	}
	_, err := uuid.Parse(s)
	return err == nil
}

// storedIDPattern is what StoredID makes and accepts.
var storedIDPattern = regexp.MustCompile(`^[a-z0-9]{1,32}$`)

// StoredID reads the id kept in the file at path, or makes a random one (12
// lowercase hex digits) and keeps it there, so a process started again on the
// same data dir is the same instance or host (the first of two processes
// starting at once wins). A file holding anything but 1-32 lowercase letters
// and digits is an error naming it.
func StoredID(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil {
		id := strings.TrimSpace(string(b))
		if !storedIDPattern.MatchString(id) {
			return "", fmt.Errorf("%s holds %q, not lowercase letters and digits", path, id)
		}
		return id, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	// Written whole, then linked into place: a reader never sees half an id.
	tmp, err := os.CreateTemp(filepath.Dir(path), ".id-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	id := hex.EncodeToString(b)
	if _, err := tmp.WriteString(id + "\n"); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if err := os.Link(tmp.Name(), path); errors.Is(err, os.ErrExist) {
		return StoredID(path)
	} else if err != nil {
		return "", err
	}
	return id, nil
}
