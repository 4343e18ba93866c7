package container

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"

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

// imagePolicy decides whether the engine may fetch an image (see
// checkDockerfile): nil when it may.
type imagePolicy func(ref string) error

// checkDockerfile refuses what would make the engine fetch from this host's
// network: an ADD (or ONBUILD ADD) whose source is a URL, and FROM or COPY
// --from images that images refuses. name is the Dockerfile's name in
// messages.
func checkDockerfile(name, text string, images imagePolicy) error {
	global := map[string]*string{} // ARGs before the first FROM
	var stage map[string]*string   // ARGs and ENVs of the current stage
	stages := map[string]bool{}
	inStage := false
	for _, in := range parseDockerfile(text) {
		where := fmt.Sprintf("%s line %d (%s)", name, in.line, short(in.cmd+" "+in.args))
		vars := stage
		if !inStage {
			vars = global
		}
		cmd, args := in.cmd, in.args
		if cmd == "ONBUILD" {
			c, a, _ := strings.Cut(strings.TrimSpace(args), " ")
			cmd, args = strings.ToUpper(c), strings.TrimSpace(a)
		}
		switch cmd {
		case "ARG":
			for _, w := range strings.Fields(args) {
				k, v, ok := strings.Cut(w, "=")
				switch {
				case ok:
					v, _ = expandVars(unquote(v), vars)
					vars[k] = &v
				case inStage && global[k] != nil:
					vars[k] = global[k] // a global default, re-declared in the stage
				default:
					vars[k] = nil // no default: the value would come from outside
				}
			}
		case "ENV":
			if !inStage {
				continue
			}
			for k, v := range envPairs(args) {
				v, _ = expandVars(v, vars)
				vars[k] = &v
			}
		case "FROM":
			if in.cmd == "ONBUILD" {
				continue
			}
			words := flagsOff(strings.Fields(args))
			if len(words) == 0 {
				continue
			}
			image, unknown := expandVars(words[0], global)
			if unknown != "" {
				return fmt.Errorf("%s: the image name uses $%s, which the Dockerfile gives no default; name the image in full", where, unknown)
			}
			if !stages[strings.ToLower(image)] && !strings.EqualFold(image, "scratch") {
				if err := images(image); err != nil {
					return fmt.Errorf("%s: %w", where, err)
				}
			}
			if len(words) == 3 && strings.EqualFold(words[1], "as") {
				stages[strings.ToLower(words[2])] = true
			}
			inStage, stage = true, map[string]*string{}
		case "ADD", "COPY":
			words, flags := splitFlags(args)
			if from, ok := flags["from"]; ok && cmd == "COPY" && in.cmd != "ONBUILD" {
				from, _ = expandVars(from, vars)
				if _, err := strconv.Atoi(from); err != nil && !stages[strings.ToLower(from)] {
					if err := images(from); err != nil {
						return fmt.Errorf("%s: %w", where, err)
					}
				}
			}
			if cmd != "ADD" || len(words) < 2 {
				continue
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
			if known && v == nil && unknown == "" {
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
		case !known || v == nil:
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

// checkRepoDockerfile reads the repository's Dockerfile at src and refuses
// what the engine would fetch from this host's network (checkDockerfile).
// A base image the engine does not have is pulled first, so that its ONBUILD
// triggers are checked before they run. Open egress checks nothing.
func (r *Runtime) checkRepoDockerfile(ctx context.Context, src string, out *runlog.Output) error {
	if r.cfg.Egress.Open {
		return nil
	}
	text, err := os.ReadFile(filepath.Join(src, "Dockerfile"))
	if err != nil {
		return fmt.Errorf("reading the Dockerfile: %w", err)
	}
	lookup := func(host string) ([]netip.Addr, error) {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return gitclone.LookupIP(lctx, host)
	}
	return checkDockerfile("Dockerfile", string(text), func(ref string) error {
		res, err := r.docker.ImageInspect(ctx, ref)
		if err == nil { // the engine has it: nothing is fetched
			return checkOnBuild(ref, onBuild(res))
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
			return checkOnBuild(ref, onBuild(res))
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
