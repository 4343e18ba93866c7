// Package scratchimage makes an image FROM scratch without the builder: a
// Dockerfile of one stage FROM scratch whose steps only copy files of a
// checkout and set metadata becomes one layer and the config the classic
// builder would write, as a `docker save` archive the engine loads in one
// call. It is not a builder: Plan says no to anything else.
package scratchimage

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"
)

// Why: the classic builder commits each Dockerfile step by creating a
// container and committing it (about a second a step on fuse-overlayfs), so
// a prebuilt binary FROM scratch (COPY, ENTRYPOINT, LABEL) took seconds to
// build though nothing runs. The shape made here: one stage FROM scratch;
// COPY of the checkout's regular files and directories; ENTRYPOINT and CMD
// in JSON form, ENV, EXPOSE, WORKDIR, USER, LABEL without quotes or
// variables; no .dockerignore. One layer holds the copied files (owned by
// root, their modes kept). Key, for the container runtime's "no build for
// an unchanged context", is here too: a hash of what a build makes an image
// from.

// Image is a Dockerfile FROM scratch to make without the builder (Plan).
type Image struct {
	copies []scratchCopy
	config scratchConfig
	steps  []string // the Dockerfile's instructions, for the image history
}

type scratchCopy struct{ srcs []string }

// scratchConfig is the image config's "config" object (Docker's and OCI's
// field names).
type scratchConfig struct {
	Env          []string            `json:"Env,omitempty"`
	Entrypoint   []string            `json:"Entrypoint,omitempty"`
	Cmd          []string            `json:"Cmd,omitempty"`
	WorkingDir   string              `json:"WorkingDir,omitempty"`
	User         string              `json:"User,omitempty"`
	Labels       map[string]string   `json:"Labels,omitempty"`
	ExposedPorts map[string]struct{} `json:"ExposedPorts,omitempty"`
	dests        []string            // each copy's destination, as written
}

// defaultPath is the PATH the builder gives an image that sets none.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Plan reads text (the Dockerfile, labels appended) for a checkout at
// src; ok is false when the builder must make it.
func Plan(text, src string) (img *Image, ok bool) {
	if exists(filepath.Join(src, ".dockerignore")) {
		return nil, false
	}
	img = &Image{config: scratchConfig{Env: []string{defaultPath}, Labels: map[string]string{}, ExposedPorts: map[string]struct{}{}}}
	lines := dockerfileLines(text)
	if lines == nil || !strings.EqualFold(strings.Join(strings.Fields(lines[0]), " "), "FROM scratch") {
		return nil, false
	}
	for _, l := range lines[1:] {
		if !img.step(l) {
			return nil, false
		}
		img.steps = append(img.steps, l)
	}
	return img, true
}

// dockerfileLines answers the instructions of text, continuations joined;
// nil when it has parser directives or characters this path leaves to the
// builder (quotes are allowed only in JSON forms, checked by step).
func dockerfileLines(text string) []string {
	var out []string
	var cur strings.Builder
	for i, raw := range strings.Split(text, "\n") {
		l := strings.TrimSpace(raw)
		if strings.HasPrefix(l, "#") {
			if i == 0 && strings.Contains(l, "=") {
				return nil // a parser directive (escape, syntax)
			}
			continue
		}
		if strings.ContainsAny(strings.TrimSuffix(l, "\\"), "$\\`'") {
			return nil // variables, escapes, single quotes: the builder's rules
		}
		if c, ok := strings.CutSuffix(l, "\\"); ok {
			cur.WriteString(c + " ")
			continue
		}
		cur.WriteString(l)
		if s := strings.TrimSpace(cur.String()); s != "" {
			out = append(out, s)
		}
		cur.Reset()
	}
	if cur.Len() > 0 {
		return nil
	}
	return out
}

// step applies one instruction; false for one this path does not make.
func (img *Image) step(l string) bool {
	kw, args, _ := strings.Cut(l, " ")
	args = strings.TrimSpace(args)
	c := &img.config
	switch strings.ToUpper(kw) {
	case "COPY":
		words := strings.Fields(args)
		if len(words) < 2 || strings.HasPrefix(words[0], "--") || strings.ContainsAny(args, "\"*?[") {
			return false
		}
		dest := words[len(words)-1]
		if !path.IsAbs(dest) { // relative to the work directory, its trailing slash kept
			dest = strings.TrimSuffix(path.Join("/", c.WorkingDir, dest), "/") + dest[len(strings.TrimRight(dest, "/")):]
		}
		img.copies = append(img.copies, scratchCopy{srcs: words[:len(words)-1]})
		c.dests = append(c.dests, dest)
		return true
	case "ENTRYPOINT", "CMD":
		var v []string
		if json.Unmarshal([]byte(args), &v) != nil {
			return false // the shell form needs a shell, which scratch has not
		}
		if strings.ToUpper(kw) == "CMD" {
			c.Cmd = v
		} else {
			c.Entrypoint = v
		}
		return true
	}
	if strings.Contains(args, "\"") {
		return img.quotedLabel(kw, args)
	}
	return img.meta(strings.ToUpper(kw), args)
}

// quotedLabel takes the LABEL line the runtime appends ("k"="v" pairs).
func (img *Image) quotedLabel(kw, args string) bool {
	if !strings.EqualFold(kw, "LABEL") {
		return false
	}
	for _, pair := range strings.Fields(args) {
		k, v, ok := strings.Cut(pair, "=")
		if !ok || len(k) < 2 || len(v) < 2 || k[0] != '"' || v[0] != '"' {
			return false
		}
		var ks, vs string
		if json.Unmarshal([]byte(k), &ks) != nil || json.Unmarshal([]byte(v), &vs) != nil {
			return false
		}
		img.config.Labels[ks] = vs
	}
	return true
}

// meta applies ENV, EXPOSE, WORKDIR, USER and LABEL (no quotes).
func (img *Image) meta(kw, args string) bool {
	c := &img.config
	words := strings.Fields(args)
	if len(words) == 0 {
		return false
	}
	switch kw {
	case "ENV", "LABEL":
		set := func(k, v string) {
			if kw == "LABEL" {
				c.Labels[k] = v
				return
			}
			c.Env = setEnv(c.Env, k, v)
		}
		if !strings.Contains(words[0], "=") {
			set(words[0], strings.TrimSpace(strings.TrimPrefix(args, words[0])))
			return kw == "ENV"
		}
		for _, w := range words {
			k, v, ok := strings.Cut(w, "=")
			if !ok || k == "" {
				return false
			}
			set(k, v)
		}
	case "EXPOSE":
		for _, w := range words {
			if !strings.Contains(w, "/") {
				w += "/tcp"
			}
			c.ExposedPorts[w] = struct{}{}
		}
	case "WORKDIR":
		if len(words) != 1 {
			return false
		}
		if !path.IsAbs(words[0]) {
			words[0] = path.Join("/", c.WorkingDir, words[0])
		}
		c.WorkingDir = path.Clean(words[0])
	case "USER":
		if len(words) != 1 {
			return false
		}
		c.User = words[0]
	default:
		return false
	}
	return true
}

func setEnv(env []string, k, v string) []string {
	for i, e := range env {
		if strings.HasPrefix(e, k+"=") {
			env[i] = k + "=" + v
			return env
		}
	}
	return append(env, k+"="+v)
}

// configJSON is the image config: what the builder would record.
func (img *Image) configJSON(diffID string) ([]byte, error) {
	now := time.Now().UTC().Format(time.RFC3339Nano)
	// One history entry per step; the one layer is the first COPY's.
	hist := []map[string]any{{"created": now, "created_by": "FROM scratch (made by Keelson without the builder)"}}
	for _, s := range img.steps {
		hist = append(hist, map[string]any{"created": now, "created_by": s, "empty_layer": true})
	}
	for _, h := range hist[1:] {
		if strings.HasPrefix(strings.ToUpper(h["created_by"].(string)), "COPY") {
			delete(h, "empty_layer")
			hist[0]["empty_layer"] = true
			break
		}
	}
	return json.Marshal(map[string]any{
		"architecture": runtime.GOARCH, "os": "linux", "created": now, "config": img.config,
		"rootfs":  map[string]any{"type": "layers", "diff_ids": []string{diffID}},
		"history": hist,
	})
}

// writeImageArchive writes the `docker save` archive of one image: its
// config, its one layer, and the manifest naming tag.
func writeImageArchive(w io.Writer, cfg []byte, layer io.Reader, size int64, tag string) error {
	tw := tar.NewWriter(w)
	sum := sha256.Sum256(cfg)
	cfgName := hex.EncodeToString(sum[:]) + ".json"
	manifest, err := json.Marshal([]map[string]any{{"Config": cfgName, "RepoTags": []string{tag}, "Layers": []string{"layer/layer.tar"}}})
	if err != nil {
		return err
	}
	files := []struct {
		name string
		body io.Reader
		size int64
	}{{cfgName, strings.NewReader(string(cfg)), int64(len(cfg))}, {"layer/layer.tar", layer, size},
		{"manifest.json", strings.NewReader(string(manifest)), int64(len(manifest))}}
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: f.size, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := io.Copy(tw, f.body); err != nil {
			return err
		}
	}
	return tw.Close()
}

// writeLayer writes the layer: each COPY's sources at its destination, the
// directories leading there and the work directory, as the builder does.
func (img *Image) writeLayer(w io.Writer, src string) error {
	l := &layerWriter{tw: tar.NewWriter(w), dirs: map[string]bool{}}
	if wd := img.config.WorkingDir; wd != "" && wd != "/" {
		if err := l.dir(wd[1:]); err != nil {
			return err
		}
	}
	for i, c := range img.copies {
		dest := img.config.dests[i]
		for _, s := range c.srcs {
			if err := l.copy(src, s, dest, len(c.srcs) > 1); err != nil {
				return err
			}
		}
	}
	return l.tw.Close()
}

type layerWriter struct {
	tw   *tar.Writer
	dirs map[string]bool // directories written
}

// dir writes directory p (relative, no leading slash) and its parents once.
func (l *layerWriter) dir(p string) error {
	p = strings.Trim(path.Clean(p), "/")
	if p == "" || p == "." || l.dirs[p] {
		return nil
	}
	if err := l.dir(path.Dir(p)); err != nil {
		return err
	}
	l.dirs[p] = true
	return l.tw.WriteHeader(&tar.Header{Name: p + "/", Mode: 0o755, Typeflag: tar.TypeDir, ModTime: time.Unix(0, 0)})
}

// copy writes the source s of the checkout at root to dest as COPY does: a
// file to dest (into it when dest ends in / or there are several sources),
// a directory's contents into dest.
func (l *layerWriter) copy(root, s, dest string, many bool) error {
	rel := path.Clean("/" + s)[1:]
	if rel == ".git" || strings.HasPrefix(rel, ".git/") {
		return ErrNotPlain
	}
	p := filepath.Join(root, filepath.FromSlash(rel))
	fi, err := os.Lstat(p)
	if err != nil {
		return fmt.Errorf("COPY %s: %w", s, ErrNotPlain)
	}
	into := strings.HasSuffix(dest, "/") || many
	dest = strings.Trim(path.Clean(dest), "/")
	into = into || l.dirs[dest]
	switch {
	case fi.Mode().IsRegular():
		if into {
			dest = path.Join(dest, path.Base(rel))
		}
		if err := l.dir(path.Dir(dest)); err != nil {
			return err
		}
		return l.file(p, dest, fi)
	case fi.IsDir():
		if err := l.dir(dest); err != nil {
			return err
		}
		return filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
			if err != nil || q == p {
				return err
			}
			r, _ := filepath.Rel(p, q)
			if rel == "" && (r == ".git" || strings.HasPrefix(r, ".git"+string(filepath.Separator))) {
				return filepath.SkipDir
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			target := path.Join(dest, filepath.ToSlash(r))
			switch {
			case info.IsDir():
				return l.dir(target)
			case info.Mode().IsRegular():
				return l.file(q, target, info)
			}
			return ErrNotPlain // a symlink or a special file: the builder's rules
		})
	}
	return ErrNotPlain
}

// file writes the regular file p as name, owned by root, its mode kept.
func (l *layerWriter) file(p, name string, fi fs.FileInfo) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := l.tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(name, "/"), Mode: int64(fi.Mode().Perm()), Size: fi.Size(),
		Typeflag: tar.TypeReg, ModTime: fi.ModTime()}); err != nil {
		return err
	}
	_, err = io.Copy(l.tw, f)
	return err
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// ErrNotPlain sends a Dockerfile back to the builder: a source it cannot
// copy as the builder would (a symlink, a path outside the checkout).
var ErrNotPlain = errors.New("not a plain scratch image")

// Layer is an image's one layer, written to a file.
type Layer struct {
	img    *Image
	file   *os.File
	size   int64
	diffID string
}

// MakeLayer writes img's layer from the checkout at src to a file under tmp
// (hashed as it is written); ErrNotPlain when a source is not plain. Close
// removes the file.
func (img *Image) MakeLayer(tmp, src string) (*Layer, error) {
	f, err := os.CreateTemp(tmp, "layer-*.tar")
	if err != nil {
		return nil, err
	}
	l := &Layer{img: img, file: f}
	h := sha256.New()
	if err := img.writeLayer(io.MultiWriter(f, h), src); err != nil {
		l.Close()
		return nil, err
	}
	if l.size, err = f.Seek(0, io.SeekCurrent); err != nil {
		l.Close()
		return nil, err
	}
	l.diffID = "sha256:" + hex.EncodeToString(h.Sum(nil))
	return l, nil
}

// Close removes the layer's file.
func (l *Layer) Close() {
	l.file.Close()
	os.Remove(l.file.Name())
}

// WriteArchive writes the `docker save` archive of the image tag.
func (l *Layer) WriteArchive(w io.Writer, tag string) error {
	if _, err := l.file.Seek(0, io.SeekStart); err != nil {
		return err
	}
	cfg, err := l.img.configJSON(l.diffID)
	if err != nil {
		return err
	}
	return writeImageArchive(w, cfg, l.file, l.size, tag)
}

// Key is the key of a build: the checkout's git tree, the Dockerfile as
// built, and the id of each image it builds on (ref -> id).
func Key(tree, dockerfile string, images map[string]string) string {
	h := sha256.New()
	fmt.Fprintf(h, "tree %s\ndockerfile %d\n%s\n", tree, len(dockerfile), dockerfile)
	refs := make([]string, 0, len(images))
	for ref := range images {
		refs = append(refs, ref)
	}
	sort.Strings(refs)
	for _, ref := range refs {
		fmt.Fprintf(h, "image %s %s\n", ref, images[ref])
	}
	return hex.EncodeToString(h.Sum(nil))
}
