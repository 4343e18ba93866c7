package projects

import (
	"regexp"
	"slices"
	"strings"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/repourl"
	"github.com/keelson-dev/keelson/projects/slugs"
)

// Limits of input sizes (also declared in the OpenAPI document).
const (
	MaxEnvVars = 100
	// MinSecretLen is the shortest secret env value accepted: shorter ones
	// cannot be masked in logs safely (masking "x" replaces every x of the
	// output while hiding nothing), so they are refused rather than stored
	// and shown. deployments.MinSecretLen is the same number.
	MinSecretLen     = 8
	MaxEnvKeyLen     = 128
	MaxEnvValueLen   = 16 << 10
	MaxEnvTotalBytes = 256 << 10
	MaxSlugLen       = slugs.MaxLen
)

var (
	envKeyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	branchRE = regexp.MustCompile(`^[A-Za-z0-9._/-]+$`)
)

// reservedEnv are keys the runtime sets itself.
var reservedEnv = map[string]string{
	"PORT": "PORT is reserved: the runtime sets it to the port it assigns the app",
}

// noNUL rejects strings the database and the process environment cannot hold.
func noNUL(field, v string) error {
	if strings.ContainsRune(v, 0) {
		return platform.Invalidf("%s: must not contain NUL characters", field)
	}
	return nil
}

// checkRepoURL validates raw and returns it (trimmed) and its normalized key.
func checkRepoURL(raw string, allowLocal bool) (repo, key string, err error) {
	u, err := repourl.Parse(raw, repourl.Allow{Local: allowLocal})
	if err != nil {
		return "", "", platform.Invalid("repoUrl: " + err.Error())
	}
	return u.Raw, u.Key, nil
}

// NormalizeRepoURL is the key ProjectsForRepository matches on: lower-case
// scheme and host, no trailing ".git" or "/". It returns "" for a URL it
// cannot parse.
func NormalizeRepoURL(raw string) string { return repourl.Normalize(raw) }

// checkBranch accepts git branch names that cannot be mistaken for options.
func checkBranch(field, b string) error {
	if b == "" {
		return nil
	}
	if !branchRE.MatchString(b) || strings.HasPrefix(b, "-") || strings.HasPrefix(b, "/") ||
		strings.HasSuffix(b, "/") || strings.HasSuffix(b, ".lock") || strings.HasSuffix(b, ".") ||
		strings.Contains(b, "..") || strings.Contains(b, "//") {
		return platform.Invalidf("%s: not a valid git branch name", field)
	}
	return nil
}

func (s *Service) checkRegion(r string) error {
	if slices.Contains(s.d.Regions, r) {
		return nil
	}
	return platform.Invalidf("region: must be one of %s", strings.Join(s.d.Regions, ", "))
}
