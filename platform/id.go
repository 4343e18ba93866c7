package platform

import "github.com/google/uuid"

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
