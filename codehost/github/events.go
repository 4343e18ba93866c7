package github

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/keelson-dev/keelson/codehost"
)

// The JSON shapes below are the parts of GitHub's REST and webhook payloads
// this adapter reads; unknown fields are ignored.

type accountJSON struct {
	Login string `json:"login"`
	ID    int64  `json:"id"`
	Type  string `json:"type"`
}

type installationJSON struct {
	ID                  int64       `json:"id"`
	Account             accountJSON `json:"account"`
	RepositorySelection string      `json:"repository_selection"`
	TargetType          string      `json:"target_type"`
	SuspendedAt         *time.Time  `json:"suspended_at"`
}

func (in installationJSON) toInstallation() *codehost.Installation {
	typ := in.Account.Type
	if typ == "" {
		typ = in.TargetType
	}
	return &codehost.Installation{
		ID: in.ID, AccountLogin: in.Account.Login, AccountID: in.Account.ID, AccountType: typ,
		RepositorySelection: in.RepositorySelection, Suspended: in.SuspendedAt != nil,
	}
}

type repositoryJSON struct {
	ID            int64       `json:"id"`
	Name          string      `json:"name"`
	FullName      string      `json:"full_name"`
	Private       bool        `json:"private"`
	Owner         accountJSON `json:"owner"`
	HTMLURL       string      `json:"html_url"`
	CloneURL      string      `json:"clone_url"`
	DefaultBranch string      `json:"default_branch"`
}

func (r repositoryJSON) toRepository() codehost.Repository {
	owner := r.Owner.Login
	if owner == "" {
		owner, _, _ = strings.Cut(r.FullName, "/")
	}
	return codehost.Repository{
		ID: r.ID, Name: r.Name, FullName: r.FullName, Owner: owner, Private: r.Private,
		HTMLURL: r.HTMLURL, CloneURL: r.CloneURL, DefaultBranch: r.DefaultBranch,
	}
}

func toRepositories(rs []repositoryJSON) []codehost.Repository {
	out := make([]codehost.Repository, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.toRepository())
	}
	return out
}

type pushJSON struct {
	Ref        string `json:"ref"`
	Before     string `json:"before"`
	After      string `json:"after"`
	Deleted    bool   `json:"deleted"`
	HeadCommit *struct {
		ID      string `json:"id"`
		Message string `json:"message"`
	} `json:"head_commit"`
	Repository *repositoryJSON `json:"repository"`
	Pusher     struct {
		Name string `json:"name"`
	} `json:"pusher"`
	Installation *struct {
		ID int64 `json:"id"`
	} `json:"installation"`
}

type installationEventJSON struct {
	Action             string            `json:"action"`
	Installation       *installationJSON `json:"installation"`
	Repositories       []repositoryJSON  `json:"repositories"`
	RepositoriesAdded  []repositoryJSON  `json:"repositories_added"`
	RepositoriesRemove []repositoryJSON  `json:"repositories_removed"`
}

// ParseEvent implements codehost.Provider. It decodes the events the codehost
// module acts on (ping, push, installation, installation_repositories); any
// other event comes back with only Kind, Action and InstallationID.
func (c *Client) ParseEvent(event string, payload []byte) (*codehost.Event, error) {
	return ParseEvent(event, payload)
}

// ParseEvent decodes a GitHub webhook payload of the named event.
func ParseEvent(event string, payload []byte) (*codehost.Event, error) {
	ev := &codehost.Event{Kind: event}
	switch event {
	case codehost.EventPush:
		var p pushJSON
		if err := json.Unmarshal(payload, &p); err != nil {
			return nil, decodeErr(err)
		}
		if p.Repository == nil {
			return nil, errors.New("push payload without repository")
		}
		if p.Ref == "" {
			return nil, errors.New("push payload without ref")
		}
		push := &codehost.Push{
			Ref: p.Ref, Before: p.Before, After: p.After, Deleted: p.Deleted || isZeroSHA(p.After),
			Repository: p.Repository.toRepository(), Pusher: p.Pusher.Name,
		}
		if p.HeadCommit != nil {
			push.HeadCommitMessage = p.HeadCommit.Message
		}
		ev.Push = push
		if p.Installation != nil {
			ev.InstallationID = p.Installation.ID
		}
	case codehost.EventInstallation, codehost.EventInstallationRepositories:
		var p installationEventJSON
		if err := json.Unmarshal(payload, &p); err != nil {
			return nil, decodeErr(err)
		}
		if p.Installation == nil || p.Installation.ID <= 0 {
			return nil, errors.New(event + " payload without installation")
		}
		ev.Action = p.Action
		ev.InstallationID = p.Installation.ID
		ev.Installation = p.Installation.toInstallation()
		if event == codehost.EventInstallation {
			ev.ReposAdded = toRepositories(p.Repositories)
		} else {
			ev.ReposAdded = toRepositories(p.RepositoriesAdded)
			ev.ReposRemoved = toRepositories(p.RepositoriesRemove)
		}
	default:
		var p struct {
			Action       string `json:"action"`
			Installation *struct {
				ID int64 `json:"id"`
			} `json:"installation"`
		}
		if err := json.Unmarshal(payload, &p); err != nil {
			return nil, decodeErr(err)
		}
		ev.Action = p.Action
		if p.Installation != nil {
			ev.InstallationID = p.Installation.ID
		}
	}
	return ev, nil
}

func isZeroSHA(s string) bool {
	return s != "" && strings.Trim(s, "0") == ""
}

// decodeErr keeps the JSON error's description of the input, without echoing it.
func decodeErr(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Errorf("field %s has the wrong type", te.Field)
	}
	return errors.New("payload is not valid JSON")
}
