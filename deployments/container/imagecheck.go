package container

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/keelson-dev/keelson/deployments/container/dockerfile"
	"github.com/keelson-dev/keelson/deployments/container/internal/egress"
	"github.com/keelson-dev/keelson/deployments/internal/gitclone"
	"github.com/keelson-dev/keelson/deployments/internal/runlog"
)

// The engine does two things for a build on the host's own network, where
// the egress rules on Keelson's bridges cannot see them: it downloads the
// URL sources of ADD, and it pulls the images FROM and COPY --from name.
// So a Dockerfile is read (package dockerfile) before it is sent: ADD from a
// URL is refused, and so is an image whose registry is this host or a
// private address.
//
// Every image on the engine is one image store: a Dockerfile naming
// another project's image (by Keelson's name for it, by another tag of it,
// or by a prefix of its id, which the classic builder resolves locally)
// would build on that project's files. The image policy of
// checkRepoDockerfile refuses those too.

// localImageProblem refuses a local image that Keelson built (for any
// project, on any server sharing the engine), or whose ONBUILD triggers
// copy from an image by a name dockerfile.RefProblem refuses.
func localImageProblem(res client.ImageInspectResult) string {
	if res.Config == nil {
		return ""
	}
	if res.Config.Labels[LabelKeelson] != "" || res.Config.Labels[LabelProject] != "" {
		return "it is an image Keelson built for a project; a build may only start from public images"
	}
	return dockerfile.OnBuildCopyProblem(res.Config.OnBuild)
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
		if a = a.Unmap(); !egress.Public(a) && !allowed(a) {
			return fmt.Errorf("the image's registry %s is on a private address (%s), which builds may not reach "+
				"(KEELSON_EGRESS_ALLOW_CIDRS allows named private networks)", host, a)
		}
	}
	return nil
}

// checkRepoDockerfile refuses a repository's Dockerfile (its text) that
// builds on an image of Keelson's own or of another project (always), or
// that makes the engine fetch from this host's network (with the egress
// fenced): dockerfile.Check with the runtime's image policy. The presets'
// images (Config.Images, named exactly as configured) are allowed whatever
// their name: every generated Dockerfile builds on them, and where there is
// no registry they are scripts/local-images.sh's keelson/*:local. A base
// image the engine does not have is pulled first, so that its labels and
// ONBUILD triggers are checked before they run.
func (r *Runtime) checkRepoDockerfile(ctx context.Context, text string, out *runlog.Output) error {
	if emptyDockerfile(text) {
		// Checked here: the image's LABEL line is appended before the
		// engine sees it, and the engine would then answer only "no build
		// stage in current context".
		return errors.New("the repository's Dockerfile is empty: it needs at least a FROM instruction")
	}
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
			return dockerfile.CheckOnBuild(ref, onBuild(res))
		}
		return nil
	}
	return dockerfile.Check("Dockerfile", text, func(ref string) error {
		if p := dockerfile.RefProblem(ref); p != "" && !r.cfg.Images.has(ref) {
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
		if err := privateRegistry(dockerfile.RegistryHost(ref), lookup, r.cfg.Egress.Allowed); err != nil {
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

// emptyDockerfile reports whether text holds no instruction (only blank
// lines, comments and parser directives).
func emptyDockerfile(text string) bool {
	for _, l := range strings.Split(text, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}
