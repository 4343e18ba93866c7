package forge

import (
	"encoding/json"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// CommitRE is a full or abbreviated commit id, as deployments accepts it.
var CommitRE = regexp.MustCompile(`^[0-9a-f]{7,64}$`)

// Payload is what Keelson reads of a push (or any event) of GitHub,
// Gitea/Forgejo/Gogs and GitLab; unknown fields are ignored. GitHub and Gitea
// name the repository under "repository"; GitLab under "project" (its
// "repository" carries URLs only).
type Payload struct {
	Ref         string  `json:"ref"`
	Before      string  `json:"before"`
	After       string  `json:"after"`
	CheckoutSHA *string `json:"checkout_sha"` // GitLab: the commit to check out; null when the branch was deleted
	Deleted     bool    `json:"deleted"`
	HeadCommit  *struct {
		ID      string `json:"id"`
		Message string `json:"message"`
	} `json:"head_commit"`
	Commits []struct {
		ID      string `json:"id"`
		Message string `json:"message"`
	} `json:"commits"`
	Repository *struct {
		ID            json.RawMessage `json:"id"` // a number on GitHub and Gitea
		FullName      string          `json:"full_name"`
		HTMLURL       URL             `json:"html_url"`
		CloneURL      URL             `json:"clone_url"`
		SSHURL        URL             `json:"ssh_url"`
		DefaultBranch string          `json:"default_branch"`
		GitHTTPURL    URL             `json:"git_http_url"` // GitLab
		GitSSHURL     URL             `json:"git_ssh_url"`  // GitLab
	} `json:"repository"`
	Project *struct {
		ID                int64  `json:"id"`
		PathWithNamespace string `json:"path_with_namespace"`
		WebURL            URL    `json:"web_url"`
		GitHTTPURL        URL    `json:"git_http_url"`
		GitSSHURL         URL    `json:"git_ssh_url"`
		DefaultBranch     string `json:"default_branch"`
	} `json:"project"`
	Pusher *struct {
		Name     string `json:"name"`
		Login    string `json:"login"`
		Username string `json:"username"`
	} `json:"pusher"`
	UserUsername string `json:"user_username"` // GitLab
}

// MaxURL is the longest repository URL a repository webhook is matched by.
const MaxURL = 2048

// URL is a repository URL of a webhook payload, bounded where it is
// decoded: no repository URL is longer than MaxURL (surrounding space
// aside), so a longer one decodes as "" (absent). An unsigned payload naming
// a 25 MB "URL" must not cost a database query built from it.
type URL string

// UnmarshalJSON decodes a URL, "" when longer than MaxURL.
func (u *URL) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	if len(strings.TrimSpace(s)) > MaxURL {
		s = ""
	}
	*u = URL(s)
	return nil
}

// Identity returns the repository's URLs (ssh ones as their https twin) and
// its host id ("" when none).
func (p *Payload) Identity() (urls []string, id string) {
	add := func(hu URL) {
		if u := strings.TrimSpace(string(hu)); u != "" && len(urls) < 8 {
			if h := SSHToHTTPS(u); h != "" {
				u = h
			}
			urls = append(urls, u)
		}
	}
	if r := p.Repository; r != nil {
		for _, u := range []URL{r.CloneURL, r.HTMLURL, r.SSHURL, r.GitHTTPURL, r.GitSSHURL} {
			add(u)
		}
		if n, err := strconv.ParseInt(string(r.ID), 10, 64); err == nil && n > 0 {
			id = strconv.FormatInt(n, 10)
		}
	}
	if pr := p.Project; pr != nil {
		for _, u := range []URL{pr.GitHTTPURL, pr.WebURL, pr.GitSSHURL} {
			add(u)
		}
		if pr.ID > 0 {
			id = strconv.FormatInt(pr.ID, 10)
		}
	}
	return urls, id
}

// FullName is the repository's owner/name (GitLab: its path with namespace).
func (p *Payload) FullName() string {
	if p.Project != nil && p.Project.PathWithNamespace != "" {
		return p.Project.PathWithNamespace
	}
	if p.Repository != nil {
		return p.Repository.FullName
	}
	return ""
}

// Push is the deciding part of a push payload of any of the three hosts.
func (p *Payload) Push() *Push {
	out := &Push{Ref: p.Ref, Before: p.Before, After: p.After}
	if p.CheckoutSHA != nil && *p.CheckoutSHA != "" {
		out.After = *p.CheckoutSHA
	}
	out.Deleted = p.Deleted || isZeroSHA(p.After)
	switch {
	case p.HeadCommit != nil:
		out.HeadCommitMessage = p.HeadCommit.Message
	default:
		for _, c := range p.Commits {
			if c.ID == out.After {
				out.HeadCommitMessage = c.Message
			}
		}
	}
	out.Repository.FullName = p.FullName()
	if p.Repository != nil {
		out.Repository.HTMLURL, out.Repository.CloneURL = string(p.Repository.HTMLURL), string(p.Repository.CloneURL)
		out.Repository.DefaultBranch = p.Repository.DefaultBranch
	}
	if p.Project != nil {
		out.Repository.HTMLURL, out.Repository.CloneURL = string(p.Project.WebURL), string(p.Project.GitHTTPURL)
		out.Repository.DefaultBranch = p.Project.DefaultBranch
	}
	if p.Pusher != nil {
		out.Pusher = FirstOf(p.Pusher.Login, p.Pusher.Username, p.Pusher.Name)
	} else {
		out.Pusher = p.UserUsername
	}
	return out
}

// SSHToHTTPS turns git@host:owner/repo.git or ssh://user@host[:port]/owner/repo.git
// into https://host/owner/repo.git, the form a project's repoUrl has. Anything
// else is "".
func SSHToHTTPS(u string) string {
	if strings.HasPrefix(u, "ssh://") {
		pu, err := url.Parse(u)
		if err != nil || pu.Hostname() == "" || pu.Path == "" {
			return ""
		}
		return "https://" + pu.Hostname() + pu.Path
	}
	if strings.Contains(u, "://") {
		return ""
	}
	userHost, path, ok := strings.Cut(u, ":")
	if !ok || path == "" || strings.HasPrefix(path, "/") {
		return ""
	}
	_, host, ok := strings.Cut(userHost, "@")
	if !ok || host == "" {
		return ""
	}
	return "https://" + host + "/" + path
}

func isZeroSHA(s string) bool { return s != "" && strings.Trim(s, "0") == "" }

// FirstOf is the first of vals that is not empty.
func FirstOf(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}
