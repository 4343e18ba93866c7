package codehost

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/keelson-dev/keelson/codehost/forge"
	"github.com/keelson-dev/keelson/codehost/internal/store"
	"github.com/keelson-dev/keelson/platform"
)

// DecisionNotPush is recorded for a repository webhook's event that deploys
// nothing (a ping, a tag push, an issue event).
const DecisionNotPush = "not a push"

// maxRepoHookSigners bounds the project secrets a repository webhook is
// checked against (one HMAC of the whole body each) before it is
// authenticated: the oldest projects using the repository with a
// webhookSecret, or the one named by ?projectId=.
const maxRepoHookSigners = 8

// signed reports whether the delivery carries a signature or token at all, in
// the headers of its host.
func (in *webhookInput) signed(source string) bool {
	if source == SourceGitLab {
		return in.GitLabToken != ""
	}
	return forge.FirstOf(in.Signature, in.GiteaSignature, in.ForgejoSignature, in.GogsSignature) != ""
}

// errRepoHookAuth is the one answer to every repository webhook that no
// project's secret authenticates: the same words whether or not a project
// uses the repository, so the answer tells nothing about other accounts.
var errRepoHookAuth = platform.Unauthorized("x-hub-signature-256: missing or invalid signature; a repository webhook must be signed " +
	"(X-Hub-Signature-256 or X-Gitea-Signature) with, or carry as X-Gitlab-Token, the webhookSecret of a project using its repository; " +
	"where more than 8 projects with a webhookSecret use one repository, add ?projectId=<the project's id> to the webhook URL")

// ProjectSecrets reads a project's webhook secret, to authenticate repository
// webhooks. The projects module implements it.
type ProjectSecrets interface {
	// WebhookSecret returns the plaintext webhookSecret of an ACTIVE project
	// ("" when it has none); platform.ErrNotFound when the project is not active.
	WebhookSecret(ctx context.Context, projectID string) (string, error)
}

// source says which host sent the delivery, from the headers only that host sends.
func (in *webhookInput) source() string {
	switch {
	case in.GitLabEvent != "":
		return SourceGitLab
	case in.GiteaEvent != "" || in.ForgejoEvent != "" || in.GogsEvent != "":
		return SourceGitea
	}
	return SourceGitHub
}

// eventName is the delivery's event in lower case ("push", "ping", ...).
func (in *webhookInput) eventName(source string) string {
	switch source {
	case SourceGitLab:
		// "Push Hook" -> push, "Tag Push Hook" -> tag_push, "Merge Request Hook" -> merge_request.
		e := strings.ToLower(strings.TrimSpace(in.GitLabEvent))
		e = strings.TrimSuffix(e, " hook")
		return strings.ReplaceAll(e, " ", "_")
	case SourceGitea:
		return forge.FirstOf(in.ForgejoEvent, in.GiteaEvent, in.GogsEvent, in.GitHubEvent)
	}
	return forge.FirstOf(in.Event, in.GitHubEvent)
}

// deliveryID is the host's id of the delivery ("" when it sent none).
func (in *webhookInput) deliveryID(source string) string {
	switch source {
	case SourceGitLab:
		return in.GitLabEventUUID
	case SourceGitea:
		return forge.FirstOf(in.ForgejoDelivery, in.GiteaDelivery, in.GogsDelivery, in.Delivery)
	}
	return in.Delivery
}

// verifiedBy reports whether secret authenticates the delivery, in the way its
// host signs: GitLab sends the secret itself as X-Gitlab-Token; Gitea, Forgejo
// and Gogs a bare hex HMAC-SHA256 (and GitHub's header too); GitHub
// X-Hub-Signature-256. Comparisons are constant-time; an empty secret never
// verifies.
func (in *webhookInput) verifiedBy(source, secret string, body []byte) bool {
	if secret == "" {
		return false
	}
	if source == SourceGitLab {
		// Hash both so neither the length nor a prefix leaks through timing.
		a, b := sha256.Sum256([]byte(in.GitLabToken)), sha256.Sum256([]byte(secret))
		return in.GitLabToken != "" && hmac.Equal(a[:], b[:])
	}
	if source == SourceGitea {
		for _, h := range []string{in.ForgejoSignature, in.GiteaSignature, in.GogsSignature} {
			h = strings.TrimSpace(h)
			if h == "" {
				continue
			}
			if !strings.HasPrefix(h, "sha256=") {
				h = "sha256=" + h
			}
			if VerifySignature(secret, body, h) {
				return true
			}
		}
	}
	return VerifySignature(secret, body, in.Signature)
}

// repositoryWebhook handles a delivery the app's secret does not sign: a
// repository webhook. The payload is read (bounded by the route's body limit)
// only to find the projects using its repository; each one whose
// webhookSecret authenticates the delivery gets its own delivery row, so a
// delivery acts only on the projects whose secret signed it. None: 401 and
// nothing stored.
func (s *Service) repositoryWebhook(ctx context.Context, in *webhookInput) (*webhookOutput, error) {
	log := platform.Logger(ctx)
	source := in.source()
	reject := func(why string) (*webhookOutput, error) {
		log.WarnContext(ctx, "codehost: repository webhook not authenticated", "source", source, "why", why, "bytes", len(in.RawBody))
		return nil, errRepoHookAuth
	}
	if s.d.Secrets == nil {
		return reject("no project secrets wired")
	}
	// Before anything is decoded or looked up: no signature, no work.
	if !in.signed(source) {
		return reject("no signature or token header")
	}
	payload, err := forge.Body(in.ContentType, in.RawBody)
	if err != nil {
		return reject("body is not a JSON payload")
	}
	var p forge.Payload
	if err := json.Unmarshal(payload, &p); err != nil {
		return reject("body does not decode")
	}
	urls, repoID := p.Identity()
	if len(urls) == 0 && repoID == "" {
		return reject("payload names no repository")
	}
	signed, err := s.repoHookSigners(ctx, in, source, urls, repoID)
	if err != nil {
		return nil, err
	}
	if len(signed) == 0 {
		return reject("no project's webhookSecret authenticates it")
	}
	event := in.eventName(source)
	if !validEvent.MatchString(event) {
		return nil, platform.Invalid("event header (X-GitHub-Event, X-Gitea-Event or X-Gitlab-Event): required, an event name")
	}
	deliveryID := in.deliveryID(source)
	if deliveryID == "" {
		sum := sha256.Sum256(append([]byte(event+"\n"), in.RawBody...))
		deliveryID = "sha256:" + hex.EncodeToString(sum[:])
	}
	if !validDelivery.MatchString(deliveryID) {
		return nil, platform.Invalid("delivery id header (X-GitHub-Delivery, X-Gitea-Delivery or X-Gitlab-Event-UUID): at most 100 letters, digits, '.', '_', ':' or '-'")
	}
	stored := false
	for _, proj := range signed {
		row := &store.DeliveryRow{
			ID: platform.NewID(), DeliveryID: deliveryID, Event: event, SignatureValid: true,
			Source: source, ProjectID: proj.ProjectID, OwnerID: proj.OwnerID,
			Repository: store.Clean(p.FullName(), 255),
			Status:     DeliveryPending, Payload: append([]byte(nil), payload...), ReceivedAt: s.now(),
		}
		switch err := s.store.InsertDelivery(ctx, row); {
		case store.IsConflict(err):
			// A redelivery for this project: acknowledged, not processed again.
		case err != nil:
			return nil, err
		default:
			stored = true
		}
	}
	if stored {
		s.notify()
	}
	out := &webhookOutput{}
	out.Body.OK = true
	return out, nil
}

// repoHookSigners returns the projects using the payload's repository whose
// webhookSecret authenticates the delivery. At most maxRepoHookSigners
// candidates are tried, each one HMAC of the body: the work before
// authentication does not grow with the projects using a repository
// (anyone may point a project at a public repository).
func (s *Service) repoHookSigners(ctx context.Context, in *webhookInput, source string, urls []string, repoID string) ([]RepoProject, error) {
	projects, err := s.d.Projects.ProjectsForRepository(ctx, urls, repoID)
	if err != nil {
		return nil, wrap("repository webhook: projects", err)
	}
	var candidates []RepoProject
	for _, proj := range projects {
		if proj.HasWebhookSecret && (in.ProjectID == "" || proj.ProjectID == in.ProjectID) {
			candidates = append(candidates, proj)
		}
	}
	if len(candidates) > maxRepoHookSigners {
		candidates = candidates[:maxRepoHookSigners]
	}
	var signed []RepoProject
	for _, proj := range candidates {
		secret, err := s.d.Secrets.WebhookSecret(ctx, proj.ProjectID)
		if errors.Is(err, platform.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, wrap("repository webhook: project secret", err)
		}
		if in.verifiedBy(source, secret, in.RawBody) {
			signed = append(signed, proj)
		}
	}
	return signed, nil
}

// processRepoHook decides what a repository webhook delivery does for the one
// project whose secret authenticated it.
func (s *Service) processRepoHook(ctx context.Context, row *store.DeliveryRow) error {
	var p forge.Payload
	if err := json.Unmarshal(row.Payload, &p); err != nil {
		return s.store.FinishDelivery(ctx, row.ID, nil, DeliveryFailed, "cannot decode the payload", s.now())
	}
	dec := &store.DecisionRow{ID: platform.NewID(), DeliveryRowID: row.ID, ProjectID: row.ProjectID, OwnerID: row.OwnerID, CreatedAt: s.now()}
	if row.Event != EventPush {
		dec.Decision, dec.Detail = DecisionNotPush, "event "+row.Event+" deploys nothing"
		if row.Event == EventPing {
			dec.Detail = "ping: the webhook reaches Keelson; nothing to deploy"
		}
		if _, err := s.recordDecision(ctx, dec); err != nil {
			return err
		}
		return s.store.FinishDelivery(ctx, row.ID, nil, DeliveryProcessed, dec.Detail, s.now())
	}
	push := p.Push()
	if push.Ref == "" {
		return s.store.FinishDelivery(ctx, row.ID, nil, DeliveryFailed, "push payload without ref", s.now())
	}
	// The project as it is now: it may have been deleted, moved to another
	// repository or had autoDeploy switched off since the delivery came in.
	urls, repoID := p.Identity()
	projects, err := s.d.Projects.ProjectsForRepository(ctx, urls, repoID)
	if err != nil {
		return fmt.Errorf("projects for repository: %w", err)
	}
	var proj *RepoProject
	for i := range projects {
		if projects[i].ProjectID == row.ProjectID {
			proj = &projects[i]
		}
	}
	if proj == nil {
		dec.Decision, dec.Detail = DecisionFailed, "the project no longer exists or no longer uses this repository"
		if _, err := s.recordDecision(ctx, dec); err != nil {
			return err
		}
		return s.store.FinishDelivery(ctx, row.ID, nil, DeliveryProcessed, dec.Detail, s.now())
	}
	detail, err := s.deployPush(ctx, &pushDelivery{row: row, push: push, source: row.Source, projects: []RepoProject{*proj}})
	if err != nil {
		return err
	}
	return s.store.FinishDelivery(ctx, row.ID, nil, DeliveryProcessed, detail, s.now())
}
