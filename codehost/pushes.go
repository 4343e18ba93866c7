package codehost

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/keelson-dev/keelson/codehost/forge"
	"github.com/keelson-dev/keelson/codehost/internal/store"
	"github.com/keelson-dev/keelson/platform"
)

// pushDelivery is a push as every source delivers it, normalised: the app's
// deliveries (an installation's push, matched to every project using the
// repository) and repository webhooks of GitHub, Gitea/Forgejo and GitLab
// (matched to the one project whose secret signed it). deployPush then runs
// the one path: decide, claim, trigger, commit status.
type pushDelivery struct {
	row      *store.DeliveryRow
	push     *Push
	projects []RepoProject
	// installationID is the app installation the push came through; 0 for
	// a repository webhook, whose project's secret took the link's place.
	installationID int64
	// source names a repository webhook's code host in the deployment's
	// reason ("github", "gitea", "gitlab"); "" for the app.
	source string
}

// decisionOrder lists decisions in delivery summaries.
var decisionOrder = []string{DecisionDeployed, DecisionAlreadyDeployed, DecisionBranchMismatch, DecisionAutoDeployOff,
	DecisionSkipMessage, DecisionBranchDeleted, DecisionNotLinked, DecisionNoAccess, DecisionQuotaExceeded, DecisionFailed}

// deployPush decides, once per project, what d's push does, and deploys
// where every condition holds. A project decided before a restart keeps its
// decision. It returns the delivery's summary.
func (s *Service) deployPush(ctx context.Context, d *pushDelivery) (string, error) {
	sort.Slice(d.projects, func(i, j int) bool { return d.projects[i].ProjectID < d.projects[j].ProjectID })
	existing, err := s.store.DecisionsOf(ctx, d.row.ID)
	if err != nil {
		return "", err
	}
	decided := map[string]store.DecisionRow{}
	for _, dec := range existing {
		decided[dec.ProjectID] = dec
	}
	counts := map[string]int{}
	for _, proj := range d.projects {
		if dec, ok := decided[proj.ProjectID]; ok {
			if err := s.settleInterrupted(ctx, &dec); err != nil {
				return "", err
			}
			counts[dec.Decision]++
			continue
		}
		decision, err := s.deployOne(ctx, d, proj)
		if err != nil {
			return "", err
		}
		counts[decision]++
	}
	var parts []string
	for _, k := range decisionOrder {
		if counts[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s: %d", k, counts[k]))
		}
	}
	return fmt.Sprintf("%d project(s) matched (%s)", len(d.projects), strings.Join(parts, ", ")), nil
}

// deployOne records the decision for one project, triggering its
// deployment (and, for the app, a pending commit status) when every
// condition holds.
func (s *Service) deployOne(ctx context.Context, d *pushDelivery, proj RepoProject) (string, error) {
	p := d.push
	dec := &store.DecisionRow{
		ID: platform.NewID(), DeliveryRowID: d.row.ID, ProjectID: proj.ProjectID, OwnerID: proj.OwnerID, CreatedAt: s.now(),
	}
	blocked, why, err := s.sourceGate(ctx, d, proj)
	if err != nil {
		return "", err
	}
	branch := decide(dec, p, proj, blocked, why)
	if dec.Decision == "" && d.installationID > 0 {
		// It would deploy: only if the code host, asked with the owner's own
		// token now, lets the owner access the pushed repository.
		why, err := s.pushAccess(ctx, proj.OwnerID, d.installationID, p.Repository)
		if err != nil {
			return "", err
		}
		if why != "" {
			dec.Decision, dec.Detail = DecisionNoAccess, why
		}
	}
	if dec.Decision != "" {
		return s.recordDecision(ctx, dec)
	}
	reason := fmt.Sprintf("push to %s (%s)", branch, shortSHA(p.After))
	if d.source != "" {
		reason = fmt.Sprintf("push to %s (%s, %s webhook)", branch, shortSHA(p.After), d.source)
	}
	decision, depID, err := s.claimAndTrigger(ctx, dec, proj, branch, p.After, reason)
	if err != nil {
		return "", err
	}
	if decision == DecisionDeployed {
		s.statusStarted(ctx, d.installationID, p, proj.OwnerID, depID)
	}
	return decision, nil
}

// sourceGate is the source's own refusal, which decide weighs after the
// branch: an app push needs the project's owner to have linked the
// installation it came through; a repository webhook's push must name a
// commit (its signature took the link's place).
func (s *Service) sourceGate(ctx context.Context, d *pushDelivery, proj RepoProject) (blocked, why string, err error) {
	if d.installationID <= 0 && d.source != "" {
		if !forge.CommitRE.MatchString(d.push.After) {
			return DecisionFailed, "the push names no commit to deploy", nil
		}
		return "", "", nil
	}
	linked, err := s.ownerUsesInstallation(ctx, proj.OwnerID, d.installationID)
	if err != nil || linked {
		return "", "", err
	}
	return DecisionNotLinked, "the project's owner has not connected the code-host installation this push came from", nil
}
