// Package oauth is the OAuth part of Keelson's account module (SPEC 4.3):
// login and account linking through the GitHub-style code host
// (/auth/codehost, /auth/codehost/connect, /auth/codehost/callback) and any
// OpenID Connect provider (/auth/idp, /auth/idp/callback), plus
// POST /auth/oauth/exchange. It builds on the account operations of package
// auth through the small Accounts interface and owns its own tables:
// oauth_identities, oauth_states and oauth_exchange_codes (Migrations).
//
// It is not the code-host app integration (installations, repositories,
// webhooks): that module reads the linked login through
// (*Service).CodehostLogin.
//
// How the flows work, and the decisions SPEC.md leaves open:
//
//   - A start route makes a random state and a PKCE verifier (S256), plus a
//     nonce for OIDC, stores them server-side (state as a SHA-256 hash,
//     verifier sealed) for StateTTL (10 minutes), and binds the state to the
//     browser with a cookie keelson_oauth_<provider>: HttpOnly, SameSite=Lax,
//     Path=/auth/<provider>; when PublicURL is https it is
//     __Host-keelson_oauth_<provider> (Secure, Path=/, no Domain), which no
//     sibling subdomain can set, and the plain name is ignored. The callback
//     needs the state in the query, the same state in the cookie, and an
//     unused, unexpired stored state, which it marks used atomically (so one of
//     two concurrent callbacks wins) and the cookie is cleared. Anything else
//     answers 400 before the provider is contacted, so nothing is created.
//   - After the state checks out, every outcome is a 302 to the frontend with
//     Cache-Control: no-store and Referrer-Policy: no-referrer. Login success:
//     <FrontendURL>/auth/callback?accessToken=...&refreshToken=... (the
//     default RedirectMode "tokens", as SPEC says), or in RedirectMode "code"
//     (safer: tokens never appear in URLs, history or proxies)
//     <FrontendURL>/auth/callback?code=..., a one-time code valid CodeTTL
//     (30 s, at most 60 s), stored hashed, traded once for the same token
//     pair as POST /auth/login at POST /auth/oauth/exchange {"code"}.
//     Refusals: <FrontendURL>/auth/callback?error=<status>&provider=<name>,
//     with the statuses listed as Err* constants.
//   - Login finds the user by (provider, issuer, provider user id). With no
//     such identity it links an existing account only by an email the
//     provider says is verified (GitHub's /user/emails verified flag, any of
//     the user's verified addresses, primary first; OIDC's email_verified).
//     It does not link an account that has 2FA on, nor a password account
//     (its email was never verified by us, so whoever registered it may be
//     squatting the address) (link_requires_login: log in with the password,
//     then connect), nor one that is already linked to
//     another identity of the same provider (account_already_linked).
//     With no matching account it creates one, email marked verified, without
//     a password, profile from the provider (name, username, avatar, and
//     codehostUsername for the code host).
//   - Unverified emails: refused with email_not_verified, whether or not an
//     account has the address; nothing is created or linked. Creating an
//     account from an unverified address would let whoever controls the
//     provider account squat the address, and once its real owner reset the
//     password, share the account with them. A provider with no email at all
//     gets email_missing.
//   - Connect mode (/auth/codehost/connect) for a browser takes a one-time
//     connect ticket, never the access token in a URL (a link carrying a token
//     let any page link a visitor's code-host account to the token's owner):
//     POST /auth/codehost/connect (Bearer) answers {ticket, connectUrl,
//     expiresAt} and sets an HttpOnly, SameSite=Lax cookie
//     (__Host-keelson_connect on https, so no sibling subdomain can plant one)
//     whose SHA-256 is stored with the ticket's; GET
//     /auth/codehost/connect?ticket= redeems the ticket once, within 5
//     minutes, only together with that cookie, and otherwise answers 400
//     before the provider is contacted. ?token= answers 400. Non-browser
//     clients may still send Authorization: Bearer (SPEC). Other modules get a
//     ticket through IssueConnectTicket, with next: where a successful link
//     continues (the codehost module's install page). The connecting user and
//     next are stored with the state. It links the code-host identity to that
//     user whatever its email, replacing the user's previous code-host
//     identity, and ends on next or
//     <FrontendURL>/settings/connected-accounts?codehost=connected, or
//     ?codehost=error&reason=already_linked when the identity belongs to
//     someone else (nothing changes then).
//   - The code host's user access token is stored sealed (Sealer) on the
//     identity and replaced at each login; codehostUsername on the profile
//     follows the code-host login. CodehostAccessToken opens it for callers.
//     A GitHub App's user token may expire (8 hours, with a single-use
//     refresh token valid 6 months): its refresh token is stored sealed too,
//     with its expiry, and CodehostAccessToken renews it (grant_type
//     refresh_token) when it is within 5 minutes of expiring, once per
//     identity at a time; a refused refresh answers "" (the user links their
//     code-host account again; the codehost module says so).
//   - OIDC: discovery from Issuer happens at first use (bounded by
//     DiscoveryTimeout), so an idp that is down does not stop start-up; a
//     failure answers 503 and is retried by the next login. The ID token is
//     verified by go-oidc (RS256 signature against the JWKS, iss, aud = client
//     id, exp) and its nonce compared with the flow's. email_verified may be a
//     boolean or the string "true".
//   - A provider whose settings are missing answers 503 on its routes, naming
//     the settings (KEELSON_CODEHOST_CLIENT_ID/_CLIENT_SECRET,
//     KEELSON_IDP_ISSUER/_CLIENT_ID/_CLIENT_SECRET).
//   - 2FA holds for provider logins too: the provider's login stands in for
//     the password, not for the account's second factor. When the account
//     has 2FA on, the callback issues no tokens (and no exchange code): it
//     ends on <FrontendURL>/auth/callback?twoFactorChallenge=...&provider=<name>,
//     a single-use challenge valid 5 minutes for at most 5 codes, which the
//     frontend trades with a TOTP or recovery code at POST /auth/2fa/login
//     {"challenge","code"} for the same token pair as POST /auth/login.
//   - Expired states and codes are purged when a flow starts (no background job).
package oauth
