package container

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The classic builder takes no pids limit for its RUN containers, but it
// honours a cgroup parent: each step's container cgroup is made under it, and
// a pids.max on the parent bounds every process of the build together.

// cgroupRoot is where the host's cgroup file systems are mounted. The server
// must see the host's (the engine resolves the parent there).
const cgroupRoot = "/sys/fs/cgroup"

// buildCgroup is one build's cgroup parent, made by the server before the
// build and removed after it.
type buildCgroup struct {
	root   string
	name   string // keelson-build-<instance>-<deployment>
	v2     bool
	parent string // as the engine takes it (ImageBuildOptions.CgroupParent)
}

// newBuildCgroup makes the parent cgroup name with pids.max = pids. An
// error means the build would run without the limit, so it must not run.
func newBuildCgroup(root, name string, pids int64) (*buildCgroup, error) {
	cg := &buildCgroup{root: root, name: name, parent: "/" + name}
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		cg.v2 = true
		// The pids controller must be delegated to the root's children.
		if err := os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+pids"), 0); err != nil &&
			!strings.Contains(readFile(filepath.Join(root, "cgroup.subtree_control")), "pids") {
			return nil, fmt.Errorf("enabling the pids controller: %w", err)
		}
	} else if _, err := os.Stat(filepath.Join(root, "pids")); err != nil {
		return nil, fmt.Errorf("no pids controller under %s (cgroup v1 without pids, or not mounted): %w", root, err)
	}
	dir := cg.pidsDir()
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.FormatInt(pids, 10)), 0); err != nil {
		cg.remove()
		return nil, fmt.Errorf("setting pids.max: %w", err)
	}
	if got := strings.TrimSpace(readFile(filepath.Join(dir, "pids.max"))); got != strconv.FormatInt(pids, 10) {
		cg.remove()
		return nil, fmt.Errorf("pids.max reads %q after writing %d", got, pids)
	}
	return cg, nil
}

// pidsDir is the directory holding the parent's pids.max.
func (cg *buildCgroup) pidsDir() string {
	if cg.v2 {
		return filepath.Join(cg.root, cg.name)
	}
	return filepath.Join(cg.root, "pids", cg.name)
}

// remove deletes the parent in every hierarchy the engine made it in (on v1,
// runc makes it under each controller). A step's container cgroup may still
// be going away as the build ends, so a busy parent is tried again for a
// few seconds.
func (cg *buildCgroup) remove() error {
	dirs := []string{cg.pidsDir()}
	if !cg.v2 {
		ents, _ := os.ReadDir(cg.root)
		for _, e := range ents {
			// Symlinks (cpu -> cpu,cpuacct) name a hierarchy listed anyway.
			if e.IsDir() && e.Name() != "pids" {
				dirs = append(dirs, filepath.Join(cg.root, e.Name(), cg.name))
			}
		}
	}
	var errs []error
	for _, d := range dirs {
		var err error
		for try := 0; try < 50; try++ {
			if err = os.Remove(d); err == nil || errors.Is(err, fs.ErrNotExist) {
				err = nil
				break
			}
			time.Sleep(100 * time.Millisecond) // a step's cgroup is still being removed by the engine
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// sweepBuildCgroups removes the empty build parents of instance that a
// server killed during a build left behind (a parent still holding a
// step's cgroup is busy and stays).
func sweepBuildCgroups(root, instance string) {
	for _, pattern := range []string{filepath.Join(root, "*", "keelson-build-"+instance+"-*"), filepath.Join(root, "keelson-build-"+instance+"-*")} {
		found, _ := filepath.Glob(pattern)
		for _, d := range found {
			_ = os.Remove(d)
		}
	}
}
