package container

// The clone is the process runtime's (deployments/process/git.go), copied:
// the same URL rules, git environment and host pinning, so both runtimes
// fetch exactly alike. Keep them in step.

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/keelson-dev/keelson/deployments"
)

var (
	shaPattern    = regexp.MustCompile(`^[0-9a-fA-F]{4,64}$`)
	branchPattern = regexp.MustCompile(`^[A-Za-z0-9._/+@-]{1,255}$`)
)

type repoSource struct {
	url    string
	origin string
	host   string
	port   string
	local  bool
}

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
	case "https", "http":
		scheme := strings.ToLower(u.Scheme)
		if scheme == "http" && !allowLocal {
			return repoSource{}, errors.New("http:// repositories are not allowed on this server; use https:// (KEELSON_ALLOW_LOCAL_REPOS=true allows http for development)")
		}
		if u.Host == "" {
			return repoSource{}, errors.New("repository URL has no host")
		}
		if u.User != nil {
			return repoSource{}, errors.New("repository URL must not contain credentials; connect the code host instead")
		}
		def := "443"
		if scheme == "http" {
			def = "80"
		}
		port := u.Port()
		if port == "" {
			port = def
		}
		return repoSource{url: u.String(), origin: scheme + "://" + u.Host + "/", host: u.Hostname(), port: port}, nil
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

func (r *Runtime) gitEnv(root string, src repoSource, auth *deployments.GitAuth, extra ...[2]string) []string {
	protocols := "https"
	if r.cfg.AllowLocalRepos {
		protocols = "https:http:file"
	}
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + root,
		"TMPDIR=" + root,
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
		{"core.symlinks", "true"},
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

// clone fetches the job's commit into <root>/src and returns the commit.
func (r *Runtime) clone(ctx context.Context, job deployments.Job, root string, out *output) (string, error) {
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
	if err := os.RemoveAll(filepath.Join(root, "src")); err != nil {
		return "", fmt.Errorf("clearing the workspace: %w", err)
	}
	var pin [][2]string
	if !src.local && !r.cfg.AllowLocalRepos && !r.cfg.AllowPrivateHosts {
		resolve, err := pinPublicAddr(ctx, src.host, src.port)
		if err != nil {
			return "", err
		}
		pin = [][2]string{{"http.curloptResolve", resolve}, {"http.followRedirects", "false"}}
	}
	env := r.gitEnv(root, src, job.GitAuth, pin...)
	git := func(args ...string) error {
		cmd := exec.CommandContext(ctx, r.cfg.GitPath, args...)
		cmd.Dir, cmd.Env = root, env
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = 5 * time.Second
		w := out.writer()
		cmd.Stdout, cmd.Stderr = w, w
		err := cmd.Run()
		w.Flush()
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return err
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
	in := func(args ...string) []string { return append([]string{"-C", "src"}, args...) }
	if err := git(in("remote", "add", "origin", src.url)...); err != nil {
		return "", fmt.Errorf("git remote add: %w", err)
	}
	fetchErr := git(in("fetch", "-q", "--depth", "1", "--no-tags", "origin", ref)...)
	checkout := "FETCH_HEAD"
	if fetchErr != nil && job.CommitSHA != "" && ctx.Err() == nil {
		out.system("the server did not serve the commit directly; fetching all branches")
		fetchErr = git(in("fetch", "-q", "--no-tags", "origin", "+refs/heads/*:refs/remotes/origin/*")...)
		checkout = ref
	}
	if fetchErr != nil {
		if ctx.Err() != nil {
			return "", fetchErr
		}
		return "", fmt.Errorf("git fetch of %s (%s) failed: %w\n%s", src.url, what, fetchErr, out.Tail())
	}
	if err := git(in("checkout", "-q", "--detach", checkout)...); err != nil {
		return "", fmt.Errorf("git checkout %s: %w\n%s", checkout, err, out.Tail())
	}
	cmd := exec.CommandContext(ctx, r.cfg.GitPath, "-C", "src", "rev-parse", "HEAD")
	cmd.Dir, cmd.Env = root, env
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

func basicToken(a *deployments.GitAuth) string {
	return base64.StdEncoding.EncodeToString([]byte(a.Username + ":" + a.Password))
}

// pinPublicAddr resolves host and answers a curl resolve entry host:port:ip,
// or an error when any address is not public.
func pinPublicAddr(ctx context.Context, host, port string) (string, error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(rctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return "", fmt.Errorf("repository host %q does not resolve", host)
	}
	for _, a := range addrs {
		if !publicAddr(a.Unmap()) {
			return "", fmt.Errorf("repository host %q resolves to a non-public address (%s); only public hosts can be cloned (KEELSON_ALLOW_PRIVATE_REPO_HOSTS=true allows others)", host, a.Unmap())
		}
	}
	ip := addrs[0].Unmap()
	ipText := ip.String()
	if ip.Is6() {
		ipText = "[" + ipText + "]"
	}
	return host + ":" + port + ":" + ipText, nil
}

var cgnat = netip.MustParsePrefix("100.64.0.0/10")

func publicAddr(a netip.Addr) bool {
	return a.IsValid() && a.IsGlobalUnicast() && !a.IsPrivate() && !a.IsLoopback() &&
		!a.IsLinkLocalUnicast() && !cgnat.Contains(a)
}
