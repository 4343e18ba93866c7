// Package auth is Keelson's account module: registration, password login,
// JWT access tokens and rotating refresh tokens, password reset by mail, the
// profile (GET/PATCH /auth/me), TOTP two-factor authentication with recovery
// codes, brute-force limits, and the bearer Authenticator every other module
// uses through platform.RequireAuth.
//
// It is not the OAuth login of SPEC 4.3: that lives in auth/oauth and builds
// on the small exported surface of *Service (IssueTokens, UserByID,
// UserByEmail, CreateUser, SetCodehostUsername).
//
// Decisions SPEC.md and DESIGN.md leave open, written down here:
//
//   - Passwords are argon2id PHC strings (auth/internal/password). An unknown
//     email is hashed against a dummy so it takes as long as a wrong
//     password, and both answer the same 401 body.
//   - Access tokens are HS256 JWTs (the only accepted algorithm) carrying sub,
//     role, typ "access", iss, aud, iat, exp, sv (the user's session version)
//     and fam (the session: the login's refresh-token family). Authenticate
//     also checks that the user still exists, that sv matches (a password
//     reset ends every access token at once) and that the session is not
//     revoked (logout with its refresh token, refresh-token reuse and an email
//     change end that session's access tokens at once, not 15 minutes later).
//   - Refresh tokens are 32 random bytes (base64url), stored as SHA-256
//     hashes, grouped in families (one per login). Every refresh uses its
//     token up atomically and answers a new one of the same family; the
//     family expires RefreshTTL (default 30 days) after the login, however
//     often it is rotated. Presenting a used token again, including the loser
//     of two concurrent refreshes, revokes the whole family: the safe answer
//     to a token that may have been stolen.
//   - Logout (protected, as SPEC 4.2 says) acknowledges with {"ok":true} and,
//     when the body carries refreshToken, revokes that token's family.
//   - Password reset tokens are 32 random bytes, SHA-256 at rest, valid for
//     ResetTTL (default 30 minutes), single-use; a new request does not kill
//     older tokens, but a successful reset kills every token of the user and
//     every refresh token. The link is FrontendURL + /reset-password?token=...
//   - Mail never runs inside a request: forgot-password, register, resend and
//     email change queue a job (auth/mailer's bounded Queue; full: 503
//     whatever the account). The forgot-password job itself looks the account
//     up and stores the token, so the request does the same work whether or
//     not the address has an account. Without SMTP, LogMailer logs the mail,
//     link included (DESIGN.md section 2). No other log line holds a token.
//   - Email verification: sign-up (and POST /auth/verify-email/resend)
//     mails FrontendURL + /verify-email?token=..., 32 random bytes, SHA-256
//     at rest, single-use, valid VerifyTTL (24h); POST /auth/verify-email
//     redeems it while the account still has that address.
//   - Email change (PATCH /auth/me with a new email) needs proof in the same
//     body: currentPassword for accounts with a password, plus twoFactorCode
//     when 2FA is on; a password-less account needs twoFactorCode (with
//     neither: 403). Missing: 400, wrong: 403, and nothing changes (other
//     fields included). Accepted, it ends every other session of the
//     account, mails a change link to the new address (the newest request
//     retires older ones) and a notice to the old one; the email changes,
//     verified, only when POST /auth/verify-email redeems that link (409 if
//     the address was taken meanwhile); a password reset cancels it. Whether
//     the new address is taken is not checked at request time, so the
//     request reveals nothing.
//   - OAuth logins of 2FA accounts: TwoFactorChallenge gives the OAuth
//     callback a single-use challenge (SHA-256 at rest, 5 minutes, at most 5
//     codes) instead of tokens; POST /auth/2fa/login {"challenge","code"}
//     trades it with a TOTP or recovery code for a token pair.
//   - 2FA: setup stores a new sealed secret (409 when 2FA is already on);
//     verify enables it with a valid code and answers ten one-time recovery
//     codes (SHA-256 at rest); disable needs a valid code or recovery code.
//     A TOTP code is accepted for one time step either side of now, and the
//     last accepted time step is stored, so each code works once.
//   - Rate limits are token buckets every replica shares
//     (auth/internal/ratelimit). They are keyed per account (lower-cased
//     email, or user id for 2FA), per client address and per mail
//     destination, and checked before any password is hashed; 429 with
//     Retry-After. The client address is the TCP peer; only when the peer is
//     in TrustedProxies (KEELSON_TRUSTED_PROXIES) is X-Forwarded-For
//     believed, and then the client is its rightmost address that is not a
//     trusted proxy (all header lines joined in order, so a client-written
//     line is never reached). An IPv6 client is keyed by its /64
//     (httpx.AddrKey), so one subscriber gets one bucket, not 2^64.
//   - Login limits follow ASVS 2.2.1 and OWASP's device cookies. A login
//     answers a device token (an HttpOnly cookie, keelson_device, Path
//     /auth, and deviceToken in the body for clients without cookies):
//     HMAC-signed user id and nonce, no table. A login presenting a device
//     token of the account is limited per device only (10 failures per 15
//     minutes), so nobody else's failures lock that device out. Any other
//     login is limited per (account, address) (10 per 15 minutes, known
//     address or not: one noisy address never spends the account's budget),
//     per address across accounts (100 per 15 minutes), and, with every
//     other client without a device token, per account (100 failures an
//     hour, ASVS's ceiling). The owner at a new address is locked out only
//     when failures from many addresses together reach that hundred; their
//     device token passes even then. A success gives back what it took of
//     the account's buckets. (Known addresses, kept in auth_login_sources
//     until issue 23, are no longer trusted: an address is shared, a device
//     token is not.)
//   - Mail a user can trigger is limited per account (verification resends
//     and email changes together: 5 an hour; a change mails the new address
//     and a notice to the old, so 10 mails) and per destination (every mail
//     to one address: sign-up and resent links, change links, reset links:
//     5 an hour), on top of forgot-password's per-address and per-account
//     limits.
//   - Roles: a user is ADMIN only while their email is listed in
//     AdminEmails (KEELSON_ADMIN_EMAILS), verified, and verified as the
//     sign-up's own address (its verification link). An address that came
//     by an email-change link never makes the account ADMIN: the owner of a
//     listed address clicking a change link someone else asked for must not
//     promote that account. An operator who wants ADMIN on an existing
//     account signs up anew with the listed address. The role is derived
//     from the stored row at every authenticated request (the token's role
//     claim is informational), so verifying, changing the email, or removing
//     the address from the list takes effect on the next request. A role
//     stored at sign-up grants nothing (migration 0002 resets it).
//   - Emails are trimmed and lower-cased before they are stored or compared.
package auth
