// Package dockerfile reads a repository's Dockerfile the way Docker's
// classic builder does, and refuses before the build what the engine would
// fetch from the build server's own network or what would build on an image
// a build may not use: ADD from a URL, and FROM or COPY --from images that
// the caller's Policy refuses (RefProblem is the part of it that needs no
// engine).
package dockerfile

import (
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"

	"github.com/distribution/reference"
)

// Policy decides whether a build may start from, or copy from, an
// image (see Check): nil when it may.
type Policy func(ref string) error

// Check reads a Dockerfile the way the classic builder does and
// refuses, naming the line: an ADD (or ONBUILD ADD) whose source is a URL,
// and any image a FROM or COPY --from builds on that images refuses (stages
// and scratch are not images). name is the Dockerfile's name in messages.
// No build arguments are ever passed, so a global ARG without a default is
// empty where a ${NAME:-word} gives a word, and unknown where it is used bare.
func Check(name, text string, images Policy) error {
	w := dockerfileWalk{name: name, images: images, global: map[string]*string{}, stages: map[string]bool{}}
	for _, in := range parseDockerfile(text) {
		if err := w.step(in); err != nil {
			return err
		}
	}
	return nil
}

// argUnset is the value of a global ARG without a default.
var argUnset = new(string)

// dockerfileWalk is Check's state between instructions.
type dockerfileWalk struct {
	name    string
	images  Policy
	global  map[string]*string // ARGs before the first FROM
	stage   map[string]*string // ARGs and ENVs of the current stage
	stages  map[string]bool    // stage names, lower case
	nstages int
}

func (w *dockerfileWalk) vars() map[string]*string {
	if w.nstages == 0 {
		return w.global
	}
	return w.stage
}

func (w *dockerfileWalk) step(in instruction) error {
	where := fmt.Sprintf("%s line %d (%s)", w.name, in.line, short(in.cmd+" "+in.args))
	cmd, args := in.cmd, in.args
	if cmd == "ONBUILD" {
		c, a, _ := strings.Cut(strings.TrimSpace(args), " ")
		cmd, args = strings.ToUpper(c), strings.TrimSpace(a)
	}
	switch cmd {
	case "ARG":
		w.arg(args)
	case "ENV":
		if w.nstages > 0 {
			for k, v := range envPairs(args) {
				v, _ = expandVars(v, w.stage)
				w.stage[k] = &v
			}
		}
	case "FROM":
		if in.cmd != "ONBUILD" {
			return w.from(in.line, args, where)
		}
	case "ADD", "COPY":
		words, flags := splitFlags(args)
		if from, ok := flags["from"]; ok && in.cmd != "ONBUILD" {
			if err := w.copyFrom(in.line, cmd, from); err != nil {
				return err
			}
		}
		if cmd == "ADD" {
			return addSources(words, w.vars(), where)
		}
	}
	return nil
}

func (w *dockerfileWalk) arg(args string) {
	vars := w.vars()
	for _, a := range strings.Fields(args) {
		k, v, ok := strings.Cut(a, "=")
		switch {
		case ok:
			v, _ = expandVars(unquote(v), vars)
			vars[k] = &v
		case w.nstages == 0:
			vars[k] = argUnset
		case w.global[k] != nil:
			vars[k] = w.global[k] // a global default, re-declared in the stage
		default:
			vars[k] = nil // no default: the value would come from outside
		}
	}
}

// from checks a FROM's image and starts a stage.
func (w *dockerfileWalk) from(line int, args, where string) error {
	words := flagsOff(strings.Fields(args))
	if len(words) == 0 {
		return nil
	}
	image, unknown := expandVars(words[0], w.global)
	if unknown != "" {
		return fmt.Errorf("%s: the image name uses $%s, which the Dockerfile gives no default; name the image in full", where, unknown)
	}
	if !w.stages[strings.ToLower(image)] && !strings.EqualFold(image, "scratch") {
		if err := w.images(image); err != nil {
			return fmt.Errorf("%s line %d (FROM %s): %w", w.name, line, image, err)
		}
	}
	if len(words) == 3 && strings.EqualFold(words[1], "as") {
		w.stages[strings.ToLower(words[2])] = true
	}
	w.nstages++
	w.stage = map[string]*string{}
	return nil
}

// copyFrom checks the image of a COPY --from that names no earlier stage
// (by name, or by an index the builder has).
func (w *dockerfileWalk) copyFrom(line int, cmd, from string) error {
	from, _ = expandVars(from, w.vars())
	if w.stages[strings.ToLower(from)] {
		return nil
	}
	if n, err := strconv.Atoi(from); err == nil && n >= 0 && n < w.nstages {
		return nil
	}
	if err := w.images(from); err != nil {
		return fmt.Errorf("%s line %d (%s --from %s): %w", w.name, line, cmd, from, err)
	}
	return nil
}

// addSources refuses an ADD source the engine would fetch.
func addSources(words []string, vars map[string]*string, where string) error {
	if len(words) < 2 {
		return nil
	}
	for _, src := range words[:len(words)-1] {
		s, unknown := expandVars(src, vars)
		if unknown != "" {
			return fmt.Errorf("%s: ADD's source uses $%s, which the Dockerfile does not set; name the file, or use COPY", where, unknown)
		}
		if remoteSource(s) {
			return fmt.Errorf("%s: ADD cannot fetch a URL (%s): the build server would download it from its own network; "+
				"download it in a RUN step (curl, wget) or commit the file and COPY it", where, short(s))
		}
	}
	return nil
}

// CheckOnBuild checks an image's ONBUILD triggers (they run in a build FROM
// the image) for ADD from a URL.
func CheckOnBuild(image string, triggers []string) error {
	for _, t := range triggers {
		cmd, args, _ := strings.Cut(strings.TrimSpace(t), " ")
		if !strings.EqualFold(cmd, "ADD") {
			continue
		}
		words, _ := splitFlags(args)
		for _, src := range words[:max(len(words)-1, 0)] {
			if remoteSource(src) || strings.Contains(src, "$") {
				return fmt.Errorf("base image %s has an ONBUILD ADD that fetches a URL (%s); it cannot be built on", image, short(src))
			}
		}
	}
	return nil
}

// remoteSource is a source the engine would fetch: a URL or a git remote.
func remoteSource(s string) bool {
	return strings.Contains(s, "://") || strings.HasPrefix(strings.ToLower(s), "git@")
}

// RegistryHost is the registry an image reference is pulled from ("" for
// Docker Hub or a name the engine will refuse anyway).
func RegistryHost(ref string) string {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return ""
	}
	d := reference.Domain(named)
	if d == "docker.io" {
		return ""
	}
	if h, _, err := net.SplitHostPort(d); err == nil {
		return strings.Trim(h, "[]")
	}
	return strings.Trim(d, "[]")
}

// localID is what the engine may resolve as (a prefix of) a local image id.
var localID = regexp.MustCompile(`^(sha256:)?[0-9a-f]{1,64}$`)

// RefProblem says why ref must not be built on, or "".
func RefProblem(ref string) string {
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

// OnBuildCopyProblem says why an image whose ONBUILD triggers are triggers
// must not be built on: a trigger copies from an image RefProblem refuses.
// "" when none does.
func OnBuildCopyProblem(triggers []string) string {
	for _, t := range triggers {
		for _, in := range parseDockerfile(t) {
			if in.cmd != "COPY" && in.cmd != "ADD" {
				continue
			}
			if _, flags := splitFlags(in.args); flags["from"] != "" && RefProblem(flags["from"]) != "" {
				return "its ONBUILD trigger copies from " + flags["from"] + ", which a build may not use"
			}
		}
	}
	return ""
}
