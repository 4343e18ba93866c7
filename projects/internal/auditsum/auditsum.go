// Package auditsum words what a project settings update changed, for its
// audit row: the names of the fields and env vars, never their values (a
// secret's value, sealed or not, must not reach the audit log). It is not
// the audit log itself (platform/audit).
package auditsum

import (
	"slices"
	"strings"
)

// Field is one setting's name, value before and value after (compared,
// never shown).
type Field [3]string

// Settings names the fields that changed and the env vars set (added or
// given another value) or removed between oldEnv and newEnv (name -> stored
// value), e.g. "changed region, buildCommand; env vars set: API_KEY;
// removed: OLD". An update that changed nothing is "no change".
func Settings(fields []Field, oldEnv, newEnv map[string]string) string {
	var changed, set, removed []string
	for _, f := range fields {
		if f[1] != f[2] {
			changed = append(changed, f[0])
		}
	}
	for k, v := range newEnv {
		if old, ok := oldEnv[k]; !ok || old != v {
			set = append(set, k)
		}
	}
	for k := range oldEnv {
		if _, ok := newEnv[k]; !ok {
			removed = append(removed, k)
		}
	}
	slices.Sort(set)
	slices.Sort(removed)
	var parts []string
	if len(changed) > 0 {
		parts = append(parts, "changed "+strings.Join(changed, ", "))
	}
	if len(set) > 0 {
		parts = append(parts, "env vars set: "+strings.Join(set, ", "))
	}
	if len(removed) > 0 {
		parts = append(parts, "env vars removed: "+strings.Join(removed, ", "))
	}
	if len(parts) == 0 {
		return "no change"
	}
	return strings.Join(parts, "; ")
}
