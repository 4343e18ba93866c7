// Package jsoncol stores a Go value as JSON text in one column, the same on
// both dialects (a Value and a Scan for sql's driver.Valuer and
// sql.Scanner). It is not a query helper.
package jsoncol

import (
	"database/sql/driver"
	"encoding/json"
	"fmt"
)

// Value is v as JSON text.
func Value(v any) (driver.Value, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

// Scan reads JSON text (a string, bytes, or NULL: the zero value) into dst,
// a pointer; what names dst's type in errors.
func Scan(src, dst any, what string) error {
	var b []byte
	switch v := src.(type) {
	case nil:
		b = []byte("null")
	case string:
		b = []byte(v)
	case []byte:
		b = v
	default:
		return fmt.Errorf("deployments: cannot scan %T into %s", src, what)
	}
	return json.Unmarshal(b, dst)
}
