// Package envvars is a project's environment variables at rest: a JSON list
// in the projects row where each secret value is sealed, and the merge of a
// settings update into it.
package envvars

import (
	"encoding/json"
	"fmt"

	"github.com/keelson-dev/keelson/platform"
)

// Stored is one env var at rest; V is sealed when S is true.
type Stored struct {
	K string `json:"k"`
	V string `json:"v"`
	S bool   `json:"s,omitempty"`
}

// In is one env var of a settings update.
type In struct {
	Key, Value string
	Secret     bool
}

// Decode reads the stored list ("" is none).
func Decode(s string) ([]Stored, error) {
	if s == "" {
		return nil, nil
	}
	var out []Stored
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		return nil, fmt.Errorf("projects: stored env vars are corrupt: %w", err)
	}
	return out, nil
}

// Encode writes the list as stored.
func Encode(env []Stored) string {
	if len(env) == 0 {
		return "[]"
	}
	b, _ := json.Marshal(env)
	return string(b)
}

// Map is the list by key, values as stored (sealed secrets stay sealed).
func Map(env []Stored) map[string]string {
	m := make(map[string]string, len(env))
	for _, e := range env {
		m[e.K] = e.V
	}
	return m
}

// Merge is the update in over the stored list old: new secret values are
// sealed, and a secret sent back as mask keeps its stored sealed value.
func Merge(old []Stored, in []In, mask string, seal func(string) (string, error)) ([]Stored, error) {
	oldSecret := map[string]string{}
	for _, e := range old {
		if e.S {
			oldSecret[e.K] = e.V
		}
	}
	out := make([]Stored, 0, len(in))
	for i, e := range in {
		if !e.Secret {
			out = append(out, Stored{K: e.Key, V: e.Value})
			continue
		}
		if e.Value == mask {
			sealed, ok := oldSecret[e.Key]
			if !ok {
				return nil, platform.Invalidf("envVars[%d].value: %q is the mask of a secret, but %s has no stored secret value to keep; send the real value", i, mask, e.Key)
			}
			out = append(out, Stored{K: e.Key, V: sealed, S: true})
			continue
		}
		sealed, err := seal(e.Value)
		if err != nil {
			return nil, fmt.Errorf("projects: seal env var %s: %w", e.Key, err)
		}
		out = append(out, Stored{K: e.Key, V: sealed, S: true})
	}
	return out, nil
}
