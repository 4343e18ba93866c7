package githubfake

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Push describes a push event.
type Push struct {
	Installation int64       // 0: no installation field (a repository webhook)
	Repo         *Repository // required
	Branch       string      // ref is refs/heads/<Branch> unless Ref is set
	Ref          string
	Before       string // default: a random sha
	After        string // the pushed head; default: a random sha
	Message      string // head commit message
	Deleted      bool   // a branch deletion: after is all zeros, head_commit null
	Pusher       string // default "octocat"
}

// RandomSHA returns 40 random hex digits.
func RandomSHA() string {
	b := make([]byte, 20)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// PushPayload builds a push event payload shaped like GitHub's.
func (s *Server) PushPayload(p Push) []byte {
	s.mu.Lock()
	s.fillRepo(p.Repo, p.Repo.Owner)
	s.mu.Unlock()
	ref := p.Ref
	if ref == "" {
		ref = "refs/heads/" + p.Branch
	}
	if p.Before == "" {
		p.Before = RandomSHA()
	}
	if p.After == "" {
		p.After = RandomSHA()
	}
	if p.Pusher == "" {
		p.Pusher = "octocat"
	}
	now := time.Now().UTC().Format(time.RFC3339)
	var head any
	commits := []any{}
	if p.Deleted {
		p.After = strings.Repeat("0", 40)
	} else {
		c := map[string]any{
			"id": p.After, "tree_id": RandomSHA(), "distinct": true, "message": p.Message, "timestamp": now,
			"url":       p.Repo.HTMLURL + "/commit/" + p.After,
			"author":    map[string]string{"name": p.Pusher, "email": p.Pusher + "@example.com", "username": p.Pusher},
			"committer": map[string]string{"name": p.Pusher, "email": p.Pusher + "@example.com", "username": p.Pusher},
			"added":     []string{}, "removed": []string{}, "modified": []string{"README.md"},
		}
		head, commits = c, []any{c}
	}
	repo := s.repoJSON(p.Repo)
	repo["pushed_at"] = time.Now().Unix() // push payloads carry unix times here
	repo["master_branch"] = p.Repo.DefaultBranch
	body := map[string]any{
		"ref": ref, "before": p.Before, "after": p.After,
		"created": false, "deleted": p.Deleted, "forced": false, "base_ref": nil,
		"compare":     p.Repo.HTMLURL + "/compare/" + p.Before[:12] + "..." + p.After[:12],
		"commits":     commits,
		"head_commit": head,
		"repository":  repo,
		"pusher":      map[string]string{"name": p.Pusher, "email": p.Pusher + "@example.com"},
		"sender":      accountJSON(p.Pusher, 583231, "User", s.WebURL),
	}
	if p.Installation != 0 {
		body["installation"] = map[string]any{"id": p.Installation, "node_id": "MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9u" + strconv.FormatInt(p.Installation, 10)}
	}
	return mustJSON(body)
}

// InstallationPayload builds an installation event (action created, deleted,
// suspend, unsuspend, new_permissions_accepted) for installation id.
func (s *Server) InstallationPayload(action string, id int64) []byte {
	in := s.lockInstallation(id)
	inst := s.installationJSON(in)
	repos := make([]map[string]any, 0, len(in.Repositories))
	for _, r := range in.Repositories {
		repos = append(repos, map[string]any{
			"id": r.ID, "node_id": "R_kgDO" + strconv.FormatInt(r.ID, 10), "name": r.Name, "full_name": r.FullName(), "private": r.Private,
		})
	}
	sender := accountJSON(in.Account, in.AccountID, "User", s.WebURL)
	s.mu.Unlock()
	body := map[string]any{"action": action, "installation": inst, "requester": nil, "sender": sender}
	if action == "created" {
		body["repositories"] = repos
	}
	return mustJSON(body)
}

// InstallationRepositoriesPayload builds an installation_repositories event
// (action added or removed) for installation id.
func (s *Server) InstallationRepositoriesPayload(action string, id int64, added, removed []*Repository) []byte {
	in := s.lockInstallation(id)
	inst := s.installationJSON(in)
	sender := accountJSON(in.Account, in.AccountID, "User", s.WebURL)
	s.mu.Unlock()
	short := func(rs []*Repository) []map[string]any {
		out := []map[string]any{}
		for _, r := range rs {
			out = append(out, map[string]any{
				"id": r.ID, "node_id": "R_kgDO" + strconv.FormatInt(r.ID, 10), "name": r.Name, "full_name": r.FullName(), "private": r.Private,
			})
		}
		return out
	}
	return mustJSON(map[string]any{
		"action": action, "installation": inst, "repository_selection": inst["repository_selection"],
		"repositories_added": short(added), "repositories_removed": short(removed),
		"requester": nil, "sender": sender,
	})
}

// PingPayload builds the ping GitHub sends when an app's webhook is set up.
func (s *Server) PingPayload() []byte {
	return mustJSON(map[string]any{
		"zen":     "Keep it logically awesome.",
		"hook_id": 1234567,
		"hook": map[string]any{
			"type": "App", "id": 1234567, "name": "web", "active": true, "events": []string{"push", "installation"},
			"config": map[string]string{"content_type": "json", "insecure_ssl": "0", "url": "https://example.com/codehost/webhook"},
			"app_id": s.AppID,
		},
	})
}

// Sign returns GitHub's X-Hub-Signature-256 value for body under secret.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// NewDeliveryID returns a GUID like X-GitHub-Delivery's.
func NewDeliveryID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// Delivery is one webhook request as GitHub sends it.
type Delivery struct {
	Event      string
	DeliveryID string // default: a new GUID
	Body       []byte
	// Secret signs the body. Empty: unsigned (no signature headers).
	Secret string
	// Signature, when set, is sent instead of the computed one.
	Signature string
}

// Deliver POSTs d to url with GitHub's headers and returns the status and body.
func (s *Server) Deliver(ctx context.Context, client *http.Client, url string, d Delivery) (int, []byte, error) {
	if d.DeliveryID == "" {
		d.DeliveryID = NewDeliveryID()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(d.Body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "GitHub-Hookshot/a1b2c3d")
	req.Header.Set("X-GitHub-Event", d.Event)
	req.Header.Set("X-GitHub-Delivery", d.DeliveryID)
	req.Header.Set("X-GitHub-Hook-ID", "1234567")
	req.Header.Set("X-GitHub-Hook-Installation-Target-Type", "integration")
	req.Header.Set("X-GitHub-Hook-Installation-Target-ID", strconv.FormatInt(s.AppID, 10))
	switch {
	case d.Signature != "":
		req.Header.Set("X-Hub-Signature-256", d.Signature)
	case d.Secret != "":
		req.Header.Set("X-Hub-Signature-256", Sign(d.Secret, d.Body))
		m := hmac.New(sha1.New, []byte(d.Secret))
		m.Write(d.Body)
		req.Header.Set("X-Hub-Signature", "sha1="+hex.EncodeToString(m.Sum(nil)))
	}
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("githubfake: " + err.Error())
	}
	return b
}

// lockInstallation locks s.mu (the caller unlocks it) and returns
// installation id; it panics for an unknown id.
func (s *Server) lockInstallation(id int64) *Installation {
	s.mu.Lock()
	in := s.installations[id]
	if in == nil {
		s.mu.Unlock()
		panic(fmt.Sprintf("githubfake: no installation %d", id))
	}
	return in
}
