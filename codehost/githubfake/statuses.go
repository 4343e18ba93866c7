package githubfake

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Status is a commit status as GitHub answers POST
// /repos/{owner}/{repo}/statuses/{sha}
// (https://docs.github.com/en/rest/commits/statuses#create-a-commit-status).
type Status struct {
	URL         string    `json:"url"`
	AvatarURL   string    `json:"avatar_url"`
	ID          int64     `json:"id"`
	NodeID      string    `json:"node_id"`
	State       string    `json:"state"`
	Description *string   `json:"description"`
	TargetURL   *string   `json:"target_url"`
	Context     string    `json:"context"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
	Creator     any       `json:"creator"`
	// Repository and SHA say where it was posted (not part of GitHub's answer).
	Repository string `json:"-"`
	SHA        string `json:"-"`
}

type statusBook struct {
	mu     sync.Mutex
	list   []Status
	failAt int // answer this status to every status request; 0: normal
}

var fakeSHA = regexp.MustCompile(`^[0-9a-f]{40}$`)

// Statuses returns the statuses posted to repository "owner/name" for sha, oldest first.
func (s *Server) Statuses(fullName, sha string) []Status {
	s.statuses.mu.Lock()
	defer s.statuses.mu.Unlock()
	var out []Status
	for _, st := range s.statuses.list {
		if strings.EqualFold(st.Repository, fullName) && st.SHA == sha {
			out = append(out, st)
		}
	}
	return out
}

// FailStatuses makes every status request answer status (e.g. 500) until
// called with 0.
func (s *Server) FailStatuses(status int) {
	s.statuses.mu.Lock()
	s.statuses.failAt = status
	s.statuses.mu.Unlock()
}

func validationFailed(w http.ResponseWriter, field, msg string) {
	writeJSON(w, http.StatusUnprocessableEntity, map[string]any{
		"message":           "Validation Failed",
		"errors":            []map[string]string{{"resource": "Status", "code": "custom", "field": field, "message": msg}},
		"documentation_url": "https://docs.github.com/rest/commits/statuses#create-a-commit-status", "status": "422",
	})
}

func (s *Server) createStatus(w http.ResponseWriter, r *http.Request) {
	s.count("POST /repos/{owner}/{repo}/statuses/{sha}")
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		unauthorized(w, "Requires authentication")
		return
	}
	if _, ok := s.CheckToken(tok); !ok {
		unauthorized(w, "Bad credentials")
		return
	}
	full := r.PathValue("owner") + "/" + r.PathValue("repo")
	if !s.CanAccess(tok, full) {
		notFound(w) // GitHub hides repositories the token cannot see
		return
	}
	s.statuses.mu.Lock()
	failAt := s.statuses.failAt
	s.statuses.mu.Unlock()
	if failAt != 0 {
		writeJSON(w, failAt, map[string]string{"message": "Server Error", "status": fmt.Sprint(failAt)})
		return
	}
	sha := r.PathValue("sha")
	if !fakeSHA.MatchString(sha) {
		validationFailed(w, "sha", "No commit found for SHA: "+sha)
		return
	}
	var in struct {
		State       string  `json:"state"`
		TargetURL   *string `json:"target_url"`
		Description *string `json:"description"`
		Context     *string `json:"context"`
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil || json.Unmarshal(body, &in) != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"message": "Problems parsing JSON", "status": "400"})
		return
	}
	switch in.State {
	case "error", "failure", "pending", "success":
	default:
		validationFailed(w, "state", "state is not included in the list")
		return
	}
	ctxName := "default"
	if in.Context != nil && *in.Context != "" {
		ctxName = *in.Context
	}
	now := s.opts.Now().UTC().Truncate(time.Second)
	s.statuses.mu.Lock()
	id := int64(len(s.statuses.list) + 1)
	st := Status{
		URL:       s.URL + "/repos/" + full + "/statuses/" + sha,
		AvatarURL: s.WebURL + "/images/" + s.AppSlug + ".png",
		ID:        id, NodeID: base64.StdEncoding.EncodeToString([]byte(fmt.Sprintf("06:StatusContext%d", id))),
		State: in.State, Description: in.Description, TargetURL: in.TargetURL, Context: ctxName,
		CreatedAt: now, UpdatedAt: now,
		Creator:    map[string]any{"login": s.AppSlug + "[bot]", "id": s.AppID, "type": "Bot"},
		Repository: full, SHA: sha,
	}
	s.statuses.list = append(s.statuses.list, st)
	s.statuses.mu.Unlock()
	writeJSON(w, http.StatusCreated, st)
}
