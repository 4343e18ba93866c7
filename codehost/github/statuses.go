package github

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"github.com/keelson-dev/keelson/codehost"
)

var _ codehost.CommitStatuses = (*Client)(nil)

var shaRE = regexp.MustCompile(`^[0-9a-f]{40}([0-9a-f]{24})?$`)

// PostCommitStatus implements codehost.CommitStatuses: POST
// /repos/{owner}/{repo}/statuses/{sha} with the installation's token
// (https://docs.github.com/en/rest/commits/statuses#create-a-commit-status).
// A token GitHub refused (401) is minted again once.
func (c *Client) PostCommitStatus(ctx context.Context, installationID int64, fullName, sha string, st codehost.CommitStatus) error {
	owner, repo, ok := strings.Cut(fullName, "/")
	if !ok || owner == "" || repo == "" || strings.Contains(repo, "/") {
		return fmt.Errorf("github: commit status: %q is not owner/name", fullName)
	}
	if !shaRE.MatchString(sha) {
		return errors.New("github: commit status: not a full commit id")
	}
	body := map[string]string{"state": st.State, "context": st.Context}
	if st.TargetURL != "" {
		body["target_url"] = st.TargetURL
	}
	if st.Description != "" {
		body["description"] = st.Description
	}
	path := c.c.APIURL + "/repos/" + url.PathEscape(owner) + "/" + url.PathEscape(repo) + "/statuses/" + sha
	post := func() error {
		tok, _, err := c.InstallationToken(ctx, installationID)
		if err != nil {
			return err
		}
		_, err = c.send(ctx, http.MethodPost, path, "Bearer "+tok, body, nil)
		return err
	}
	err := post()
	var ae *APIError
	if errors.As(err, &ae) && ae.Status == http.StatusUnauthorized {
		c.forget(installationID)
		err = post()
	}
	return err
}
