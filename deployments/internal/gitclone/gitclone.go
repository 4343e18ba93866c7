// Package gitclone is the one clone of a job's repository that both runtimes
// (deployments/process and deployments/container) use: the URL rules
// (KEELSON_ALLOW_LOCAL_REPOS), the git environment, the pinning of a clone to
// a public address (KEELSON_ALLOW_PRIVATE_REPO_HOSTS) and the fetch and
// checkout steps. How a git command runs (its process group, its log) stays
// with each runtime.
package gitclone

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/keelson-dev/keelson/deployments/rt"
	"github.com/keelson-dev/keelson/platform/repourl"
)

var (
	shaPattern    = regexp.MustCompile(`^[0-9a-fA-F]{4,64}$`)
	branchPattern = regexp.MustCompile(`^[A-Za-z0-9._/+@-]{1,255}$`)
)

// Source is a validated repository location: the projects module's
// repository URL, parsed by the same rules (platform/repourl).
type Source = repourl.URL

// ParseRepo validates a job's repository URL: https always; http://, file://
// and absolute paths only when local repos are allowed; private hosts'
// addresses when allowed (Policy.Pin also checks what host names resolve to).
func ParseRepo(raw string, allow repourl.Allow) (Source, error) {
	u, err := repourl.Parse(raw, allow)
	if err != nil {
		return Source{}, fmt.Errorf("repository URL: %w", err)
	}
	return u, nil
}

// Policy is what a server allows a clone.
type Policy struct {
	AllowLocalRepos   bool   // http://, file:// and absolute paths (KEELSON_ALLOW_LOCAL_REPOS)
	AllowPrivateHosts bool   // hosts on non-public addresses (KEELSON_ALLOW_PRIVATE_REPO_HOSTS)
	CAFile            string // GIT_SSL_CAINFO when set
	// LookupIP resolves repository hosts (a seam for tests); nil: the system resolver.
	LookupIP func(ctx context.Context, host string) ([]netip.Addr, error)
}

// Check validates the job's repository URL, branch and commit under p.
func (p Policy) Check(job rt.Job) (Source, error) {
	src, err := ParseRepo(job.RepoURL, repourl.Allow{Local: p.AllowLocalRepos, PrivateHosts: p.AllowPrivateHosts})
	if err != nil {
		return Source{}, err
	}
	if job.Branch != "" && (!branchPattern.MatchString(job.Branch) || strings.HasPrefix(job.Branch, "-") ||
		strings.Contains(job.Branch, "..")) {
		return Source{}, fmt.Errorf("branch %q is not a valid branch name", job.Branch)
	}
	if job.CommitSHA != "" && !shaPattern.MatchString(job.CommitSHA) {
		return Source{}, fmt.Errorf("commit %q is not a hexadecimal commit id", job.CommitSHA)
	}
	return src, nil
}

// Pin is the git config that keeps a clone of src on a public address (see
// PinPublic), or none when the policy allows local repos or private hosts, or
// src is local.
func (p Policy) Pin(ctx context.Context, src Source) ([][2]string, error) {
	if src.Local || p.AllowLocalRepos || p.AllowPrivateHosts {
		return nil, nil
	}
	return PinPublic(ctx, src, p.LookupIP)
}

// Env is the whole environment of a git command: no inherited variables but
// PATH=path, HOME=home and TMPDIR=tmp, no system or global config, no
// credential helper, no prompt, and only the allowed transports. The
// credential, if any, is an extra header scoped to the repository's origin,
// passed as environment config (never argv). extra is more git config.
func (p Policy) Env(path, home, tmp string, src Source, auth *rt.GitAuth, extra ...[2]string) []string {
	protocols := "https"
	if p.AllowLocalRepos {
		protocols = "https:http:file"
	}
	env := []string{
		"PATH=" + path,
		"HOME=" + home,
		"TMPDIR=" + tmp,
		"LC_ALL=C",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_ALLOW_PROTOCOL=" + protocols,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_ASKPASS=",
		"SSH_ASKPASS=",
	}
	if p.CAFile != "" {
		env = append(env, "GIT_SSL_CAINFO="+p.CAFile)
	}
	cfg := [][2]string{
		{"credential.helper", ""},
		{"core.hooksPath", "/dev/null"},
		{"advice.detachedHead", "false"},
		{"init.defaultBranch", "main"},
		{"http.followRedirects", "initial"},
		// Submodules are never fetched: their URLs would escape the
		// repository URL's checks.
		{"submodule.recurse", "false"},
		{"fetch.recurseSubmodules", "false"},
	}
	cfg = append(cfg, extra...)
	if auth != nil && src.Origin != "" {
		cfg = append(cfg, [2]string{"http." + src.Origin + ".extraHeader", "Authorization: Basic " + BasicToken(auth)})
	}
	env = append(env, "GIT_CONFIG_COUNT="+strconv.Itoa(len(cfg)))
	for i, kv := range cfg {
		env = append(env, fmt.Sprintf("GIT_CONFIG_KEY_%d=%s", i, kv[0]), fmt.Sprintf("GIT_CONFIG_VALUE_%d=%s", i, kv[1]))
	}
	return env
}

// BasicToken is the base64 of an HTTP basic credential.
func BasicToken(a *rt.GitAuth) string {
	return base64.StdEncoding.EncodeToString([]byte(a.Username + ":" + a.Password))
}

// Log is where a clone reports: System logs a runtime message, Tail returns
// the last lines of git's output.
type Log interface {
	System(msg string)
	Tail() string
}

// Fetch fetches the job's commit into <dir>/src (an empty directory: the
// caller clears it) and returns the commit it checked out. git runs git with
// args in dir with the clone's environment, its output logged; revParse runs
// git -C src rev-parse HEAD the same way and returns its output.
func Fetch(ctx context.Context, job rt.Job, src Source, log Log,
	git func(args ...string) error, revParse func() ([]byte, error)) (string, error) {
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
	log.System(fmt.Sprintf("fetching %s (%s)", src.URL, what))
	if err := git("init", "-q", "src"); err != nil {
		return "", fmt.Errorf("git init: %w", err)
	}
	in := func(args ...string) []string { return append([]string{"-C", "src"}, args...) }
	if err := git(in("remote", "add", "origin", src.URL)...); err != nil {
		return "", fmt.Errorf("git remote add: %w", err)
	}
	fetchErr := git(in("fetch", "-q", "--depth", "1", "--no-tags", "origin", ref)...)
	checkout := "FETCH_HEAD"
	if fetchErr != nil && job.CommitSHA != "" && ctx.Err() == nil {
		// Not every server lets a client want a bare commit (or an abbreviated
		// one): fetch the branches and look for it.
		log.System("the server did not serve the commit directly; fetching all branches")
		fetchErr = git(in("fetch", "-q", "--no-tags", "origin", "+refs/heads/*:refs/remotes/origin/*")...)
		checkout = ref
	}
	if fetchErr != nil {
		if ctx.Err() != nil {
			return "", fetchErr
		}
		return "", fmt.Errorf("git fetch of %s (%s) failed: %w\n%s", src.URL, what, fetchErr, log.Tail())
	}
	if err := git(in("checkout", "-q", "--detach", checkout)...); err != nil {
		return "", fmt.Errorf("git checkout %s: %w\n%s", checkout, err, log.Tail())
	}
	head, err := revParse()
	if err != nil {
		return "", fmt.Errorf("git rev-parse HEAD: %w", err)
	}
	commit := strings.TrimSpace(string(head))
	if job.CommitSHA != "" && !strings.HasPrefix(commit, strings.ToLower(job.CommitSHA)) {
		return "", fmt.Errorf("checked out %s, not the requested commit %s", commit, job.CommitSHA)
	}
	log.System("checked out commit " + commit)
	return commit, nil
}

// Checkout is where and how a runtime runs a clone (Policy.Clone).
type Checkout struct {
	Dir     string        // where git runs; the checkout is <Dir>/src
	GitPath string        // the git binary
	Timeout time.Duration // bounds the whole clone
	// Clear empties the checkout's directory before the fetch.
	Clear func(path string) error
	// Env is git's whole environment for src, with the pinning config pin
	// (Policy.Env with the runtime's paths).
	Env func(src Source, pin [][2]string) []string
	// Git runs git with args in Dir with env, its output logged, until ctx ends.
	Git func(ctx context.Context, env []string, args ...string) error
}

// Clone checks the job under p and fetches its commit into <c.Dir>/src
// (Fetch) within c.Timeout; it returns the commit checked out.
func (p Policy) Clone(ctx context.Context, job rt.Job, log Log, c Checkout) (string, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, c.Timeout,
		fmt.Errorf("fetching the repository timed out after %s", c.Timeout))
	defer cancel()
	src, err := p.Check(job)
	if err != nil {
		return "", err
	}
	if err := c.Clear(filepath.Join(c.Dir, "src")); err != nil {
		return "", fmt.Errorf("clearing the workspace: %w", err)
	}
	pin, err := p.Pin(ctx, src)
	if err != nil {
		return "", err
	}
	env := c.Env(src, pin)
	git := func(args ...string) error { return c.Git(ctx, env, args...) }
	revParse := func() ([]byte, error) {
		cmd := exec.CommandContext(ctx, c.GitPath, "-C", "src", "rev-parse", "HEAD")
		cmd.Dir, cmd.Env = c.Dir, env
		return cmd.Output()
	}
	return Fetch(ctx, job, src, log, git, revParse)
}

// PinPublic is the git config that keeps a clone on a public address: the
// host is resolved once (with lookup; nil: the system resolver), every
// address it resolves to must be public (not loopback, private, link-local,
// CGNAT, unspecified or multicast: a repository URL must not reach into the
// server's own network unless local repos or private hosts are allowed), and
// git is pinned to the address checked (no DNS rebinding in between) with
// redirects off (no hop to another host). A host that is an IP literal
// (https://203.0.113.7/, https://[2001:db8::1]/) is checked but needs no pin:
// curl connects to the literal without DNS, and its resolve list could not
// even name an IPv6 literal host.
func PinPublic(ctx context.Context, src Source, lookup func(ctx context.Context, host string) ([]netip.Addr, error)) ([][2]string, error) {
	if lookup == nil {
		lookup = LookupIP
	}
	noRedirects := [2]string{"http.followRedirects", "false"}
	if ip, err := netip.ParseAddr(src.Host); err == nil {
		if !PublicAddr(ip.Unmap()) {
			return nil, fmt.Errorf("repository host %s is a non-public address; only public hosts can be cloned (KEELSON_ALLOW_PRIVATE_REPO_HOSTS=true allows others)", src.Host)
		}
		return [][2]string{noRedirects}, nil
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	addrs, err := lookup(rctx, src.Host)
	if err != nil || len(addrs) == 0 {
		return nil, fmt.Errorf("repository host %q does not resolve", src.Host)
	}
	for _, a := range addrs {
		if !PublicAddr(a.Unmap()) {
			return nil, fmt.Errorf("repository host %q resolves to a non-public address (%s); only public hosts can be cloned (KEELSON_ALLOW_PRIVATE_REPO_HOSTS=true allows others)", src.Host, a.Unmap())
		}
	}
	return [][2]string{{"http.curloptResolve", ResolveEntry(src.Host, src.Port, addrs[0])}, noRedirects}, nil
}

// ResolveEntry is a curl resolve entry HOST:PORT:ADDRESS pinning a host name
// to ip; curl wants an IPv6 address in brackets.
func ResolveEntry(host, port string, ip netip.Addr) string {
	ip = ip.Unmap()
	text := ip.String()
	if ip.Is6() {
		text = "[" + text + "]"
	}
	return host + ":" + port + ":" + text
}

// LookupIP resolves host with the system resolver.
func LookupIP(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// PublicAddr reports whether a is a public unicast address.
func PublicAddr(a netip.Addr) bool {
	return a.IsValid() && a.IsGlobalUnicast() && !a.IsPrivate() && !a.IsLoopback() &&
		!a.IsLinkLocalUnicast() && !cgnat.Contains(a)
}
