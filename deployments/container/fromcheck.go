package container

import (
	"regexp"
	"strings"

	"github.com/moby/moby/client"
)

// Every image on the engine is one image store: a Dockerfile naming
// another project's image (by Keelson's name for it, by another tag of it,
// or by a prefix of its id, which the classic builder resolves locally)
// would build on that project's files. The image policy of
// checkRepoDockerfile refuses those before the build starts.

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

// localID is what the engine may resolve as (a prefix of) a local image id.
var localID = regexp.MustCompile(`^(sha256:)?[0-9a-f]{1,64}$`)

// imageRefProblem says why ref must not be built on, or "".
func imageRefProblem(ref string) string {
	r := strings.ToLower(ref)
	if strings.Contains(r, "$") {
		return "its image name depends on a variable this build cannot set; write the name out"
	}
	if localID.MatchString(r) {
		return "it names an image by a local image id; name it by repository and tag or digest"
	}
	for _, p := range []string{"docker.io/", "index.docker.io/", "registry-1.docker.io/"} {
		r = strings.TrimPrefix(r, p)
	}
	if strings.HasPrefix(r, "keelson/") || strings.HasPrefix(r, "library/keelson/") {
		return "keelson/ images are this server's builds of projects; a build may only start from public images"
	}
	return ""
}

// localImageProblem refuses a local image that Keelson built (for any
// project, on any server sharing the engine), or whose ONBUILD triggers
// copy from an image by a name imageRefProblem refuses.
func localImageProblem(res client.ImageInspectResult) string {
	if res.Config == nil {
		return ""
	}
	if res.Config.Labels[LabelKeelson] != "" || res.Config.Labels[LabelProject] != "" {
		return "it is an image Keelson built for a project; a build may only start from public images"
	}
	for _, t := range res.Config.OnBuild {
		for _, in := range parseDockerfile(t) {
			if in.cmd != "COPY" && in.cmd != "ADD" {
				continue
			}
			if _, flags := splitFlags(in.args); flags["from"] != "" && imageRefProblem(flags["from"]) != "" {
				return "its ONBUILD trigger copies from " + flags["from"] + ", which a build may not use"
			}
		}
	}
	return ""
}
