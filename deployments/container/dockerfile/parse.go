package dockerfile

import (
	"encoding/json"
	"regexp"
	"strings"
	"unicode"
)

// instruction is one logical line of a Dockerfile.
type instruction struct {
	line int    // where it starts (1-based)
	cmd  string // upper case
	args string
}

var escapeDirective = regexp.MustCompile(`(?i)^#\s*escape\s*=\s*([\\` + "`" + `])\s*$`)

// parseDockerfile splits text into instructions the way the classic
// builder does: parser directives, comments, and lines continued by the
// escape character.
func parseDockerfile(text string) []instruction {
	escape := byte('\\')
	lines := strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	directives := true
	var out []instruction
	var cur *instruction
	var buf strings.Builder
	for i, raw := range lines {
		l := strings.TrimSpace(raw)
		if directives {
			if m := escapeDirective.FindStringSubmatch(l); m != nil {
				escape = m[1][0]
				continue
			}
			if strings.HasPrefix(l, "#") && strings.Contains(l, "=") && !strings.Contains(l[1:], "#") {
				continue // another directive (syntax=...)
			}
			directives = false
		}
		if strings.HasPrefix(l, "#") || (l == "" && cur != nil) {
			continue // comments and empty lines inside a continuation
		}
		if l == "" {
			continue
		}
		cont := l[len(l)-1] == escape
		if cont {
			l = strings.TrimSpace(l[:len(l)-1])
		}
		if cur == nil {
			cur = &instruction{line: i + 1}
		}
		if buf.Len() > 0 {
			buf.WriteByte(' ')
		}
		buf.WriteString(l)
		if !cont {
			f := strings.SplitN(buf.String(), " ", 2)
			cur.cmd = strings.ToUpper(f[0])
			if len(f) == 2 {
				cur.args = strings.TrimSpace(f[1])
			}
			out = append(out, *cur)
			cur = nil
			buf.Reset()
		}
	}
	if cur != nil && buf.Len() > 0 {
		f := strings.SplitN(buf.String(), " ", 2)
		cur.cmd = strings.ToUpper(f[0])
		if len(f) == 2 {
			cur.args = strings.TrimSpace(f[1])
		}
		out = append(out, *cur)
	}
	return out
}

func short(s string) string {
	if len(s) > 120 {
		return s[:117] + "..."
	}
	return s
}

// splitFlags returns the words of an ADD or COPY (JSON or shell form) after
// its --flags, and the flags.
func splitFlags(args string) ([]string, map[string]string) {
	flags := map[string]string{}
	fields := strings.Fields(args)
	for len(fields) > 0 && strings.HasPrefix(fields[0], "--") {
		k, v, _ := strings.Cut(fields[0][2:], "=")
		flags[strings.ToLower(k)] = v
		fields = fields[1:]
	}
	rest := strings.TrimSpace(strings.Join(fields, " "))
	if strings.HasPrefix(rest, "[") {
		var words []string
		if json.Unmarshal([]byte(rest), &words) == nil {
			return words, flags
		}
	}
	for i, f := range fields {
		fields[i] = unquote(f)
	}
	return fields, flags
}

// flagsOff drops leading --flags (FROM --platform=...).
func flagsOff(words []string) []string {
	for len(words) > 0 && strings.HasPrefix(words[0], "--") {
		words = words[1:]
	}
	return words
}

func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' || s[0] == '\'') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1]
	}
	return s
}

// envPairs reads ENV k=v k2=v2, or the old ENV k v.
func envPairs(args string) map[string]string {
	out := map[string]string{}
	fields := strings.Fields(args)
	if len(fields) > 0 && !strings.Contains(fields[0], "=") {
		k, v, _ := strings.Cut(strings.TrimSpace(args), " ")
		out[k] = strings.TrimSpace(v)
		return out
	}
	for _, f := range fields {
		if k, v, ok := strings.Cut(f, "="); ok {
			out[k] = unquote(v)
		}
	}
	return out
}

// expandVars substitutes $NAME, ${NAME}, ${NAME:-word} and ${NAME:+word} from
// vars. unknown names the first variable whose value the Dockerfile does
// not set (it would come from a build argument or the base image).
func expandVars(s string, vars map[string]*string) (out, unknown string) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\\' && i+1 < len(s) && s[i+1] == '$' {
			b.WriteByte('$')
			i++
			continue
		}
		if c != '$' || i+1 >= len(s) {
			b.WriteByte(c)
			continue
		}
		var name, mod, word string
		if s[i+1] == '{' {
			end := strings.IndexByte(s[i:], '}')
			if end < 0 {
				b.WriteString(s[i:])
				break
			}
			inner := s[i+2 : i+end]
			i += end
			name = inner
			if k := strings.Index(inner, ":"); k >= 0 && k+1 < len(inner) {
				name, mod, word = inner[:k], inner[k:k+2], inner[k+2:]
			}
		} else {
			j := i + 1
			for j < len(s) && (s[j] == '_' || unicode.IsLetter(rune(s[j])) || unicode.IsDigit(rune(s[j]))) {
				j++
			}
			if j == i+1 {
				b.WriteByte(c)
				continue
			}
			name = s[i+1 : j]
			i = j - 1
		}
		v, known := vars[name]
		switch {
		case mod == ":-" && (!known || v == nil || *v == ""):
			if known && v == nil && unknown == "" { // argUnset is empty: no build arguments are passed
				unknown = name
			}
			b.WriteString(word)
		case mod == ":+":
			if !known || v == nil {
				if unknown == "" {
					unknown = name
				}
			} else if *v != "" {
				b.WriteString(word)
			}
		case !known || v == nil || v == argUnset:
			if unknown == "" {
				unknown = name
			}
		default:
			b.WriteString(*v)
		}
	}
	return b.String(), unknown
}
