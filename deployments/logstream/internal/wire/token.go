package wire

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"
	"time"
)

// Log tokens let a browser's EventSource, which cannot send an Authorization
// header, open one deployment's log stream: an authenticated
// POST /deployments/{id}/logs/token returns a token valid for that
// deployment's logs only, for a few minutes; GET /deployments/{id}/logs?token=
// accepts it instead of a bearer token. The token is
// base64url("v1|deploymentID|userID|expiryUnix") "." base64url(HMAC-SHA256).
// It grants nothing else, and its owner must still own the deployment.

// Tokens issues and verifies log tokens signed with Key (at least 32 bytes).
type Tokens struct {
	Key []byte
}

const logTokenDomain = "keelson-deployment-log-token:"

func (t Tokens) sign(payload string) []byte {
	m := hmac.New(sha256.New, t.Key)
	m.Write([]byte(logTokenDomain + payload))
	return m.Sum(nil)
}

// Issue returns a token for userID to read deploymentID's logs until exp.
func (t Tokens) Issue(deploymentID, userID string, exp time.Time) string {
	payload := "v1|" + deploymentID + "|" + userID + "|" + strconv.FormatInt(exp.Unix(), 10)
	return base64.RawURLEncoding.EncodeToString([]byte(payload)) + "." +
		base64.RawURLEncoding.EncodeToString(t.sign(payload))
}

// Verify returns the user a token was issued to, if it is genuine, unexpired
// at now and issued for deploymentID.
func (t Tokens) Verify(token, deploymentID string, now time.Time) (userID string, ok bool) {
	p64, s64, found := strings.Cut(token, ".")
	if !found {
		return "", false
	}
	payload, err := base64.RawURLEncoding.DecodeString(p64)
	if err != nil {
		return "", false
	}
	sig, err := base64.RawURLEncoding.DecodeString(s64)
	if err != nil || !hmac.Equal(sig, t.sign(string(payload))) {
		return "", false
	}
	parts := strings.Split(string(payload), "|")
	if len(parts) != 4 || parts[0] != "v1" || parts[1] != deploymentID || parts[2] == "" {
		return "", false
	}
	exp, err := strconv.ParseInt(parts[3], 10, 64)
	if err != nil || now.Unix() >= exp {
		return "", false
	}
	return parts[2], true
}
