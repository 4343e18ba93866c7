package auth

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"time"

	"github.com/keelson-dev/keelson/auth/internal/emailaddr"
	"github.com/keelson-dev/keelson/auth/internal/onetime"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// allowMail spends one mail of the account userID ("" for none: the
// forgot-password flow, limited per address already) and one of the
// destination address, or answers 429.
func (s *Service) allowMail(ctx context.Context, userID, to string) error {
	if userID != "" {
		if err := s.allow(ctx, userID, "mail-user:", s.d.Limits.MailPerAccount); err != nil {
			return err
		}
	}
	return s.allow(ctx, to, "mail-to:", s.d.Limits.MailPerDestination)
}

// queue adds a mail job, or answers 503 when the queue is full (whatever the
// account: the answer reveals nothing).
func (s *Service) queue(name string, run func(ctx context.Context) error) error {
	if err := s.mq.Enqueue(name, run); err != nil {
		return platform.Unavailable("too many mails waiting to be sent; try again in a minute")
	}
	return nil
}

// issueEmailToken stores a new single-use link token of kind for userID and
// address email, and answers the raw token. A new change token retires the
// user's older pending ones (only the latest requested address can win).
func (s *Service) issueEmailToken(ctx context.Context, userID, kind, email string) (string, error) {
	raw, hash := onetime.NewToken()
	now := s.now()
	err := db.InTx(ctx, s.db, func(ctx context.Context, tx bun.Tx) error {
		if kind == emailKindChange {
			if _, err := tx.NewUpdate().Model((*emailTokenRow)(nil)).Set("used_at = ?", now).
				Where("user_id = ? AND kind = ? AND used_at IS NULL", userID, emailKindChange).Exec(ctx); err != nil {
				return db.Translate(err)
			}
		}
		_, err := tx.NewInsert().Model(&emailTokenRow{
			ID: platform.NewID(), Hash: hash, UserID: userID, Kind: kind, Email: email,
			CreatedAt: now, ExpiresAt: now.Add(s.d.VerifyTTL),
		}).Exec(ctx)
		return db.Translate(err)
	})
	return raw, err
}

func (s *Service) verifyLink(raw string) string {
	return s.d.FrontendURL + "/verify-email?token=" + url.QueryEscape(raw)
}

// verifyJob mails the account's current address a verification link, if the
// account still has that address unverified.
func (s *Service) verifyJob(userID, email string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		row, err := s.lookupUser(ctx, "id", userID)
		if err != nil || row == nil || row.Email != email || row.EmailVerified {
			return err
		}
		raw, err := s.issueEmailToken(ctx, userID, emailKindVerify, email)
		if err != nil {
			return err
		}
		return s.d.Mailer.Send(ctx, Mail{
			To:      email,
			Subject: "Confirm your Keelson email address",
			Text: "Confirm that this address belongs to your Keelson account by opening this link within " +
				s.d.VerifyTTL.String() + ":\n\n" + s.verifyLink(raw) + "\n\n" +
				"If you did not create a Keelson account, ignore this mail.\n",
		})
	}
}

// changeJob mails the new address the link that makes it the account's email,
// and tells the old address about the request.
func (s *Service) changeJob(userID, oldEmail, newEmail string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		raw, err := s.issueEmailToken(ctx, userID, emailKindChange, newEmail)
		if err != nil {
			return err
		}
		err = s.d.Mailer.Send(ctx, Mail{
			To:      newEmail,
			Subject: "Confirm your new Keelson email address",
			Text: "Someone asked to make this address the email of a Keelson account.\n\n" +
				"To confirm, open this link within " + s.d.VerifyTTL.String() + ":\n\n" + s.verifyLink(raw) + "\n\n" +
				"Until then the account keeps its old address. If it was not you, ignore this mail.\n",
		})
		notice := s.d.Mailer.Send(ctx, Mail{
			To:      oldEmail,
			Subject: "Your Keelson email address is being changed",
			Text: "Someone asked to change the email of your Keelson account to " + emailaddr.Mask(newEmail) + ".\n\n" +
				"It changes only when the link mailed to the new address is opened. Your other sessions were signed out.\n" +
				"If it was not you, reset your password now: someone knows it, and a reset cancels the change.\n",
		})
		return errors.Join(err, notice)
	}
}

// forgotJob stores a reset token and mails the link when email belongs to an
// account; for an unknown email it does nothing. It runs off the request path.
func (s *Service) forgotJob(email string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		row, err := s.lookupUser(ctx, "email", email)
		if err != nil || row == nil {
			return err
		}
		raw, hash := onetime.NewToken()
		now := s.now()
		rr := &resetRow{ID: platform.NewID(), Hash: hash, UserID: row.ID, CreatedAt: now, ExpiresAt: now.Add(s.d.ResetTTL)}
		if _, err := s.db.NewInsert().Model(rr).Exec(ctx); err != nil {
			return db.Translate(err)
		}
		link := s.d.FrontendURL + "/reset-password?token=" + url.QueryEscape(raw)
		return s.d.Mailer.Send(ctx, Mail{
			To:      row.Email,
			Subject: "Reset your Keelson password",
			Text: "Someone asked to reset the password of your Keelson account.\n\n" +
				"To choose a new password, open this link within " + s.d.ResetTTL.String() + ":\n\n" + link + "\n\n" +
				"If it was not you, ignore this mail: your password stays as it is.\n",
		})
	}
}

var errBadVerify = platform.Invalid("token: invalid, expired or already used email link")

// VerifyEmail redeems a mailed email link. A verification link marks the
// account's address verified (if it is still the account's address); a change
// link makes its address the account's email, verified. A link works once.
// A change to an address another account took meanwhile answers 409 and
// leaves the link unused.
func (s *Service) VerifyEmail(ctx context.Context, raw string) (string, error) {
	var kind, user string
	// The email and its verification make the role: after the commit, before the answer.
	defer func() {
		if user != "" {
			s.cache.InvalidateOwner(user)
		}
	}()
	err := db.InTx(ctx, s.db, func(ctx context.Context, tx bun.Tx) error {
		now := s.now()
		t := new(emailTokenRow)
		if err := tx.NewSelect().Model(t).Where("hash = ?", onetime.Hash(raw)).Scan(ctx); err != nil {
			if err = db.Translate(err); errors.Is(err, platform.ErrNotFound) {
				return errBadVerify
			}
			return err
		}
		if t.UsedAt != nil || !now.Before(t.ExpiresAt) {
			return errBadVerify
		}
		err := execOne(ctx, tx.NewUpdate().Model((*emailTokenRow)(nil)).Set("used_at = ?", now).
			Where("id = ? AND used_at IS NULL", t.ID), errBadVerify)
		if err != nil {
			return err
		}
		kind, user = t.Kind, t.UserID
		q := tx.NewUpdate().Model((*userRow)(nil)).Set("email_verified = ?", true).Set("updated_at = ?", now).Where("id = ?", t.UserID)
		switch t.Kind {
		case emailKindVerify:
			// Only while the account still has the address the link was mailed to.
			q = q.Where("email = ?", t.Email)
		case emailKindChange:
			q = q.Set("email = ?", t.Email).Set("email_via_change = ?", true)
		default:
			return errBadVerify
		}
		err = execOne(ctx, q, errBadVerify)
		if errors.Is(err, platform.ErrConflict) {
			return emailTaken(err)
		}
		if err != nil {
			return err
		}
		if t.Kind == emailKindChange {
			// Older links of the account (for the old address) are void now.
			_, err = tx.NewUpdate().Model((*emailTokenRow)(nil)).Set("used_at = ?", now).
				Where("user_id = ? AND used_at IS NULL", t.UserID).Exec(ctx)
			return db.Translate(err)
		}
		return nil
	})
	return kind, err
}

// ResendVerification queues a new verification link to the user's address.
// An already verified address answers 409.
func (s *Service) ResendVerification(ctx context.Context, userID platform.ID) error {
	row, err := s.userRow(ctx, s.db, "id", userID)
	if err != nil {
		return err
	}
	if row.EmailVerified {
		return platform.Conflict("email: this address is already verified")
	}
	if err := s.allowMail(ctx, userID, row.Email); err != nil {
		return err
	}
	return s.queue("verify-email", s.verifyJob(row.ID, row.Email))
}

// reauthenticate checks the proof an email change needs: the current password
// (and a 2FA code when 2FA is on), or for an account without a password a
// fresh TOTP or recovery code. It checks the password; the caller uses the
// code up with consumeReauthCode in its transaction.
func (s *Service) reauthenticate(ctx context.Context, row *userRow, password, code string) error {
	if row.PasswordHash == "" && !row.TOTPEnabled {
		return platform.Forbidden("currentPassword: this account has no password; set one through POST /auth/forgot-password " +
			"(or enable 2FA and send twoFactorCode) before changing the email")
	}
	if row.PasswordHash != "" && password == "" {
		return platform.Invalid("currentPassword: required to change the email")
	}
	if row.TOTPEnabled && code == "" {
		return platform.Invalid("twoFactorCode: required to change the email of an account with 2FA")
	}
	if err := s.allow(ctx, row.ID, "reauth-user:", s.d.Limits.LoginPerAccountAddr); err != nil {
		return err
	}
	if row.PasswordHash != "" {
		ok, err := s.hasher.Verify(ctx, password, row.PasswordHash)
		if err != nil {
			return err
		}
		if !ok {
			return platform.Forbidden("currentPassword: incorrect password")
		}
	}
	return nil
}

// consumeReauthCode uses up the 2FA code of an email change (in tx) when the
// account has 2FA on.
func (s *Service) consumeReauthCode(ctx context.Context, tx bun.IDB, row *userRow, code string) error {
	if !row.TOTPEnabled {
		return nil
	}
	return s.requireCode(ctx, tx, row, code, s.consumeSecondFactor,
		platform.Forbidden("twoFactorCode: invalid or already used two-factor code").WithCode(CodeTwoFactorInvalid))
}

// revokeOtherSessions ends every session of the user but keep (a refresh
// token family; "" ends them all): their refresh tokens are revoked, and the
// access tokens of those sessions stop working at once (Authenticate checks
// the session).
func revokeOtherSessions(ctx context.Context, idb bun.IDB, userID, keep string, now time.Time) error {
	q := idb.NewUpdate().Model((*refreshRow)(nil)).Set("revoked_at = ?", now).
		Where("user_id = ? AND revoked_at IS NULL", userID)
	if keep != "" {
		q = q.Where("family_id <> ?", keep)
	}
	_, err := q.Exec(ctx)
	return db.Translate(err)
}

// AllowMailTo spends one mail of the destination address's budget
// (Limits.MailPerDestination), the one every mail of this module spends, or
// answers 429: for other modules' mail (team invitations), so no route
// mails one address more than that altogether.
func (s *Service) AllowMailTo(ctx context.Context, to string) error {
	return s.allow(ctx, strings.ToLower(strings.TrimSpace(to)), "mail-to:", s.d.Limits.MailPerDestination)
}

// Allow spends one attempt of key's bucket, max per per, in the module's
// shared rate-limit table, or answers 429: for other modules' limits (team
// invitations per team). Buckets idle longer than the longest of Limits'
// periods are forgotten (full again).
func (s *Service) Allow(ctx context.Context, key string, max int, per time.Duration) error {
	return s.allow(ctx, key, "ext:", Limit{Max: max, Per: per})
}
