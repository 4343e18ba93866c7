package process

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Containment: everything a build, a git command or an app starts must die
// with it, even what left its process group or session (`setsid cmd &`,
// a daemon's double fork), and even after the server was killed hard.
//
// Three marks find a group's processes, each catching what the others miss:
//
//   - a cgroup per group (v2 when the server may create one under its own
//     cgroup, the process entering it at fork with CLONE_INTO_CGROUP, and
//     cgroup.kill ending it; else the v1 pids hierarchy): nothing a process
//     does to its session, group or environment takes it out;
//   - a tag in the environment (tagVar = owner/instance/deployment/seq) every
//     descendant inherits unless it replaces its environment;
//   - the process group and session with the leader's start time.
//
// Each started group leaves a record in <DataDir>/run; New sweeps records,
// tags and cgroups left by a server instance that no longer runs (a kill -9),
// before anything starts, so a restarted server never runs a second copy of
// an app next to its orphan.
//
// A server process is not made a child subreaper on purpose: orphans would
// become its children, and reaping them would race with os/exec's Wait for the
// server's other children.

// tagVar is the environment variable marking the processes of a group.
const tagVar = "KEELSON_PROCESS_TAG"

// runDir holds one record per running group, under DataDir.
const runDir = "run"

// containment is the state shared by every group of a Runtime.
type containment struct {
	owner    string // hash of the data dir: which server's processes
	instance string // "<pid>.<start>" of this server process
	runDir   string
	bootID   string
	seq      atomic.Uint64
	cg       cgroupMode // the cgroup flavour, or noCgroup
	cgRoot   string     // <cgroup of the server>/keelson-<owner>; its children are instances
	mu       sync.Mutex // orders creating group cgroups and removing empty parents
	v1Home   string     // the server's own v1 cgroup (cgroupV1 only)
}

type cgroupMode int

const (
	noCgroup cgroupMode = iota
	cgroupV2
	cgroupV1
)

func (m cgroupMode) String() string {
	switch m {
	case cgroupV2:
		return "cgroup v2"
	case cgroupV1:
		return "cgroup v1 (pids)"
	}
	return "none"
}

func newContainment(dataDir string) (*containment, error) {
	c := &containment{owner: ownerOf(dataDir), runDir: filepath.Join(dataDir, runDir)}
	self, ok := readStat(os.Getpid())
	if !ok {
		return nil, errors.New("process: /proc is not readable; the process runtime needs Linux with /proc")
	}
	c.instance = strconv.Itoa(self.pid) + "." + strconv.FormatUint(self.start, 10)
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		c.bootID = strings.TrimSpace(string(b))
	}
	if err := os.MkdirAll(c.runDir, 0o700); err != nil {
		return nil, fmt.Errorf("process: %w", err)
	}
	c.cg, c.cgRoot = findCgroup(c.owner)
	if c.cg == cgroupV1 {
		c.v1Home = filepath.Dir(c.cgRoot)
	}
	return c, nil
}

// ownerOf names the processes of the runtimes of one data dir.
func ownerOf(dataDir string) string {
	sum := sha256.Sum256([]byte(dataDir))
	return hex.EncodeToString(sum[:8])
}

// instanceDir is this server's cgroup directory ("" without cgroups).
func (c *containment) instanceDir() string {
	if c.cg == noCgroup {
		return ""
	}
	return filepath.Join(c.cgRoot, c.instance)
}

// findCgroup picks where groups get their cgroups: under the server's own
// cgroup, in the v2 hierarchy if a child can be created there and a process
// started into it, else in the v1 pids hierarchy if a child can be created.
func findCgroup(owner string) (cgroupMode, string) {
	mounts := cgroupMounts()
	selfPaths := selfCgroups()
	if mnt, ok := mounts["cgroup2"]; ok {
		if p, ok := selfPaths[""]; ok {
			root := filepath.Join(mnt, p, "keelson-"+owner)
			if probeV2(root) {
				return cgroupV2, root
			}
		}
	}
	if mnt, ok := mounts["pids"]; ok {
		if p, ok := selfPaths["pids"]; ok {
			root := filepath.Join(mnt, p, "keelson-"+owner)
			if probeV1(root) {
				return cgroupV1, root
			}
		}
	}
	return noCgroup, ""
}

// probeV1 reports whether root, a child of the server's v1 pids cgroup, can
// be made and written. Another server's tidyOthers may remove the empty root
// between the two: make it again.
func probeV1(root string) bool {
	defer os.Remove(root) // created again with the first group; fails if in use
	return retryUnderRace(func() error {
		if err := os.MkdirAll(root, 0o755); err != nil {
			return err
		}
		f, err := os.OpenFile(filepath.Join(root, "cgroup.procs"), os.O_WRONLY, 0)
		if err == nil {
			f.Close()
		}
		return err // ENODEV: opened as the removal of the directory completed
	}) == nil
}

// probeV2 starts /bin/true into a child of root: a v2 hierarchy can refuse it
// (no delegation, no clone3).
func probeV2(root string) bool {
	dir := filepath.Join(root, "probe-"+strconv.Itoa(os.Getpid()))
	defer os.Remove(root) // created again with the first group; fails if in use
	// Another server's tidyOthers may remove root before dir is made in it.
	if err := mkdirUnderRace(dir); err != nil {
		return false
	}
	defer os.Remove(dir)
	fd, err := syscall.Open(dir, syscall.O_DIRECTORY|syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer syscall.Close(fd)
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	return cmd.Run() == nil
}

// cgroupMounts maps "cgroup2" and each v1 controller to its mount point.
func cgroupMounts() map[string]string {
	out := map[string]string{}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options ... - fstype source superoptions
		left, right, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		lf, rf := strings.Fields(left), strings.Fields(right)
		if len(lf) < 5 || len(rf) < 3 || lf[3] != "/" {
			continue
		}
		switch rf[0] {
		case "cgroup2":
			if _, seen := out["cgroup2"]; !seen {
				out["cgroup2"] = lf[4]
			}
		case "cgroup":
			for _, opt := range strings.Split(rf[2], ",") {
				if _, seen := out[opt]; !seen {
					out[opt] = lf[4]
				}
			}
		}
	}
	return out
}

// selfCgroups maps "" (v2) and each v1 controller to the server's cgroup path.
func selfCgroups() map[string]string {
	out := map[string]string{}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return out
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, ctl := range strings.Split(parts[1], ",") {
			out[ctl] = parts[2]
		}
	}
	return out
}

// group is one started command and everything it starts.
type group struct {
	c      *containment
	tag    string
	cgroup string // its cgroup directory, "" without
	record string // its record file
	leader procStat
}

// newGroup prepares the marks of a command about to start for deployment id
// (cmd.Env must be set): the tag, and the cgroup it will enter at fork (v2).
// Call started once it runs, or abandon if it did not start.
func (c *containment) newGroup(cmd *exec.Cmd, id, kind string) (*group, error) {
	seq := c.seq.Add(1)
	g := &group{c: c, tag: c.owner + "/" + c.instance + "/" + id + "/" + kind + "-" + strconv.FormatUint(seq, 10)}
	cmd.Env = append(cmd.Env, tagVar+"="+g.tag) // last, so the job cannot override it
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if c.cg != noCgroup {
		g.cgroup = filepath.Join(c.instanceDir(), id+"."+kind+"-"+strconv.FormatUint(seq, 10))
		c.mu.Lock()
		err := mkdirUnderRace(g.cgroup)
		c.mu.Unlock()
		if err != nil {
			return nil, fmt.Errorf("creating the cgroup of %s: %w", id, err)
		}
		if c.cg == cgroupV2 {
			fd, err := syscall.Open(g.cgroup, syscall.O_DIRECTORY|syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
			if err != nil {
				_ = os.Remove(g.cgroup)
				return nil, fmt.Errorf("opening the cgroup of %s: %w", id, err)
			}
			// Only needed until fork; ForkExec has used it by the time Start returns.
			cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
		}
	}
	return g, nil
}

// mkdirUnderRace creates dir and its parents. Another server starting on
// this machine removes every empty keelson-<owner> cgroup directory (tidyOthers),
// so a parent created a moment ago can be gone before its child is: try
// again, as the removal takes only empty directories.
func mkdirUnderRace(dir string) error {
	return retryUnderRace(func() error { return os.MkdirAll(dir, 0o755) })
}

// raceWindow bounds retryUnderRace. Another server's start-up removes each
// empty directory once, so a retry or two suffices; the bound is for a
// remover that never stops, and is one of time, not of tries, as a loaded
// machine can let it win many tries in a row.
const raceWindow = 5 * time.Second

// retryUnderRace runs try again while it fails as it does when another
// server removes an empty cgroup directory under it (ENOENT; ENODEV for a
// file opened as the removal completed), for at most raceWindow.
func retryUnderRace(try func() error) error {
	deadline := time.Now().Add(raceWindow)
	for {
		err := try()
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENODEV) || time.Now().After(deadline) {
			return err
		}
	}
}

// closeFD releases the cgroup descriptor newGroup opened.
func (g *group) closeFD(cmd *exec.Cmd) {
	if cmd.SysProcAttr != nil && cmd.SysProcAttr.UseCgroupFD {
		_ = syscall.Close(cmd.SysProcAttr.CgroupFD)
		cmd.SysProcAttr.UseCgroupFD = false
	}
}

// start starts cmd inside the group's cgroup. v2 enters it at fork
// (CLONE_INTO_CGROUP, set up by newGroup). v1 has no such flag, and moving the
// child after Start would miss what it forks first: the forking thread itself
// enters the cgroup for the fork (v1 places threads, and a child inherits
// its forking thread's cgroup) and goes back right after.
func (g *group) start(cmd *exec.Cmd) error {
	if g.c.cg != cgroupV1 {
		return cmd.Start()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread() // never let this thread end: Pdeathsig is tied to it
	tid := []byte(strconv.Itoa(syscall.Gettid()))
	if err := os.WriteFile(filepath.Join(g.cgroup, "tasks"), tid, 0); err != nil {
		return cmd.Start() // started() still moves the child
	}
	err := cmd.Start()
	if werr := os.WriteFile(filepath.Join(g.c.v1Home, "tasks"), tid, 0); werr != nil {
		// The thread stays in the group's cgroup; killUntilGone never kills
		// the server itself, and the group's cgroup cannot be removed.
		return errors.Join(err, fmt.Errorf("leaving the cgroup of %s: %w", g.tag, werr))
	}
	return err
}

// abandon undoes newGroup for a command that did not start.
func (g *group) abandon(cmd *exec.Cmd) {
	g.closeFD(cmd)
	if g.cgroup != "" {
		_ = os.Remove(g.cgroup)
	}
}

// started records the running leader: its v1 cgroup, and its record.
func (g *group) started(cmd *exec.Cmd) {
	pid := cmd.Process.Pid
	g.closeFD(cmd)
	if st, ok := readStat(pid); ok {
		g.leader = st
	} else {
		g.leader = procStat{pid: pid, pgid: pid}
	}
	if g.c.cg == cgroupV1 {
		// start entered it already (see start); this only makes sure.
		_ = os.WriteFile(filepath.Join(g.cgroup, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
	}
	rec := fmt.Sprintf("%s\n%d %d %d %d\n%s\n%s\n", g.c.bootID, g.leader.pid, g.leader.pgid, g.leader.sid, g.leader.start, g.tag, g.cgroup)
	g.record = filepath.Join(g.c.runDir, strings.ReplaceAll(g.tag[len(g.c.owner)+1:], "/", "_"))
	_ = os.WriteFile(g.record, []byte(rec), 0o600)
}

// members are the live (not zombie) processes of the group.
func (g *group) members(procs []procStat) []procStat {
	return findMembers(procs, []string{g.tag}, nil, []procStat{g.leader}, []string{g.cgroup})
}

// signal sends sig to every live process of the group.
func (g *group) signal(sig syscall.Signal) {
	for _, p := range g.members(allProcs()) {
		_ = syscall.Kill(p.pid, sig)
	}
}

// killAll kills every process of the group until none is left (or a few
// seconds passed), then removes its cgroup and its record.
func (g *group) killAll() {
	if g.killUntilGone([]string{g.tag}, nil, []procStat{g.leader}, []string{g.cgroup}) {
		if g.record != "" {
			_ = os.Remove(g.record)
		}
		// A server killed later leaves no empty cgroup directories behind.
		g.c.mu.Lock()
		g.c.tidy()
		g.c.mu.Unlock()
	}
}

func (g *group) killUntilGone(tags, tagPrefixes []string, leaders []procStat, cgroups []string) bool {
	return killUntilGone(g.c.cg, tags, tagPrefixes, leaders, cgroups)
}

// killUntilGone SIGKILLs every live process matching any mark, again and again
// until a scan finds none (a process may fork while it is being killed), then
// removes the cgroups. It reports whether nothing was left.
func killUntilGone(mode cgroupMode, tags, tagPrefixes []string, leaders []procStat, cgroups []string) bool {
	if mode == cgroupV2 {
		for _, cg := range cgroups {
			if cg != "" {
				_ = os.WriteFile(filepath.Join(cg, "cgroup.kill"), []byte("1"), 0)
			}
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	wait := 200 * time.Microsecond
	settle := 0
	for {
		procs := allProcs()
		live := findMembers(procs, tags, tagPrefixes, leaders, cgroups)
		if len(live) == 0 && settle < 6 && execInFlight(procs, tags, tagPrefixes, leaders) {
			// A process in the middle of execve shows an empty environment
			// for a moment, so its tag cannot be read (a daemon that left the
			// group and whose parent is already dead is found by nothing
			// else): look again shortly before believing the group is gone.
			settle++
			time.Sleep(time.Millisecond << settle)
			continue
		}
		if len(live) == 0 {
			gone := true
			for _, cg := range cgroups {
				if cg != "" {
					if err := os.Remove(cg); err != nil && !errors.Is(err, fs.ErrNotExist) {
						gone = false // EBUSY: a dying task is still in it
					}
				}
			}
			if gone {
				return true
			}
		}
		for _, p := range live {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(wait)
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// execInFlight reports whether a live user process among procs, started no
// earlier than the earliest leader (any, when tags are matched by prefix),
// has an empty environment: one in the middle of execve, or one that
// replaced its environment with nothing. Kernel threads are left out.
func execInFlight(procs []procStat, tags, tagPrefixes []string, leaders []procStat) bool {
	if len(tags) == 0 && len(tagPrefixes) == 0 {
		return false
	}
	var minStart uint64
	if len(tagPrefixes) == 0 {
		for i, l := range leaders {
			if i == 0 || l.start < minStart {
				minStart = l.start
			}
		}
	}
	self := os.Getpid()
	for _, p := range procs {
		if p.pid == self || p.pid == 2 || p.ppid == 2 || p.state == 'Z' || p.state == 'X' || p.start < minStart {
			continue
		}
		if b, err := environ(p.pid); err == nil && len(b) == 0 {
			return true
		}
	}
	return false
}

// findMembers returns the live processes among procs that carry one of tags
// (or a tag starting with one of tagPrefixes), share a leader's process group
// and session and started no earlier than it, or sit in one of cgroups; and
// every live descendant of those.
func findMembers(procs []procStat, tags, tagPrefixes []string, leaders []procStat, cgroups []string) []procStat {
	in := map[int]bool{}
	for _, cg := range cgroups {
		if cg == "" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(cg, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				in[pid] = true
			}
		}
	}
	var minStart uint64 // the earliest leader's start, 0 when unknown
	for i, l := range leaders {
		if i == 0 || l.start < minStart {
			minStart = l.start
		}
	}
	children := map[int][]int{}
	byPid := map[int]procStat{}
	self := os.Getpid()
	for _, p := range procs {
		byPid[p.pid] = p
		children[p.ppid] = append(children[p.ppid], p.pid)
		if in[p.pid] || p.pid == self {
			continue
		}
		for _, l := range leaders {
			if l.pgid > 0 && p.pgid == l.pgid && p.sid == l.sid && p.start >= l.start {
				in[p.pid] = true
			}
		}
		// A group's processes started no earlier than its leader: most of the
		// machine's processes need no look at their environment.
		if !in[p.pid] && (len(tagPrefixes) > 0 || len(tags) > 0 && p.start >= minStart) {
			if tag := readTag(p.pid); tag != "" {
				for _, t := range tags {
					if tag == t {
						in[p.pid] = true
					}
				}
				for _, t := range tagPrefixes {
					if strings.HasPrefix(tag, t) {
						in[p.pid] = true
					}
				}
			}
		}
	}
	// Descendants of members are members.
	queue := make([]int, 0, len(in))
	for pid := range in {
		queue = append(queue, pid)
	}
	for len(queue) > 0 {
		pid := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		for _, c := range children[pid] {
			if !in[c] {
				in[c] = true
				queue = append(queue, c)
			}
		}
	}
	var out []procStat
	for pid := range in {
		if p, ok := byPid[pid]; ok && p.state != 'Z' && p.state != 'X' && pid != self {
			out = append(out, p)
		}
	}
	return out
}

// sweep kills what a previous server instance on this data dir left running
// (after a kill -9 nothing of it ran its cleanup): the groups of its records,
// every process tagged by an instance that no longer runs, and the cgroups of
// such instances. It returns how many processes it killed.
func (c *containment) sweep() int {
	procs := allProcs()
	deadInstance := c.deadInstance
	var prefixes, cgroups []string
	seen := map[string]bool{}
	addInstance := func(inst string) {
		if !seen[inst] {
			seen[inst] = true
			prefixes = append(prefixes, c.owner+"/"+inst+"/")
			if c.cg != noCgroup {
				cgroups = append(cgroups, cgroupTree(filepath.Join(c.cgRoot, inst))...)
			}
		}
	}
	// Instances named by tags in /proc.
	for _, p := range procs {
		if tag := readTag(p.pid); strings.HasPrefix(tag, c.owner+"/") {
			if inst, _, ok := strings.Cut(tag[len(c.owner)+1:], "/"); ok && deadInstance(inst) {
				addInstance(inst)
			}
		}
	}
	// Instances with cgroups.
	if c.cg != noCgroup {
		if entries, err := os.ReadDir(c.cgRoot); err == nil {
			for _, e := range entries {
				if e.IsDir() && !strings.HasPrefix(e.Name(), "probe-") && deadInstance(e.Name()) {
					addInstance(e.Name())
				}
			}
		}
	}
	// Records.
	records, insts, leaders := c.leftRecords()
	for _, inst := range insts {
		addInstance(inst)
	}
	if len(prefixes) == 0 {
		c.tidyOthers(deadInstance)
		return 0
	}
	defer c.tidyOthers(deadInstance)
	killed := len(findMembers(procs, nil, prefixes, leaders, cgroups))
	if killUntilGone(c.cg, nil, prefixes, leaders, cgroups) {
		for _, r := range records {
			_ = os.Remove(r)
		}
		if c.cg != noCgroup {
			for inst := range seen {
				_ = os.Remove(filepath.Join(c.cgRoot, inst))
			}
		}
	}
	return killed
}

// deadInstance reports whether inst names a server instance on this data
// dir, other than this one, that no longer runs.
func (c *containment) deadInstance(inst string) bool {
	if inst == c.instance {
		return false
	}
	pidText, startText, ok := strings.Cut(inst, ".")
	pid, err1 := strconv.Atoi(pidText)
	start, err2 := strconv.ParseUint(startText, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return true
	}
	st, alive := readStat(pid)
	return !alive || st.start != start
}

// leftRecords returns the records dead instances left in the run dir, the
// instance of each, and the group leaders they name (of this boot only).
func (c *containment) leftRecords() (records, insts []string, leaders []procStat) {
	entries, err := os.ReadDir(c.runDir)
	if err != nil {
		return nil, nil, nil
	}
	for _, e := range entries {
		path := filepath.Join(c.runDir, e.Name())
		inst, _, _ := strings.Cut(e.Name(), "_")
		if !c.deadInstance(inst) {
			continue
		}
		records, insts = append(records, path), append(insts, inst)
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		lines := strings.Split(string(b), "\n")
		if len(lines) < 2 || lines[0] != c.bootID {
			continue // another boot: those processes are long gone
		}
		var l procStat
		if _, err := fmt.Sscanf(lines[1], "%d %d %d %d", &l.pid, &l.pgid, &l.sid, &l.start); err == nil {
			leaders = append(leaders, l)
		}
	}
	return records, insts, leaders
}

// cgroupTree is dir's child cgroups, deepest first, then dir.
func cgroupTree(dir string) []string {
	var out []string
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, cgroupTree(filepath.Join(dir, e.Name()))...)
		}
	}
	return append(out, dir)
}

// close removes this instance's cgroup directory (its groups removed theirs).
func (c *containment) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tidy()
}

// tidy removes this instance's cgroup directory and the owner's if they are
// empty (removing a cgroup directory with a child fails). Caller holds c.mu.
func (c *containment) tidy() {
	if c.cg != noCgroup {
		_ = os.Remove(c.instanceDir())
		_ = os.Remove(c.cgRoot)
	}
}

// ownerRoot is the name of a process runtime's cgroup directory
// ("keelson-" + ownerOf). Other keelson-* cgroups sit beside them: the docker
// runtime's build parents (keelson-build-*), whose pids.max is the build's
// limit and in which the engine makes each step's cgroup, empty for a moment.
var ownerRoot = regexp.MustCompile(`^keelson-[0-9a-f]{16}$`)

// tidyOthers removes the empty cgroup directories of server instances that no
// longer run, of any data dir (what a server killed with -9 left, when no
// server starts on its data dir again). A cgroup holding a process cannot be
// removed, so nothing running is touched.
func (c *containment) tidyOthers(dead func(inst string) bool) {
	if c.cg == noCgroup {
		return
	}
	roots, _ := filepath.Glob(filepath.Join(filepath.Dir(c.cgRoot), "keelson-*"))
	for _, root := range roots {
		if !ownerRoot.MatchString(filepath.Base(root)) {
			continue
		}
		insts, _ := os.ReadDir(root)
		for _, inst := range insts {
			if inst.IsDir() && !strings.HasPrefix(inst.Name(), "probe-") && dead(inst.Name()) {
				for _, cg := range cgroupTree(filepath.Join(root, inst.Name())) {
					_ = os.Remove(cg)
				}
			}
		}
		_ = os.Remove(root)
	}
}

// procStat is what /proc/<pid>/stat says of a process.
type procStat struct {
	pid, ppid, pgid, sid int
	state                byte
	start                uint64 // clock ticks after boot
}

func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	return parseStat(pid, b)
}

func parseStat(pid int, b []byte) (procStat, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, false
	}
	// After "pid (comm)": state ppid pgrp session tty_nr tpgid flags minflt
	// cminflt majflt cmajflt utime stime cutime cstime priority nice
	// num_threads itrealvalue starttime ...
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return procStat{}, false
	}
	p := procStat{pid: pid, state: f[0][0]}
	p.ppid, _ = strconv.Atoi(f[1])
	p.pgid, _ = strconv.Atoi(f[2])
	p.sid, _ = strconv.Atoi(f[3])
	p.start, _ = strconv.ParseUint(f[19], 10, 64)
	return p, true
}

// allProcs reads the stat of every process.
func allProcs() []procStat {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := make([]procStat, 0, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readStat(pid); ok {
			out = append(out, st)
		}
	}
	return out
}

// environ is the process's initial environment (NUL-separated KEY=value).
func environ(pid int) ([]byte, error) {
	return os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
}

// readTag is the value of tagVar in the process's initial environment.
func readTag(pid int) string {
	b, err := environ(pid)
	if err != nil {
		return ""
	}
	prefix := []byte(tagVar + "=")
	for kv := range bytes.SplitSeq(b, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, prefix); ok {
			return string(v)
		}
	}
	return ""
}
