// Package buildcg is one image build's cgroup parent: the classic builder
// takes no pids limit for its RUN containers, but it honours a cgroup
// parent, and a pids.max on that parent bounds every process of the build.
package buildcg

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

// Root is where the host's cgroup file systems are mounted. The server
// must see the host's (the engine resolves the parent there).
const Root = "/sys/fs/cgroup"

// Cgroup is one build's cgroup parent, made by the server before the
// build and removed after it.
type Cgroup struct {
	root   string
	name   string // keelson-build-<instance>-<deployment>
	v2     bool
	Parent string // as the engine takes it (ImageBuildOptions.CgroupParent)
}

// New makes the parent cgroup name with pids.max = pids. An
// error means the build would run without the limit, so it must not run.
func New(root, name string, pids int64) (*Cgroup, error) {
	cg := &Cgroup{root: root, name: name, Parent: "/" + name}
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		cg.v2 = true
		// The pids controller must be delegated to the root's children.
		if err := os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+pids"), 0); err != nil &&
			!strings.Contains(ReadFile(filepath.Join(root, "cgroup.subtree_control")), "pids") {
			return nil, fmt.Errorf("enabling the pids controller: %w", err)
		}
	} else if _, err := os.Stat(filepath.Join(root, "pids")); err != nil {
		return nil, fmt.Errorf("no pids controller under %s (cgroup v1 without pids, or not mounted): %w", root, err)
	}
	dir := cg.PidsDir()
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.FormatInt(pids, 10)), 0); err != nil {
		cg.Remove()
		return nil, fmt.Errorf("setting pids.max: %w", err)
	}
	if got := strings.TrimSpace(ReadFile(filepath.Join(dir, "pids.max"))); got != strconv.FormatInt(pids, 10) {
		cg.Remove()
		return nil, fmt.Errorf("pids.max reads %q after writing %d", got, pids)
	}
	return cg, nil
}

// PidsDir is the directory holding the parent's pids.max.
func (cg *Cgroup) PidsDir() string {
	if cg.v2 {
		return filepath.Join(cg.root, cg.name)
	}
	return filepath.Join(cg.root, "pids", cg.name)
}

// Remove deletes the parent in every hierarchy the engine made it in (on v1,
// runc makes it under each controller). A step's container cgroup may still
// be going away as the build ends, so a busy parent is tried again for a
// few seconds.
func (cg *Cgroup) Remove() error {
	dirs := []string{cg.PidsDir()}
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

// ReadFile is the text of the file at p, "" when it cannot be read.
func ReadFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// Sweep removes the empty build parents of instance that a
// server killed during a build left behind (a parent still holding a
// step's cgroup is busy and stays).
func Sweep(root, instance string) {
	for _, pattern := range []string{filepath.Join(root, "*", "keelson-build-"+instance+"-*"), filepath.Join(root, "keelson-build-"+instance+"-*")} {
		found, _ := filepath.Glob(pattern)
		for _, d := range found {
			_ = os.Remove(d)
		}
	}
}
