package dockerfile

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/keelson-dev/keelson/deployments/rt"
)

// Presets are the images the framework presets build with and run on (the
// container runtime's Images).
type Presets struct {
	Go, GoRun, Node, Static string
}

// Generated is the name of the Dockerfile this runtime writes into
// a build context (the repository's own files keep their names).
const Generated = ".keelson.Dockerfile"

// unprivileged is the user generated images run as.
const unprivileged = "65534:65534"

// For returns the Dockerfile for a checkout: "" when the
// repository's own Dockerfile is used, else the generated text.
func For(job rt.Job, src string, img Presets) (string, error) {
	fw := strings.ToLower(strings.TrimSpace(job.Framework))
	if fi, err := os.Lstat(filepath.Join(src, "Dockerfile")); err == nil {
		if !fi.Mode().IsRegular() {
			return "", fmt.Errorf("the repository's Dockerfile is not a regular file (a symlink or a directory); it cannot be built")
		}
		return "", nil
	}
	custom := job.BuildCommand != "" || job.StartCommand != ""
	switch fw {
	case "docker", "dockerfile":
		return "", fmt.Errorf("framework %q needs a Dockerfile at the root of the repository, and there is none", job.Framework)
	case "go", "golang":
		if custom {
			return customDockerfile(img.Go, job, "./.keelson/app")
		}
		var b strings.Builder
		fmt.Fprintf(&b, "FROM %s AS build\nWORKDIR /src\nENV CGO_ENABLED=0\n", img.Go)
		if exists(filepath.Join(src, "go.mod")) {
			// Dependencies in their own layer: a redeploy that did not touch
			// go.mod/go.sum reuses it.
			if exists(filepath.Join(src, "go.sum")) {
				b.WriteString("COPY go.mod go.sum ./\n")
			} else {
				b.WriteString("COPY go.mod ./\n")
			}
			b.WriteString("RUN go mod download\n")
		}
		b.WriteString("COPY . .\nRUN go build -trimpath -o /out/app .\n")
		fmt.Fprintf(&b, "FROM %s\nCOPY --from=build /out/app /app\nUSER %s\nENTRYPOINT [\"/app\"]\n", img.GoRun, unprivileged)
		return b.String(), nil
	case "node", "nodejs", "express", "next", "nextjs", "nest", "nestjs":
		if custom {
			return customDockerfile(img.Node, job, "npm start")
		}
		var b strings.Builder
		fmt.Fprintf(&b, "FROM %s AS build\nWORKDIR /app\n", img.Node)
		if exists(filepath.Join(src, "package.json")) {
			b.WriteString("COPY package*.json ./\nRUN npm ci || npm install\n")
		}
		b.WriteString("COPY . .\nRUN npm run build --if-present\n")
		fmt.Fprintf(&b, "FROM %s\nWORKDIR /app\nCOPY --from=build /app /app\nENV NODE_ENV=production\nUSER %s\nCMD [\"npm\", \"start\"]\n", img.Node, unprivileged)
		return b.String(), nil
	case "static", "html":
		dir := "."
		for _, sub := range []string{"dist", "public", "build"} {
			if fi, err := os.Lstat(filepath.Join(src, sub)); err == nil && fi.IsDir() {
				dir = sub
				break
			}
		}
		// busybox httpd serves /site; a symlink in the repository can only
		// point inside the container's own file system.
		return fmt.Sprintf("FROM %s\nCOPY %s/ /site/\nUSER %s\nCMD [\"sh\", \"-c\", \"exec httpd -f -v -p \\\"$PORT\\\" -h /site\"]\n",
			img.Static, dir, unprivileged), nil
	}
	return "", fmt.Errorf("the repository has no Dockerfile and framework %q has no preset (presets: go, node, static; or add a Dockerfile)", job.Framework)
}

// customDockerfile runs the project's own commands in the preset's builder image.
func customDockerfile(image string, job rt.Job, defaultStart string) (string, error) {
	for _, c := range []string{job.BuildCommand, job.StartCommand} {
		if strings.ContainsAny(c, "\n\r\x00") {
			return "", fmt.Errorf("build and start commands must be one line")
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "FROM %s\nWORKDIR /src\nCOPY . .\n", image)
	if job.BuildCommand != "" {
		fmt.Fprintf(&b, "RUN %s\n", job.BuildCommand)
	}
	start := job.StartCommand
	if start == "" {
		start = defaultStart
	}
	fmt.Fprintf(&b, "USER %s\nCMD [\"sh\", \"-c\", %s]\n", unprivileged, strconv.Quote("exec "+start))
	return b.String(), nil
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// WriteContext writes src as a tar build context to w: regular files,
// directories and symlinks (as links, never followed), without .git; plus the
// generated Dockerfile when there is one.
func WriteContext(w io.Writer, src, dockerfile string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil || rel == "." {
			return err
		}
		if rel == ".git" {
			return filepath.SkipDir
		}
		if dockerfile != "" && rel == Generated {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		} else if !info.Mode().IsRegular() && !info.IsDir() {
			return nil // sockets, devices, fifos: not part of a build
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if info.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	if dockerfile != "" {
		if err := tw.WriteHeader(&tar.Header{Name: Generated, Mode: 0o644, Size: int64(len(dockerfile)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := io.WriteString(tw, dockerfile); err != nil {
			return err
		}
	}
	return tw.Close()
}
