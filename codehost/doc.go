// Package codehost connects Keelson to a code-hosting provider's app (GitHub
// first): the install URL and its callback, the repositories of a user's
// installations that the user may access themselves, the signed webhook with
// push-to-deploy, the delivery log that says why a push did or did not
// deploy, and installation tokens for cloning private repositories.
//
// It speaks to the provider only through the Provider interface (the GitHub
// adapter is codehost/github); it reaches projects and deployments only through
// the small interfaces it declares (ProjectLookup, Deployer, LinkedAccounts,
// IdentityConnector), which the host server wires. It does not log users in through the provider:
// that is the auth module's OAuth flow.
//
// Decisions worth knowing:
//
//   - Repository webhooks (GitHub, Gitea/Forgejo/Gogs, GitLab; repohook.go)
//     need no app: a delivery the app's secret does not sign is checked
//     against the webhookSecret (ProjectSecrets) of each ACTIVE project whose
//     repository matches the payload's, and acts only on the projects whose
//     secret authenticates it: one delivery row per such project,
//     de-duplicated per (delivery id, project). None: 401, nothing stored.
//   - Commit statuses (statuses.go): a push deployment through the app posts
//     "pending", then its final state once DeploymentResults reports it
//     ended; posting failures are logged, never fail the deployment.
//   - The install state is an HS256 token (10 minutes, bound to the user who
//     asked for the install URL); its id is recorded when used, so it works once.
//   - A state proves who asked for the install URL, not what they may
//     install: the installation id in a callback is the caller's word. So the
//     callback confirms the installation with the app's JWT and then asks the
//     provider with the user's own code-host token (LinkedAccounts, from the
//     auth module's OAuth link; GitHub: GET /user/installations with the
//     GitHub App's user-to-server token) whether the user may access it,
//     organisations and personal accounts alike. A personal-account
//     installation must moreover be the user's own account (a collaborator
//     sees it listed too, but its token reaches every repository of that
//     account), and is refused when already linked to another Keelson user.
//     Anything else redirects with a reason and links nothing: no identity
//     (codehost_account_not_linked), a token the provider rejects
//     (codehost_authorization_expired), not listed (installation_not_yours).
//   - GET /codehost/connect asks the provider with the caller's token first;
//     a caller with no identity or a rejected token gets linkFirst=true and an
//     installUrl that links their code-host account through OAuth (a one-time
//     connect ticket bound to the browser by the cookie set with the answer,
//     IdentityConnector) and then continues to the install page. The install
//     callback itself never starts an OAuth link: a callback URL can be handed
//     to someone else's browser, a cookie-bound ticket cannot.
//   - Links made before this check existed are dropped by migration
//     0003_drop_unverified_links; their users link again.
//   - The delivery log shows a user only deliveries from installations they
//     linked, as far as their access reaches (below), and repository-webhook
//     deliveries signed with their own project's secret, with decisions
//     about their own projects only; a repository URL typed into a project
//     never makes a delivery visible.
//     ?projectId= of a project that is not the caller's is a 404.
//   - Webhooks: the signature is checked on the raw body before anything else;
//     a bad or missing signature answers 401 and stores nothing. A good delivery
//     is stored as pending (unique on its delivery id, so a redelivery is
//     acknowledged and not processed again), answered with {"ok":true}, and
//     processed by a background worker; pending deliveries left by a restart
//     are processed on Start.
//   - A push deploys a project only when the project's owner has linked the
//     installation the push came from and may access the pushed repository
//     (below), the project has autoDeploy on, the
//     pushed branch is its autoDeployBranch (the repository's default branch
//     when empty), and the head commit message does not ask to skip. Each
//     matched project gets one recorded decision; a decision row is written
//     before the deployment is triggered, so a crash can never deploy twice.
//   - A link reaches what its user may reach, not what the installation
//     may: GitHub lists an organisation's installation to anyone with
//     explicit access to one of its repositories (an outside collaborator
//     too), and the installation's token reaches them all. So every use of
//     a link asks the provider, with the user's own token (GitHub: GET
//     /user/installations/{id}/repositories), which of the installation's
//     repositories the user may access (access.go): GET
//     /codehost/repositories lists those; a clone gets an installation
//     token only for one of them (GitAuthFor), and the deployments module
//     asks CheckRepoAccess before it queues a deployment; a push deploys a
//     project only when its owner may access the pushed repository, else
//     its decision is "no repository access" saying why. The worker
//     re-checks every link not checked for RecheckInterval (a day), on the
//     injected clock. A user the provider no longer lets access the
//     installation (removed from the organisation or from their last
//     repository) loses the link; one whose token is missing, expired or
//     revoked keeps the link but loses its repositories until they link
//     their code-host account again (409, code CODEHOST_RELINK, on the
//     routes; a private repository of their installations is not cloned).
//     The token comes from LinkedAccounts at every use (the auth module
//     renews an expiring GitHub user token with its refresh token).
//   - The answer of each check is stored (codehost_user_repositories): a
//     non-admin's delivery log shows a personal installation's deliveries
//     to its linker (its own account) and an organisation installation's
//     pushes to the repositories its linker could access at the last check,
//     not the organisation's other events.
//   - GET /codehost/repositories answers every repository the caller may
//     access of every active installation they linked, all provider pages
//     gathered, sorted by full name (no Keelson-side pagination).
package codehost
