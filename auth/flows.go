package auth

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/keelson-dev/keelson/auth/internal/emailaddr"
	"github.com/keelson-dev/keelson/auth/internal/onetime"
	"github.com/keelson-dev/keelson/auth/internal/ratelimit"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// Machine-readable codes of DESIGN.md section 4.
const (
	CodeTwoFactorRequired = "TWO_FACTOR_REQUIRED"
	CodeTwoFactorInvalid  = "TWO_FACTOR_INVALID"
)

// LoginParams are the inputs of a password login.
type LoginParams struct {
	Email, Password, TwoFactorCode string
	// IP is the client (its httpx.AddrKey), for the per-address limits.
	IP string
	// Device is the device token the client kept from an earlier login of
	// this account (cookie or body); "" or another account's: none.
	Device string
}

// LoginResult is a started session and the device token for the next
// logins of this client (DeviceCookie).
type LoginResult struct {
	TokenPair
	DeviceToken string `json:"deviceToken" doc:"Proves at the next logins that this client logged in before, so others' failed attempts never lock it out. Browsers get it as an HttpOnly cookie too; other clients send it back as deviceToken"`
}

func errBadCredentials() *platform.Error { return platform.Unauthorized("invalid email or password") }

// Login checks the password (and the second factor when 2FA is on) and starts
// a session. Unknown email and wrong password answer the same error after the
// same work (one argon2id hash).
//
// Limits, all checked before any hash: a client with a device token of the
// account is limited per device only (LoginPerDevice); any other is limited
// per address (LoginPerIP), per account and address (LoginPerAccountAddr),
// and with every other client without a device token per account
// (LoginPerAccount). A successful attempt gives back what it took of the
// account's buckets.
func (s *Service) Login(ctx context.Context, p LoginParams) (LoginResult, error) {
	email, emailErr := emailaddr.Normalize(p.Email)
	if emailErr != nil {
		email = p.Email
	}
	var row *userRow
	if emailErr == nil {
		var err error
		if row, err = s.lookupUser(ctx, "email", email); err != nil {
			return LoginResult{}, err
		}
	}
	device := ""
	if row != nil && p.Device != "" {
		device = s.devices.Of(p.Device, row.ID)
	}
	taken, err := s.takeLoginBuckets(ctx, email, device, p.IP)
	if err != nil {
		return LoginResult{}, err
	}
	encoded := ""
	if row != nil {
		encoded = row.PasswordHash // empty for OAuth-only users: checked against the dummy, never matches
	}
	ok, err := s.hasher.Verify(ctx, p.Password, encoded)
	if err != nil {
		return LoginResult{}, err
	}
	if !ok || row == nil {
		return LoginResult{}, errBadCredentials()
	}
	for _, b := range taken {
		s.refund(ctx, b.key, b.prefix, b.lim)
	}
	deviceToken := p.Device
	if device == "" {
		deviceToken = s.devices.New(row.ID)
	}
	if row.TOTPEnabled {
		pair, err := s.loginSecondFactor(ctx, row, p.TwoFactorCode)
		if err != nil {
			return LoginResult{}, err
		}
		return LoginResult{TokenPair: pair, DeviceToken: deviceToken}, nil
	}
	var pair TokenPair
	err = db.InTx(ctx, s.db, func(ctx context.Context, tx bun.Tx) error {
		pair, err = s.startSession(ctx, tx, row, "with password")
		return err
	})
	if err != nil {
		return LoginResult{}, err
	}
	return LoginResult{TokenPair: pair, DeviceToken: deviceToken}, nil
}

// loginBucket is one rate-limit bucket a login attempt takes.
type loginBucket struct {
	key, prefix string
	lim         Limit
}

// takeLoginBuckets takes the buckets of a login attempt (refunded when it
// succeeds): a proven device's own bucket, or the address's, the
// (account, address) pair's and the account-wide one.
func (s *Service) takeLoginBuckets(ctx context.Context, email, device, ip string) ([]loginBucket, error) {
	var taken []loginBucket
	if device != "" {
		taken = []loginBucket{{ratelimit.PairKey(email, device), "login-dev:", s.d.Limits.LoginPerDevice}}
	} else {
		if err := s.allow(ctx, ip, "login-ip:", s.d.Limits.LoginPerIP); err != nil {
			return nil, err
		}
		if ip != "" {
			taken = append(taken, loginBucket{ratelimit.PairKey(email, ip), "login-acct-ip:", s.d.Limits.LoginPerAccountAddr})
		}
		taken = append(taken, loginBucket{email, "login-acct:", s.d.Limits.LoginPerAccount})
	}
	for _, b := range taken {
		if err := s.allow(ctx, b.key, b.prefix, b.lim); err != nil {
			return nil, err
		}
	}
	return taken, nil
}

// loginSecondFactor completes a password login of a user with two-factor
// authentication on: the code is required, limited per user, and used once.
func (s *Service) loginSecondFactor(ctx context.Context, row *userRow, code string) (TokenPair, error) {
	if code == "" {
		return TokenPair{}, platform.Unauthorized("two-factor code required: send twoFactorCode").WithCode(CodeTwoFactorRequired)
	}
	var pair TokenPair
	err := s.twoFactorAttempt(ctx, row.ID, func() error {
		return db.InTx(ctx, s.db, func(ctx context.Context, tx bun.Tx) error {
			if err := s.requireCode(ctx, tx, row, code, s.consumeSecondFactor, twoFactorRejected()); err != nil {
				return err
			}
			var err error
			pair, err = s.startSession(ctx, tx, row, "with password and two-factor code")
			return err
		})
	})
	if err != nil {
		return TokenPair{}, err
	}
	return pair, nil
}

// ForgotPassword queues a reset link for email. The request does the same
// work whether or not an account has that address (check the limits, queue a
// job); the job looks the account up, stores the token and mails the link off
// the request path. It answers nil either way (mail failures are logged).
func (s *Service) ForgotPassword(ctx context.Context, email, ip string) error {
	n, err := emailaddr.Normalize(email)
	if err != nil {
		return platform.Invalid("email: " + err.Error())
	}
	if err := s.allow(ctx, ip, "forgot-ip:", s.d.Limits.ForgotPerIP); err != nil {
		return err
	}
	if err := s.allow(ctx, n, "forgot-acct:", s.d.Limits.ForgotPerAccount); err != nil {
		return err
	}
	if err := s.allowMail(ctx, "", n); err != nil {
		return err
	}
	return s.queue("reset-password", s.forgotJob(n))
}

var errBadReset = platform.Invalid("token: invalid or expired reset token")

// ResetPassword sets a new password with a reset token. The token is used
// up, every other reset token of the user is killed, every pending email
// change cancelled, every refresh token revoked and every access token ended
// (session version). 2FA stays as it is.
func (s *Service) ResetPassword(ctx context.Context, token, newPassword string) error {
	rr := new(resetRow)
	if err := s.db.NewSelect().Model(rr).Where("hash = ?", onetime.Hash(token)).Scan(ctx); err != nil {
		if err = db.Translate(err); errors.Is(err, platform.ErrNotFound) {
			return errBadReset
		}
		return err
	}
	if rr.UsedAt != nil || !s.now().Before(rr.ExpiresAt) {
		return errBadReset
	}
	hash, err := s.hasher.Hash(ctx, newPassword)
	if err != nil {
		return err
	}
	defer s.cache.InvalidateOwner(rr.UserID) // after the commit, before the answer
	return db.InTx(ctx, s.db, func(ctx context.Context, tx bun.Tx) error {
		now := s.now()
		err := execOne(ctx, tx.NewUpdate().Model((*resetRow)(nil)).Set("used_at = ?", now).
			Where("id = ? AND used_at IS NULL AND expires_at > ?", rr.ID, now), errBadReset)
		if err != nil {
			return err
		}
		if _, err := tx.NewUpdate().Model((*resetRow)(nil)).Set("used_at = ?", now).
			Where("user_id = ? AND used_at IS NULL", rr.UserID).Exec(ctx); err != nil {
			return db.Translate(err)
		}
		// A pending email change was asked for with the old password: whoever
		// knew it must not finish the change after the owner took control back.
		if _, err := tx.NewUpdate().Model((*emailTokenRow)(nil)).Set("used_at = ?", now).
			Where("user_id = ? AND kind = ? AND used_at IS NULL", rr.UserID, emailKindChange).Exec(ctx); err != nil {
			return db.Translate(err)
		}
		if _, err := tx.NewUpdate().Model((*userRow)(nil)).Set("password_hash = ?", hash).
			Set("session_version = session_version + 1").Set("updated_at = ?", now).
			Where("id = ?", rr.UserID).Exec(ctx); err != nil {
			return db.Translate(err)
		}
		if err := revokeAllSessions(ctx, tx, rr.UserID, now); err != nil {
			return err
		}
		return s.record(ctx, tx, rr.UserID, "account.password_reset", "password reset by mailed link; every session ended")
	})
}

// ProfilePatch holds the profile fields PATCH /auth/me may change; nil leaves
// a field alone, an empty string clears it (email cannot be cleared).
type ProfilePatch struct {
	Email, Name, Username, Bio, Company, Location, Website, CodehostUsername, Image *string
	// CurrentPassword and TwoFactorCode prove an email change (see reauthenticate).
	CurrentPassword, TwoFactorCode string
	// Session is the caller's session (refresh-token family): an email change
	// ends every other session.
	Session string
}

// UpdateProfile applies p to the user. A new email does not take effect here:
// it needs proof (current password, or 2FA code) in p, else 400/403 and
// nothing changes; then the link mailed to the new address makes it the
// email (VerifyEmail), the old address is told, and every other session of
// the account ends now. Whether the new address is taken is not checked here
// (same work either way); redeeming the link answers 409 then.
func (s *Service) UpdateProfile(ctx context.Context, userID platform.ID, p ProfilePatch) (*User, error) {
	cur, err := s.userRow(ctx, s.db, "id", userID)
	if err != nil {
		return nil, err
	}
	newEmail := ""
	if p.Email != nil {
		e, err := emailaddr.Normalize(*p.Email)
		if err != nil {
			return nil, platform.Invalid("email: " + err.Error())
		}
		if e != cur.Email {
			newEmail = e
			if err := s.reauthenticate(ctx, cur, p.CurrentPassword, p.TwoFactorCode); err != nil {
				return nil, err
			}
		}
	}
	if newEmail != "" {
		// Proven: now the mails it sends are counted (and refused past the
		// limits before anything changes).
		if err := s.allowMail(ctx, userID, newEmail); err != nil {
			return nil, err
		}
		defer s.cache.InvalidateOwner(userID) // other sessions end: after the commit, before the answer
	}
	err = db.InTx(ctx, s.db, func(ctx context.Context, tx bun.Tx) error {
		now := s.now()
		if newEmail != "" {
			if err := s.consumeReauthCode(ctx, tx, cur, p.TwoFactorCode); err != nil {
				return err
			}
			if err := revokeOtherSessions(ctx, tx, userID, p.Session, now); err != nil {
				return err
			}
		}
		q := tx.NewUpdate().Model((*userRow)(nil)).Where("id = ?", userID).Set("updated_at = ?", now)
		var set []string
		for col, v := range map[string]*string{
			"name": p.Name, "username": p.Username, "bio": p.Bio, "company": p.Company, "location": p.Location,
			"website": p.Website, "codehost_username": p.CodehostUsername, "image": p.Image,
		} {
			if v != nil {
				q = q.Set("? = ?", bun.Ident(col), opt(*v))
				set = append(set, col)
			}
		}
		if err := execOne(ctx, q, platform.NotFound("user not found")); err != nil {
			return err
		}
		return s.record(ctx, tx, userID, "account.update", profileSummary(set, newEmail != ""))
	})
	if err != nil {
		return nil, err
	}
	if newEmail != "" {
		s.refund(ctx, userID, "reauth-user:", s.d.Limits.LoginPerAccountAddr)
		if err := s.queue("change-email", s.changeJob(userID, cur.Email, newEmail)); err != nil {
			return nil, err
		}
		s.log.InfoContext(ctx, "email change requested; other sessions ended", "user_id", userID)
	}
	return s.UserByID(ctx, userID)
}

// profileSummary words a profile update for its audit row: the columns set
// (never their values), and whether an email change was asked for.
func profileSummary(cols []string, emailChange bool) string {
	slices.Sort(cols)
	out := "profile fields set: " + strings.Join(cols, ", ")
	if emailChange {
		out += "; email change requested (until the mailed link is used)"
	}
	return out
}
