package process

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/keelson-dev/keelson/deployments"
)

var (
	shaPattern    = regexp.MustCompile(`^[0-9a-fA-F]{4,64}$`)
	branchPattern = regexp.MustCompile(`^[A-Za-z0-9._/+@-]{1,255}$`)
)

// repoSource is a validated repository location.
type repoSource struct {
	url    string // what git fetches from
	origin string // scheme://host[:port]/ for https, "" for local repos
	host   string // the URL's host name (no port) for network repos
	port   string // the URL's port, defaulted from the scheme
	local  bool
}

// parseRepo validates a job's repository URL: https always; http://, file://
// and absolute paths only when local repos are allowed.
func parseRepo(raw string, allowLocal bool) (repoSource, error) {
	if raw == "" {
		return repoSource{}, errors.New("repository URL is empty")
	}
	if strings.ContainsAny(raw, "\x00\r\n") {
		return repoSource{}, errors.New("repository URL contains control characters")
	}
	if filepath.IsAbs(raw) {
		if !allowLocal {
			return repoSource{}, errors.New("local repository paths are not allowed on this server (set KEELSON_ALLOW_LOCAL_REPOS=true to allow them)")
		}
		return repoSource{url: filepath.Clean(raw), local: true}, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return repoSource{}, errors.New("repository URL is not supported; use https://")
	}
	switch strings.ToLower(u.Scheme) {
	case "https":
		if u.Host == "" {
			return repoSource{}, errors.New("repository URL has no host")
		}
		if u.User != nil {
			return repoSource{}, errors.New("repository URL must not contain credentials; connect the code host instead")
		}
		return repoSource{url: u.String(), origin: "https://" + u.Host + "/", host: u.Hostname(), port: portOr(u.Port(), "443")}, nil
	case "http":
		// Plain http only in dev and test set-ups (a local git server), like file://.
		if !allowLocal {
			return repoSource{}, errors.New("http:// repositories are not allowed on this server; use https:// (KEELSON_ALLOW_LOCAL_REPOS=true allows http for development)")
		}
		if u.Host == "" {
			return repoSource{}, errors.New("repository URL has no host")
		}
		if u.User != nil {
			return repoSource{}, errors.New("repository URL must not contain credentials; connect the code host instead")
		}
		return repoSource{url: u.String(), origin: "http://" + u.Host + "/", host: u.Hostname(), port: portOr(u.Port(), "80")}, nil
	case "file":
		if !allowLocal {
			return repoSource{}, errors.New("file:// repositories are not allowed on this server (set KEELSON_ALLOW_LOCAL_REPOS=true to allow them)")
		}
		if u.Host != "" && u.Host != "localhost" || !filepath.IsAbs(u.Path) {
			return repoSource{}, errors.New("file:// repository URL must name an absolute local path")
		}
		return repoSource{url: "file://" + filepath.Clean(u.Path), local: true}, nil
	default:
		return repoSource{}, fmt.Errorf("repository URL scheme %q is not supported; use https://", u.Scheme)
	}
}

// gitEnv is the whole environment of a git command: no inherited variables, no
// system or global config, no credential helper, no prompt, and only the
// allowed transports. The credential, if any, is an extra header scoped to the
// repository's origin, passed as environment config (never argv).
func (r *Runtime) gitEnv(ws workspace, src repoSource, auth *deployments.GitAuth, extra ...[2]string) []string {
	protocols := "https"
	if r.cfg.AllowLocalRepos {
		protocols = "https:http:file"
	}
	env := []string{
		"PATH=" + r.cfg.Path,
		"HOME=" + ws.home,
		"TMPDIR=" + ws.tmp,
		"LC_ALL=C",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_ALLOW_PROTOCOL=" + protocols,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_ASKPASS=",
		"SSH_ASKPASS=",
	}
	if r.cfg.GitCAFile != "" {
		env = append(env, "GIT_SSL_CAINFO="+r.cfg.GitCAFile)
	}
	cfg := [][2]string{
		{"credential.helper", ""},
		{"core.hooksPath", "/dev/null"},
		{"advice.detachedHead", "false"},
		{"init.defaultBranch", "main"},
		{"http.followRedirects", "initial"},
	}
	cfg = append(cfg, extra...)
	if auth != nil && src.origin != "" {
		cfg = append(cfg, [2]string{"http." + src.origin + ".extraHeader", "Authorization: Basic " + basicToken(auth)})
	}
	env = append(env, "GIT_CONFIG_COUNT="+strconv.Itoa(len(cfg)))
	for i, kv := range cfg {
		env = append(env, fmt.Sprintf("GIT_CONFIG_KEY_%d=%s", i, kv[0]), fmt.Sprintf("GIT_CONFIG_VALUE_%d=%s", i, kv[1]))
	}
	return env
}

// clone fetches the job's commit into ws.src and returns the commit it checked out.
func (r *Runtime) clone(ctx context.Context, job deployments.Job, ws workspace, out *output) (string, error) {
	src, err := parseRepo(job.RepoURL, r.cfg.AllowLocalRepos)
	if err != nil {
		return "", err
	}
	if job.Branch != "" && (!branchPattern.MatchString(job.Branch) || strings.HasPrefix(job.Branch, "-") ||
		strings.Contains(job.Branch, "..")) {
		return "", fmt.Errorf("branch %q is not a valid branch name", job.Branch)
	}
	if job.CommitSHA != "" && !shaPattern.MatchString(job.CommitSHA) {
		return "", fmt.Errorf("commit %q is not a hexadecimal commit id", job.CommitSHA)
	}
	if err := removeAll(ws.src); err != nil {
		return "", fmt.Errorf("clearing the workspace: %w", err)
	}
	var pin [][2]string
	if !src.local && !r.cfg.AllowLocalRepos && !r.cfg.AllowPrivateHosts {
		if pin, err = r.pinPublic(ctx, src); err != nil {
			return "", err
		}
	}
	env := r.gitEnv(ws, src, job.GitAuth, pin...)
	git := func(args ...string) error {
		cmd := exec.Command(r.cfg.GitPath, args...)
		cmd.Dir, cmd.Env = ws.root, env
		return r.runProc(ctx, cmd, out, job.DeploymentID, "git")
	}
	ref := "HEAD"
	switch {
	case job.CommitSHA != "":
		ref = strings.ToLower(job.CommitSHA)
	case job.Branch != "":
		ref = "refs/heads/" + job.Branch
	}
	what := job.Branch
	if what == "" {
		what = "default branch"
	}
	if job.CommitSHA != "" {
		what += " at " + job.CommitSHA
	}
	out.system(fmt.Sprintf("fetching %s (%s)", src.url, what))
	if err := git("init", "-q", "src"); err != nil {
		return "", fmt.Errorf("git init: %w", err)
	}
	ws2 := func(args ...string) []string { return append([]string{"-C", "src"}, args...) }
	if err := git(ws2("remote", "add", "origin", src.url)...); err != nil {
		return "", fmt.Errorf("git remote add: %w", err)
	}
	fetchErr := git(ws2("fetch", "-q", "--depth", "1", "--no-tags", "origin", ref)...)
	checkout := "FETCH_HEAD"
	if fetchErr != nil && job.CommitSHA != "" && ctx.Err() == nil {
		// Not every server lets a client want a bare commit (or an abbreviated
		// one): fetch the branches and look for it.
		out.system("the server did not serve the commit directly; fetching all branches")
		fetchErr = git(ws2("fetch", "-q", "--no-tags", "origin", "+refs/heads/*:refs/remotes/origin/*")...)
		checkout = ref
	}
	if fetchErr != nil {
		if ctx.Err() != nil {
			return "", fetchErr
		}
		return "", fmt.Errorf("git fetch of %s (%s) failed: %w\n%s", src.url, what, fetchErr, out.Tail())
	}
	if err := git(ws2("checkout", "-q", "--detach", checkout)...); err != nil {
		return "", fmt.Errorf("git checkout %s: %w\n%s", checkout, err, out.Tail())
	}
	cmd := exec.CommandContext(ctx, r.cfg.GitPath, "-C", "src", "rev-parse", "HEAD")
	cmd.Dir, cmd.Env = ws.root, env
	head, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git rev-parse HEAD: %w", err)
	}
	commit := strings.TrimSpace(string(head))
	if job.CommitSHA != "" && !strings.HasPrefix(commit, strings.ToLower(job.CommitSHA)) {
		return "", fmt.Errorf("checked out %s, not the requested commit %s", commit, job.CommitSHA)
	}
	out.system("checked out commit " + commit)
	return commit, nil
}

// basicToken is the base64 of an HTTP basic credential.
func basicToken(a *deployments.GitAuth) string {
	return base64.StdEncoding.EncodeToString([]byte(a.Username + ":" + a.Password))
}

func portOr(p, def string) string {
	if p == "" {
		return def
	}
	return p
}

// pinPublic is the git config that keeps a clone on a public address: the
// host is resolved once, every address it resolves to must be public
// (not loopback, private, link-local, CGNAT, unspecified or multicast: a
// repository URL must not reach into the server's own network unless local
// repos or private hosts are allowed), and git is pinned to the address
// checked (no DNS rebinding in between) with redirects off (no hop to another
// host). A host that is an IP literal (https://203.0.113.7/, https://[2001:db8::1]/)
// is checked but needs no pin: curl connects to the literal without DNS, and
// its resolve list could not even name an IPv6 literal host.
func (r *Runtime) pinPublic(ctx context.Context, src repoSource) ([][2]string, error) {
	noRedirects := [2]string{"http.followRedirects", "false"}
	if ip, err := netip.ParseAddr(src.host); err == nil {
		if !publicAddr(ip.Unmap()) {
			return nil, fmt.Errorf("repository host %s is a non-public address; only public hosts can be cloned (KEELSON_ALLOW_PRIVATE_REPO_HOSTS=true allows others)", src.host)
		}
		return [][2]string{noRedirects}, nil
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	addrs, err := r.lookupIP(rctx, src.host)
	if err != nil || len(addrs) == 0 {
		return nil, fmt.Errorf("repository host %q does not resolve", src.host)
	}
	for _, a := range addrs {
		if !publicAddr(a.Unmap()) {
			return nil, fmt.Errorf("repository host %q resolves to a non-public address (%s); only public hosts can be cloned (KEELSON_ALLOW_PRIVATE_REPO_HOSTS=true allows others)", src.host, a.Unmap())
		}
	}
	return [][2]string{{"http.curloptResolve", resolveEntry(src.host, src.port, addrs[0])}, noRedirects}, nil
}

// resolveEntry is a curl resolve entry HOST:PORT:ADDRESS pinning a host name
// to ip; curl wants an IPv6 address in brackets.
func resolveEntry(host, port string, ip netip.Addr) string {
	ip = ip.Unmap()
	text := ip.String()
	if ip.Is6() {
		text = "[" + text + "]"
	}
	return host + ":" + port + ":" + text
}

func lookupIP(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

var cgnat = netip.MustParsePrefix("100.64.0.0/10")

func publicAddr(a netip.Addr) bool {
	return a.IsValid() && a.IsGlobalUnicast() && !a.IsPrivate() && !a.IsLoopback() &&
		!a.IsLinkLocalUnicast() && !cgnat.Contains(a)
}
