package process

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/keelson-dev/keelson/deployments/rt"
)

// preset is what a framework runs when the project sets no command.
type preset struct {
	build  string
	start  string
	static bool // start serves files in-process instead of running a command
}

func presetFor(framework string) (preset, bool) {
	switch strings.ToLower(strings.TrimSpace(framework)) {
	case "go", "golang":
		return preset{build: "go build -trimpath -o ./.keelson/app .", start: "./.keelson/app"}, true
	case "node", "nodejs", "express", "next", "nextjs", "nest", "nestjs":
		return preset{build: "(npm ci || npm install) && npm run build --if-present", start: "npm start"}, true
	case "static", "html":
		return preset{static: true}, true
	}
	return preset{}, false
}

// buildCommand is the job's build command, or its preset's ("" = no build).
func buildCommand(job rt.Job) (string, error) {
	if job.BuildCommand != "" {
		return job.BuildCommand, nil
	}
	p, ok := presetFor(job.Framework)
	if !ok {
		return "", fmt.Errorf("no build command is set and framework %q has no preset (presets: go, node, static)", job.Framework)
	}
	return p.build, nil
}

// startCommand is the job's start command or its preset's; static reports that
// the in-process file server should serve the workspace instead.
func startCommand(job rt.Job) (cmd string, static bool, err error) {
	if job.StartCommand != "" {
		return job.StartCommand, false, nil
	}
	p, ok := presetFor(job.Framework)
	if !ok {
		return "", false, fmt.Errorf("no start command is set and framework %q has no preset (presets: go, node, static)", job.Framework)
	}
	return p.start, p.static, nil
}

// outputDir is where presets put what they build, inside the checkout.
const outputDir = ".keelson"

// checkOutputDir refuses a checkout whose .keelson is anything but a plain
// directory: a repository committing `.keelson -> /elsewhere` would otherwise
// make the go preset write its binary outside the checkout and start whatever
// the link points at.
func checkOutputDir(checkout string) error {
	fi, err := os.Lstat(filepath.Join(checkout, outputDir))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("checking %s/: %w", outputDir, err)
	case !fi.IsDir():
		return fmt.Errorf("the repository's %s is not a directory (it is reserved for build output; a symlink there is refused)", outputDir)
	}
	return nil
}
