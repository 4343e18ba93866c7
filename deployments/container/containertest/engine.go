package containertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/keelson-dev/keelson/platform/platformtest"
)

// Engine is a second Docker engine on this machine, as another host would
// have one: a dockerd in a network namespace of its own, joined to this
// machine's by a veth pair (RECIPES.md: "A second Docker engine"). Its apps
// publish ports on the namespace's own loopback, so what reaches them runs
// in the namespace (Command); the machine reaches the namespace at NSAddr,
// and the namespace reaches the machine at HostAddr.
type Engine struct {
	NetNS    string // the namespace's name (/run/netns/<NetNS>)
	Socket   string // the engine's API: unix:///...
	HostAddr string // this machine's side of the veth pair
	NSAddr   string // the namespace's side

	dir  string
	mu   sync.Mutex
	dead bool
	lns  []net.Listener
}

const engineEnable = "root, iproute2's ip, util-linux's nsenter and dockerd (RECIPES.md: a second Docker engine)"

// SecondEngine starts a second engine for the test and removes everything
// it made when the test ends: the daemon, its containerd, shims and apps,
// their mounts, the namespace and its veth pair, the data. Without what it
// needs the test skips (KEELSON_TEST_REQUIRE_DOCKER_RUNTIME=1 fails it).
func SecondEngine(t testing.TB) *Engine {
	t.Helper()
	if err := engineTools(); err != nil {
		if os.Getenv("KEELSON_TEST_REQUIRE_DOCKER_RUNTIME") == "1" {
			t.Fatalf("second engine: %v (KEELSON_TEST_REQUIRE_DOCKER_RUNTIME=1)", err)
		}
		platformtest.Skip(t, "second engine: "+err.Error(), engineEnable)
	}
	n := 16 + rand.IntN(200)
	id := platformtest.Unique(6)
	e := &Engine{NetNS: "kls-" + id, HostAddr: fmt.Sprintf("10.231.%d.1", n), NSAddr: fmt.Sprintf("10.231.%d.2", n)}
	dir, err := os.MkdirTemp("", "keelson-engine-")
	if err != nil {
		t.Fatal(err)
	}
	e.dir, e.Socket = dir, "unix://"+filepath.Join(dir, "docker.sock")
	t.Cleanup(func() { e.remove(t) })
	veth := "kls" + id
	for _, args := range [][]string{
		{"netns", "add", e.NetNS},
		{"link", "add", veth + "h", "type", "veth", "peer", "name", veth + "c"},
		{"link", "set", veth + "c", "netns", e.NetNS},
		{"addr", "add", e.HostAddr + "/24", "dev", veth + "h"},
		{"link", "set", veth + "h", "up"},
		{"-n", e.NetNS, "addr", "add", e.NSAddr + "/24", "dev", veth + "c"},
		{"-n", e.NetNS, "link", "set", veth + "c", "up"},
		{"-n", e.NetNS, "link", "set", "lo", "up"},
		{"-n", e.NetNS, "route", "add", "default", "via", e.HostAddr},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	conf := `{"storage-driver": "fuse-overlayfs", "mtu": 1400, "cgroup-parent": "/keelson-engine-` + id + `"}`
	if err := os.WriteFile(filepath.Join(dir, "daemon.json"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := e.Command("dockerd", "--config-file", filepath.Join(dir, "daemon.json"),
		"--data-root", filepath.Join(dir, "data"), "--exec-root", filepath.Join(dir, "exec"),
		"-H", e.Socket, "--pidfile", filepath.Join(dir, "docker.pid"), "--bip", fmt.Sprintf("10.232.%d.1/24", n))
	logf, err := os.Create(filepath.Join(dir, "dockerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the second dockerd: %v", err)
	}
	go func() { _ = cmd.Wait() }()
	c := e.Client(t)
	platformtest.Eventually(t, time.Minute, "the second engine to answer", func() bool {
		_, err := c.Ping(context.Background(), client.PingOptions{})
		return err == nil
	})
	return e
}

func engineTools() error {
	if os.Geteuid() != 0 {
		return errors.New("not root")
	}
	for _, tool := range []string{"ip", "nsenter", "dockerd"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is not installed", tool)
		}
	}
	return nil
}

// Command is name run inside the engine's network namespace (nsenter --net,
// not ip netns exec, which remounts /sys and breaks the cgroup v1 devices
// controller the engine needs).
func (e *Engine) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=/run/netns/" + e.NetNS, "--", name}, args...)...)
}

// Client is a client of the engine, closed with the test.
func (e *Engine) Client(t testing.TB) *client.Client {
	t.Helper()
	c, err := client.New(client.WithHost(e.Socket))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Load copies images from this machine's engine into the second one
// (docker save | docker load), as an operator provisions a new host.
func (e *Engine) Load(t testing.TB, images ...string) {
	t.Helper()
	save := exec.Command("docker", append([]string{"save"}, images...)...)
	load := exec.Command("docker", "-H", e.Socket, "load", "-q")
	r, err := save.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	load.Stdin = r
	var saveErr strings.Builder
	save.Stderr = &saveErr
	if err := save.Start(); err != nil {
		t.Fatal(err)
	}
	out, err := load.CombinedOutput()
	if werr := save.Wait(); werr != nil || err != nil {
		t.Fatalf("loading %v into the second engine: save %v %s, load %v %s", images, werr, saveErr.String(), err, out)
	}
}

// Forward makes addr (a host:port this machine listens on, e.g. 127.0.0.1
// for Postgres) answer at the same address inside the namespace, so a
// process there uses the same URLs as one here. The listener is opened
// from a thread that entered the namespace; connections it accepts are
// relayed to addr from this machine's namespace.
func (e *Engine) Forward(t testing.TB, addr string) {
	t.Helper()
	l, err := e.listenIn(addr)
	if err != nil {
		t.Fatalf("listening on %s in %s: %v", addr, e.NetNS, err)
	}
	e.mu.Lock()
	e.lns = append(e.lns, l)
	e.mu.Unlock()
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			go relay(in, addr)
		}
	}()
}

func (e *Engine) listenIn(addr string) (net.Listener, error) {
	type result struct {
		l   net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// The thread enters the namespace and is never handed back to the
		// scheduler (no UnlockOSThread): it ends with this goroutine.
		runtime.LockOSThread()
		f, err := os.Open("/run/netns/" + e.NetNS)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{err: err}
			return
		}
		l, err := net.Listen("tcp", addr)
		ch <- result{l, err}
	}()
	r := <-ch
	return r.l, r.err
}

func relay(in net.Conn, addr string) {
	defer in.Close()
	out, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return
	}
	defer out.Close()
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go cp(out, in)
	go cp(in, out)
	<-done
	<-done
}

// Kill is the host's death: SIGKILL to the daemon, its containerd and shims,
// and every app they ran, with no shutdown code anywhere.
func (e *Engine) Kill() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.dead = true
	for _, pid := range e.pids() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// pids are the engine's processes: the daemon (pidfile), every process
// whose command line names its directory (containerd, shims,
// fuse-overlayfs), and every process in its containers' cgroups.
func (e *Engine) pids() []int {
	var out []int
	if b, err := os.ReadFile(filepath.Join(e.dir, "docker.pid")); err == nil {
		stat, _ := os.ReadFile("/proc/" + strings.TrimSpace(string(b)) + "/stat")
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && len(stat) > 0 && !zombie(stat) {
			out = append(out, pid) // a killed daemon leaves its pidfile
		}
	}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		if stat, _ := os.ReadFile("/proc/" + p.Name() + "/stat"); zombie(stat) {
			continue // dead, waiting for its parent to reap it
		}
		cmdline, _ := os.ReadFile("/proc/" + p.Name() + "/cmdline")
		cgroup, _ := os.ReadFile("/proc/" + p.Name() + "/cgroup")
		if strings.Contains(string(cmdline), e.dir) || strings.Contains(string(cgroup), "/keelson-engine-"+strings.TrimPrefix(e.NetNS, "kls-")) {
			out = append(out, pid)
		}
	}
	return out
}

// zombie reports whether /proc/<pid>/stat is of a process that exited.
func zombie(stat []byte) bool {
	i := strings.LastIndexByte(string(stat), ')')
	return i > 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}

// killAll sends SIGKILL to the engine's processes until none is left or
// the time is up, and returns those left (pid, state and command).
func (e *Engine) killAll(d time.Duration) []string {
	for end := time.Now().Add(d); e.Alive() && time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		for _, pid := range e.pids() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	var left []string
	for _, pid := range e.pids() {
		stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		left = append(left, fmt.Sprintf("%s [%s]", strings.ReplaceAll(string(cmd), "\x00", " "), stat))
	}
	return left
}

// Alive reports whether any process of the engine still runs.
func (e *Engine) Alive() bool { return len(e.pids()) > 0 }

// remove stops the engine (gracefully unless it was killed), then removes
// its processes, mounts, namespace and files.
func (e *Engine) remove(t testing.TB) {
	e.mu.Lock()
	for _, l := range e.lns {
		l.Close()
	}
	dead := e.dead
	e.mu.Unlock()
	if !dead {
		if b, err := os.ReadFile(filepath.Join(e.dir, "docker.pid")); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				_ = syscall.Kill(pid, syscall.SIGTERM)
				for end := time.Now().Add(20 * time.Second); time.Now().Before(end) && syscall.Kill(pid, 0) == nil; {
					time.Sleep(200 * time.Millisecond)
				}
			}
		}
	}
	e.killAll(10 * time.Second)
	// Killed fuse-overlayfs daemons of mounts still in place can linger
	// until those are unmounted.
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	var ours []string
	for _, l := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], e.dir) {
			ours = append(ours, f[4])
		}
	}
	for i := len(ours) - 1; i >= 0; i-- { // innermost first
		_ = unix.Unmount(ours[i], unix.MNT_DETACH)
	}
	if left := e.killAll(20 * time.Second); len(left) > 0 {
		t.Errorf("second engine: processes outlive it: %s", strings.Join(left, "; "))
	}
	if out, err := exec.Command("ip", "netns", "del", e.NetNS).CombinedOutput(); err != nil {
		t.Errorf("ip netns del %s: %v %s", e.NetNS, err, out)
	}
	removeCgroups("keelson-engine-" + strings.TrimPrefix(e.NetNS, "kls-"))
	if err := os.RemoveAll(e.dir); err != nil {
		t.Errorf("removing the second engine's files: %v", err)
	}
}

// removeCgroups removes the cgroup name and those below it from every
// controller (cgroup v1: a killed container's cgroups stay behind).
func removeCgroups(name string) {
	ctrls, _ := os.ReadDir("/sys/fs/cgroup")
	for _, c := range ctrls {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join("/sys/fs/cgroup", c.Name(), name), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = os.Remove(dirs[i])
		}
	}
}
