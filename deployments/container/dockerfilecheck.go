package container

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
	"unicode"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/moby/moby/client"

	"github.com/keelson-dev/keelson/deployments/internal/gitclone"
	"github.com/keelson-dev/keelson/deployments/internal/runlog"
)

// The engine does two things for a build on the host's own network, where
// the egress rules on Keelson's bridges cannot see them: it downloads the
// URL sources of ADD, and it pulls the images FROM and COPY --from name.
// So a Dockerfile is read (parseDockerfile, fromcheck.go) before it is sent:
// ADD from a URL is refused, and so is an image whose registry is this host
// or a private address.

// imagePolicy decides whether a build may start from, or copy from, an
// image (see checkDockerfile): nil when it may.
type imagePolicy func(ref string) error

// checkDockerfile reads a Dockerfile the way the classic builder does and
// refuses, naming the line: an ADD (or ONBUILD ADD) whose source is a URL,
// and any image a FROM or COPY --from builds on that images refuses (stages
// and scratch are not images). name is the Dockerfile's name in messages.
// No build arguments are ever passed, so a global ARG without a default is
// empty where a ${NAME:-word} gives a word, and unknown where it is used bare.
func checkDockerfile(name, text string, images imagePolicy) error {
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

// dockerfileWalk is checkDockerfile's state between instructions.
type dockerfileWalk struct {
	name    string
	images  imagePolicy
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

// checkOnBuild checks an image's ONBUILD triggers (they run in a build FROM
// the image) for ADD from a URL.
func checkOnBuild(image string, triggers []string) error {
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

// registryHost is the registry an image reference is pulled from ("" for
// Docker Hub or a name the engine will refuse anyway).
func registryHost(ref string) string {
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

// privateRegistry says why the engine must not pull from host: it is this
// machine or resolves to an address the egress policy does not allow.
func privateRegistry(host string, lookup func(string) ([]netip.Addr, error), allowed func(netip.Addr) bool) error {
	if host == "" {
		return nil
	}
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return fmt.Errorf("the image's registry %s is this server; name an image on a public registry", host)
	}
	addrs := []netip.Addr{}
	if ip, err := netip.ParseAddr(host); err == nil {
		addrs = append(addrs, ip.Unmap())
	} else if lookup != nil {
		got, err := lookup(host)
		if err != nil {
			return nil // the engine cannot resolve it either; its pull fails
		}
		addrs = got
	}
	for _, a := range addrs {
		if a = a.Unmap(); !egressPublic(a) && !allowed(a) {
			return fmt.Errorf("the image's registry %s is on a private address (%s), which builds may not reach "+
				"(KEELSON_EGRESS_ALLOW_CIDRS allows named private networks)", host, a)
		}
	}
	return nil
}

// checkRepoDockerfile refuses a repository's Dockerfile (its text) that
// builds on an image of Keelson's own or of another project (always), or
// that makes the engine fetch from this host's network (with the egress
// fenced): checkDockerfile with the runtime's image policy. A base image
// the engine does not have is pulled first, so that its labels and ONBUILD
// triggers are checked before they run.
func (r *Runtime) checkRepoDockerfile(ctx context.Context, text string, out *runlog.Output) error {
	fenced := !r.cfg.Egress.Open
	lookup := func(host string) ([]netip.Addr, error) {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return gitclone.LookupIP(lctx, host)
	}
	local := func(ref string, res client.ImageInspectResult) error {
		if p := localImageProblem(res); p != "" {
			return errors.New(p)
		}
		if fenced {
			return checkOnBuild(ref, onBuild(res))
		}
		return nil
	}
	return checkDockerfile("Dockerfile", text, func(ref string) error {
		if p := imageRefProblem(ref); p != "" {
			return errors.New(p)
		}
		res, err := r.docker.ImageInspect(ctx, ref)
		if err == nil { // the engine has it: nothing is fetched
			return local(ref, res)
		}
		if !cerrdefs.IsNotFound(err) {
			r.cfg.Logger.Warn("container: looking up a base image", "image", ref, "err", err)
		}
		if !fenced {
			return nil // the build pulls it
		}
		if err := privateRegistry(registryHost(ref), lookup, r.cfg.Egress.allowed); err != nil {
			return err
		}
		out.System("pulling " + ref)
		pull, err := r.docker.ImagePull(ctx, ref, client.ImagePullOptions{})
		if err != nil {
			return nil // the build's own pull says why, in its words
		}
		if err := pull.Wait(ctx); err != nil {
			return nil
		}
		if res, err = r.docker.ImageInspect(ctx, ref); err == nil {
			return local(ref, res)
		}
		return nil
	})
}

func onBuild(res client.ImageInspectResult) []string {
	if res.Config == nil {
		return nil
	}
	return res.Config.OnBuild
}
