// Package codehost connects Keelson to a code-hosting provider's app (GitHub
// first): the install URL and its callback, the repositories of a user's
// installations, the signed webhook with push-to-deploy, the delivery log that
// says why a push did or did not deploy, and installation tokens for cloning
// private repositories.
//
// It speaks to the provider only through the Provider interface (the GitHub
// adapter is codehost/github); it reaches projects and deployments only through
// the small interfaces it declares (ProjectLookup, Deployer, LinkedAccounts),
// which the host server wires. It does not log users in through the provider:
// that is the auth module's OAuth flow.
//
// Decisions worth knowing:
//
//   - The install state is an HS256 token (10 minutes, bound to the user who
//     asked for the install URL); its id is recorded when used, so it works once.
//   - The callback confirms the installation through the provider's API with the
//     app's JWT. When LinkedAccounts reports the user's provider login, an
//     installation on a personal account must belong to that login. An
//     organisation installation cannot be checked for membership without the
//     user's own provider token, so it is accepted; a personal-account
//     installation already linked to another Keelson user is refused.
//   - Webhooks: the signature is checked on the raw body before anything else;
//     a bad or missing signature answers 401 and stores nothing. A good delivery
//     is stored as pending (unique on its delivery id, so a redelivery is
//     acknowledged and not processed again), answered with {"ok":true}, and
//     processed by a background worker; pending deliveries left by a restart
//     are processed on Start.
//   - A push deploys a project only when the project's owner has linked the
//     installation the push came from, the project has autoDeploy on, the
//     pushed branch is its autoDeployBranch (the repository's default branch
//     when empty), and the head commit message does not ask to skip. Each
//     matched project gets one recorded decision; a decision row is written
//     before the deployment is triggered, so a crash can never deploy twice.
//   - GET /codehost/repositories answers every repository of every active
//     installation the caller linked, all provider pages gathered, sorted by
//     full name (no Keelson-side pagination).
package codehost
