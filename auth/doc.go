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
//   - Passwords are hashed with argon2id, m=19 MiB, t=2, p=1 (the OWASP
//     minimum), 16-byte salt, 32-byte key, stored as a PHC string
//     ($argon2id$v=19$m=19456,t=2,p=1$salt$hash). At most
//     Config.PasswordHashConcurrency hashes run at once (default max(2,
//     NumCPU)), so a burst of logins costs at most that many times 19 MiB.
//     An unknown email is hashed against a dummy so it takes as long as a wrong
//     password, and both answer the same 401 body.
//   - Access tokens are HS256 JWTs (the only accepted algorithm) carrying sub,
//     role, typ "access", iss, aud, iat, exp and sv (the user's session
//     version). Authenticate also checks that the user still exists and that
//     sv matches, so a password reset ends existing access tokens at once.
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
//     Mail goes through SMTP when configured; otherwise LogMailer writes the
//     mail, link included, to the log at INFO: the documented development
//     fallback of DESIGN.md section 2. No other log line ever holds a token.
//   - 2FA: setup stores a new sealed secret (409 when 2FA is already on);
//     verify enables it with a valid code and answers ten one-time recovery
//     codes (SHA-256 at rest); disable needs a valid code or recovery code.
//     A TOTP code is accepted for one time step either side of now, and the
//     last accepted time step is stored, so each code works once.
//   - Rate limits are token buckets kept in process memory, per replica, keyed
//     per account (lower-cased email, or user id for 2FA) and per client IP
//     (RemoteAddr; X-Forwarded-For only with Config.TrustProxy). They are
//     checked before any password is hashed and answer 429 with Retry-After.
//     The limiter holds at most MaxKeys keys; idle full buckets are evicted first.
//   - Roles: a user is ADMIN when their stored role is ADMIN or their email is
//     in AdminEmails (KEELSON_ADMIN_EMAILS). Whoever registers such an address
//     first gets the role, so operators should register those accounts first;
//     PATCH /auth/me refuses (403) to move an account onto such an address.
//   - Emails are trimmed and lower-cased before they are stored or compared.
package auth
