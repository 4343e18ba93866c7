package container

import (
	"cmp"
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
)

// Every image on the engine is one image store: a Dockerfile naming
// another project's image (by Keelson's name for it, by another tag of it,
// or by a prefix of its id, which the classic builder resolves locally)
// would build on that project's files. checkImageRefs refuses those before
// the build starts.

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

var argRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?[-+]([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)`)

// expand replaces $NAME, ${NAME} and ${NAME:-default} with the values of
// the Dockerfile's own ARG defaults (no build arguments are ever passed).
func expand(s string, args map[string]string) string {
	return argRef.ReplaceAllStringFunc(s, func(m string) string {
		sub := argRef.FindStringSubmatch(m)
		name := cmp.Or(sub[1], sub[3])
		if v, ok := args[name]; ok && v != "" {
			if strings.Contains(m, ":+") || strings.Contains(m, "}+") {
				return sub[2]
			}
			return v
		}
		if strings.Contains(m, "-") {
			return sub[2]
		}
		return ""
	})
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

// imageRef is an image a Dockerfile builds on: a FROM that is not a stage,
// or a COPY/ADD --from that is not a stage.
type imageRef struct {
	line int
	what string // FROM, COPY --from
	ref  string // after the Dockerfile's own ARG defaults
}

// imageRefs lists the images dockerfile builds on.
func imageRefs(dockerfile string) []imageRef {
	args := map[string]string{}
	stages := map[string]bool{}
	nstages := 0
	var refs []imageRef
	for _, in := range parseDockerfile(dockerfile) {
		switch in.cmd {
		case "ARG":
			if nstages == 0 { // only ARGs before the first FROM reach FROM lines
				for _, a := range strings.Fields(in.args) {
					k, v, _ := strings.Cut(a, "=")
					args[k] = strings.Trim(v, `"'`)
				}
			}
		case "FROM":
			f := strings.Fields(in.args)
			var image, name string
			for i := 0; i < len(f); i++ {
				if strings.HasPrefix(f[i], "--") {
					continue
				}
				image = f[i]
				if i+2 < len(f) && strings.EqualFold(f[i+1], "AS") {
					name = strings.ToLower(f[i+2])
				}
				break
			}
			image = expand(image, args)
			if !stages[strings.ToLower(image)] && !strings.EqualFold(image, "scratch") {
				refs = append(refs, imageRef{in.line, "FROM", image})
			}
			nstages++
			if name != "" {
				stages[name] = true
			}
		case "COPY", "ADD":
			for _, f := range strings.Fields(in.args) {
				if !strings.HasPrefix(f, "--") {
					break
				}
				v, ok := strings.CutPrefix(strings.ToLower(f), "--from=")
				if !ok || stages[v] {
					continue
				}
				if n, err := strconv.Atoi(v); err == nil && n >= 0 && n < nstages {
					continue
				}
				refs = append(refs, imageRef{in.line, in.cmd + " --from", v})
			}
		}
	}
	return refs
}

// checkImageRefs refuses a Dockerfile that starts a stage FROM, or copies
// --from, an image of Keelson's own or of another project. Names of the
// engine's local images are looked up too: a tag someone gave a Keelson
// build still carries its project label.
func (r *Runtime) checkImageRefs(ctx context.Context, dockerfile string) error {
	for _, ref := range imageRefs(dockerfile) {
		problem := imageRefProblem(ref.ref)
		if problem == "" {
			problem = r.localImageProblem(ctx, ref.ref)
		}
		if problem != "" {
			return fmt.Errorf("the Dockerfile cannot be built: line %d (%s %s): %s", ref.line, ref.what, ref.ref, problem)
		}
	}
	return nil
}

// localImageProblem refuses a local image that Keelson built (for any
// project, on any server sharing the engine), or whose ONBUILD triggers
// copy from an image by a name the checks above refuse.
func (r *Runtime) localImageProblem(ctx context.Context, ref string) string {
	res, err := r.docker.ImageInspect(ctx, ref)
	if err != nil {
		if !cerrdefs.IsNotFound(err) {
			r.cfg.Logger.Warn("container: looking up a base image", "image", ref, "err", err)
		}
		return "" // not local: the engine pulls it from its registry
	}
	if res.Config != nil {
		if res.Config.Labels[LabelKeelson] != "" || res.Config.Labels[LabelProject] != "" {
			return "it is an image Keelson built for a project; a build may only start from public images"
		}
		for _, t := range res.Config.OnBuild {
			for _, in := range parseDockerfile(t) {
				if in.cmd != "COPY" && in.cmd != "ADD" {
					continue
				}
				for _, f := range strings.Fields(in.args) {
					if v, ok := strings.CutPrefix(strings.ToLower(f), "--from="); ok && imageRefProblem(v) != "" {
						return "its ONBUILD trigger copies from " + v + ", which a build may not use"
					}
				}
			}
		}
	}
	return ""
}
