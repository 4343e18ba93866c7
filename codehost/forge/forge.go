// Package forge is what Keelson reads of a code host's webhooks, whichever
// host sent them: the normalised Push every source parses into, the
// repository-webhook payload of GitHub, Gitea/Forgejo/Gogs and GitLab, the
// body of a delivery and its HMAC signature. It stores nothing and decides
// nothing: codehost's pipeline does.
package forge

import (
	"bytes"
	"encoding/json"
	"mime"
	"net/url"

	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/keelson-dev/keelson/platform"
)

// SignatureHeader is the header that carries a delivery's signature.
const SignatureHeader = "X-Hub-Signature-256"

// Sign returns the signature header value for body: "sha256=" and the hex
// HMAC-SHA256 of body under secret.
func Sign(secret string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// VerifySignature reports whether header is a valid "sha256=<hex>" signature
// of body under secret. The comparison is constant-time; an empty secret
// never verifies.
func VerifySignature(secret string, body []byte, header string) bool {
	if secret == "" {
		return false
	}
	hexSig, ok := strings.CutPrefix(strings.TrimSpace(header), "sha256=")
	if !ok || len(hexSig) != sha256.Size*2 {
		return false
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return hmac.Equal(got, mac.Sum(nil))
}

// Repository is a repository an installation can access.
type Repository struct {
	ID            int64
	Name          string
	FullName      string
	Owner         string
	Private       bool
	HTMLURL       string
	CloneURL      string
	DefaultBranch string
}

// Push is the part of a push event that decides deployments.
type Push struct {
	Ref               string // refs/heads/<branch> or refs/tags/<tag>
	Before, After     string
	Deleted           bool
	HeadCommitMessage string
	Repository        Repository
	Pusher            string
}

// Body returns the JSON document of a delivery: the body itself, or
// its payload field when the app was set to send form-encoded webhooks.
func Body(contentType string, body []byte) ([]byte, error) {
	if mt, _, _ := mime.ParseMediaType(contentType); mt == "application/x-www-form-urlencoded" {
		form, err := url.ParseQuery(string(body))
		if err != nil || form.Get("payload") == "" {
			return nil, platform.Invalid("body: form-encoded delivery without a payload field")
		}
		body = []byte(form.Get("payload"))
	}
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' || !json.Valid(body) {
		return nil, platform.Invalid("body: not a JSON object")
	}
	return body, nil
}

// Installation is one installation of the app on an account.
type Installation struct {
	ID                  int64
	AccountLogin        string
	AccountID           int64
	AccountType         string // "User" or "Organization"
	RepositorySelection string // "all" or "selected"
	Suspended           bool
}

// Event kinds this module acts on; others are recorded and ignored.
const (
	EventPing                     = "ping"
	EventPush                     = "push"
	EventInstallation             = "installation"
	EventInstallationRepositories = "installation_repositories"
)

// Event is a decoded webhook delivery.
type Event struct {
	Kind           string // the provider's event name
	Action         string // e.g. "created", "added"; empty for push and ping
	InstallationID int64  // 0 when the event carries none (e.g. an app ping)
	Push           *Push
	Installation   *Installation // installation events
	ReposAdded     []Repository  // installation events (created) and installation_repositories
	ReposRemoved   []Repository
}
