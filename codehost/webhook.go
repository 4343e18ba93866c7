package codehost

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"regexp"

	"github.com/keelson-dev/keelson/codehost/forge"
	"github.com/keelson-dev/keelson/codehost/internal/store"
	"github.com/keelson-dev/keelson/platform"
)

type webhookInput struct {
	// Headers are read without validation tags: a request must fail the
	// signature check (401) before anything about it is judged.
	Event       string `header:"x-codehost-event" doc:"Event name (SPEC); X-GitHub-Event is accepted too"`
	GitHubEvent string `header:"X-GitHub-Event" doc:"Event name as GitHub sends it"`
	Delivery    string `header:"X-GitHub-Delivery" doc:"Unique delivery id; a repeated id is acknowledged and not processed again"`
	Signature   string `header:"X-Hub-Signature-256" doc:"sha256=<hex HMAC-SHA256 of the raw body with the webhook secret>"`
	ContentType string `header:"Content-Type"`

	// Repository webhooks of Gitea, Forgejo and Gogs (which also send the
	// X-GitHub-* twins and X-Hub-Signature-256) and of GitLab.
	GiteaEvent       string `header:"X-Gitea-Event" doc:"Gitea: event name"`
	GiteaDelivery    string `header:"X-Gitea-Delivery" doc:"Gitea: delivery id"`
	GiteaSignature   string `header:"X-Gitea-Signature" doc:"Gitea: hex HMAC-SHA256 of the raw body with the project's webhookSecret"`
	ForgejoEvent     string `header:"X-Forgejo-Event" doc:"Forgejo: event name"`
	ForgejoDelivery  string `header:"X-Forgejo-Delivery" doc:"Forgejo: delivery id"`
	ForgejoSignature string `header:"X-Forgejo-Signature" doc:"Forgejo: hex HMAC-SHA256 of the raw body"`
	GogsEvent        string `header:"X-Gogs-Event" doc:"Gogs (sent by Gitea too): event name"`
	GogsDelivery     string `header:"X-Gogs-Delivery" doc:"Gogs: delivery id"`
	GogsSignature    string `header:"X-Gogs-Signature" doc:"Gogs: hex HMAC-SHA256 of the raw body"`
	GitLabEvent      string `header:"X-Gitlab-Event" doc:"GitLab: event, e.g. Push Hook"`
	GitLabToken      string `header:"X-Gitlab-Token" doc:"GitLab: the project's webhookSecret, sent as is"`
	GitLabEventUUID  string `header:"X-Gitlab-Event-UUID" doc:"GitLab: delivery id"`
	ProjectID        string `query:"projectId" doc:"A repository webhook may name the project whose webhookSecret signs it; only that project is then tried (needed when more than 8 projects with a webhookSecret use the repository)"`
	RawBody          []byte // read raw (octet-stream in OpenAPI) so nothing parses it before the signature check
}

type webhookOutput struct {
	Body struct {
		OK bool `json:"ok"`
	}
}

var (
	validEvent    = regexp.MustCompile(`^[a-z_]{1,64}$`)
	validDelivery = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,100}$`)
)

func (s *Service) webhook(ctx context.Context, in *webhookInput) (*webhookOutput, error) {
	// The app's signature first, on the raw bytes. Anything it does not sign
	// is a repository webhook, authenticated by a project's webhookSecret or
	// refused (401, nothing stored).
	if s.d.WebhookSecret == "" || in.source() == SourceGitLab || !VerifySignature(s.d.WebhookSecret, in.RawBody, in.Signature) {
		return s.repositoryWebhook(ctx, in)
	}
	event := in.Event
	if event == "" {
		event = in.GitHubEvent
	}
	if !validEvent.MatchString(event) {
		return nil, platform.Invalid("header x-codehost-event (or X-GitHub-Event): required, lower-case event name")
	}
	payload, err := forge.Body(in.ContentType, in.RawBody)
	if err != nil {
		return nil, err
	}
	deliveryID := in.Delivery
	if deliveryID == "" {
		// A sender without delivery ids (SPEC names none) still gets
		// de-duplication: the same event and body are the same delivery.
		sum := sha256.Sum256(append([]byte(event+"\n"), in.RawBody...))
		deliveryID = "sha256:" + hex.EncodeToString(sum[:])
	}
	if !validDelivery.MatchString(deliveryID) {
		return nil, platform.Invalid("header X-GitHub-Delivery: at most 100 letters, digits, '.', '_', ':' or '-'")
	}
	row := &store.DeliveryRow{
		ID: platform.NewID(), DeliveryID: deliveryID, Event: event, SignatureValid: true,
		Status: DeliveryPending, Payload: bytes.Clone(payload), ReceivedAt: s.now(),
	}
	switch err := s.store.InsertDelivery(ctx, row); {
	case store.IsConflict(err):
		// A redelivery: acknowledged, not processed again.
	case err != nil:
		return nil, err
	default:
		s.notify()
	}
	out := &webhookOutput{}
	out.Body.OK = true
	return out, nil
}
