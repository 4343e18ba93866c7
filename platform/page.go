package platform

import (
	"encoding/base64"
	"encoding/json"
	"time"
)

// Page limits of list routes.
const (
	DefaultPageSize = 20
	MaxPageSize     = 100
)

// PageParams are the query parameters of every paginated list route. Embed it in
// a Huma input struct. Absurd limits are clamped rather than refused.
type PageParams struct {
	Limit  int    `query:"limit" doc:"Page size, 1 to 100 (default 20); larger values are clamped to 100"`
	Cursor string `query:"cursor" doc:"Opaque cursor from the X-Next-Cursor header of the previous page"`
}

// Size is the effective page size.
func (p PageParams) Size() int {
	switch {
	case p.Limit <= 0:
		return DefaultPageSize
	case p.Limit > MaxPageSize:
		return MaxPageSize
	}
	return p.Limit
}

// Cursor is a keyset position: the sort time and id of the last item returned.
type Cursor struct {
	Time time.Time `json:"t"`
	ID   ID        `json:"i"`
}

// Encode renders c as an opaque URL-safe string.
func (c Cursor) Encode() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeCursor parses a cursor from Encode. An empty string is the first page
// (nil cursor); garbage is a 400 naming the parameter.
func DecodeCursor(s string) (*Cursor, error) {
	if s == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, Invalid("query.cursor: malformed cursor")
	}
	var c Cursor
	if err := json.Unmarshal(b, &c); err != nil || !ValidID(c.ID) {
		return nil, Invalid("query.cursor: malformed cursor")
	}
	return &c, nil
}

// TrimPage cuts rows, read with one row more than size, to size, and
// returns the next page's cursor, at of the last row kept ("" when rows
// held no more than the page).
func TrimPage[T any](rows []T, size int, at func(last T) Cursor) ([]T, string) {
	if len(rows) <= size {
		return rows, ""
	}
	rows = rows[:size]
	return rows, at(rows[len(rows)-1]).Encode()
}
