package auth

import (
	"context"
	"errors"
	"strings"

	"github.com/keelson-dev/keelson/auth/internal/onetime"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// recoveryCodeCount is how many recovery codes enabling 2FA answers.
const recoveryCodeCount = 10

// TwoFactorSetup is the answer of POST /auth/2fa/setup.
type TwoFactorSetup struct {
	Secret     string `json:"secret" doc:"Base32 TOTP secret, to type into an authenticator app"`
	OtpauthURL string `json:"otpauthUrl" doc:"otpauth://totp/... URL, for a QR code"`
}

// SetupTwoFactor stores a new sealed TOTP secret for the user (2FA stays off
// until VerifyTwoFactor) and returns it. While 2FA is on it answers 409: a
// stolen access token must not be enough to replace the second factor.
func (s *Service) SetupTwoFactor(ctx context.Context, userID platform.ID) (TwoFactorSetup, error) {
	row, err := s.userRow(ctx, s.db, "id", userID)
	if err != nil {
		return TwoFactorSetup{}, err
	}
	if row.TOTPEnabled {
		return TwoFactorSetup{}, platform.Conflict("two-factor authentication is already enabled; disable it first")
	}
	key, err := onetime.Generate(s.d.TOTPIssuer, row.Email)
	if err != nil {
		return TwoFactorSetup{}, err
	}
	sealed, err := s.d.Sealer.Seal(key.Secret())
	if err != nil {
		return TwoFactorSetup{}, err
	}
	err = execOne(ctx, s.db.NewUpdate().Model((*userRow)(nil)).
		Set("totp_secret = ?", sealed).Set("totp_last_step = 0").Set("updated_at = ?", s.now()).
		Where("id = ? AND totp_enabled = ?", userID, false),
		platform.Conflict("two-factor authentication is already enabled; disable it first"))
	if err != nil {
		return TwoFactorSetup{}, err
	}
	return TwoFactorSetup{Secret: key.Secret(), OtpauthURL: key.URL()}, nil
}

// TwoFactorEnabled is the answer of POST /auth/2fa/verify.
type TwoFactorEnabled struct {
	Enabled       bool     `json:"enabled"`
	RecoveryCodes []string `json:"recoveryCodes" doc:"One-time codes accepted in place of a TOTP code. Shown only now."`
}

var errCodeInvalid = platform.Invalid("code: invalid or already used two-factor code")

// twoFactorRejected answers a sign-in whose two-factor code did not count.
func twoFactorRejected() error {
	return platform.Unauthorized("invalid or already used two-factor code").WithCode(CodeTwoFactorInvalid)
}

// VerifyTwoFactor enables 2FA when code is valid for the secret from setup,
// and answers fresh recovery codes.
func (s *Service) VerifyTwoFactor(ctx context.Context, userID platform.ID, code, ip string) (TwoFactorEnabled, error) {
	ready := func(row *userRow) error {
		if row.TOTPEnabled {
			return platform.Conflict("two-factor authentication is already enabled")
		}
		if row.TOTPSecret == "" {
			return platform.Invalid("two-factor authentication is not set up: call POST /auth/2fa/setup first")
		}
		return nil
	}
	codes := make([]string, recoveryCodeCount)
	for i := range codes {
		codes[i] = onetime.NewRecoveryCode()
	}
	err := s.changeTwoFactor(ctx, userID, code, ip, ready, s.consumeTOTP, func(ctx context.Context, tx bun.Tx, row *userRow) error {
		err := execOne(ctx, tx.NewUpdate().Model((*userRow)(nil)).Set("totp_enabled = ?", true).Set("updated_at = ?", s.now()).
			Where("id = ? AND totp_enabled = ? AND totp_secret = ?", userID, false, row.TOTPSecret),
			platform.Conflict("two-factor authentication was changed concurrently; try again"))
		if err != nil {
			return err
		}
		if _, err := tx.NewDelete().Model((*recoveryRow)(nil)).Where("user_id = ?", userID).Exec(ctx); err != nil {
			return db.Translate(err)
		}
		rows := make([]recoveryRow, len(codes))
		for i, c := range codes {
			rows[i] = recoveryRow{ID: platform.NewID(), UserID: userID, Hash: onetime.Hash(onetime.NormalizeRecovery(c)), CreatedAt: s.now()}
		}
		if _, err = tx.NewInsert().Model(&rows).Exec(ctx); err != nil {
			return db.Translate(err)
		}
		return s.record(ctx, tx, userID, "account.2fa_enable", "two-factor authentication enabled")
	})
	if err != nil {
		return TwoFactorEnabled{}, err
	}
	return TwoFactorEnabled{Enabled: true, RecoveryCodes: codes}, nil
}

// DisableTwoFactor switches 2FA off when code is a valid TOTP or recovery
// code, and forgets the secret and the recovery codes.
func (s *Service) DisableTwoFactor(ctx context.Context, userID platform.ID, code, ip string) error {
	ready := func(row *userRow) error {
		if !row.TOTPEnabled {
			return platform.Invalid("two-factor authentication is not enabled")
		}
		return nil
	}
	return s.changeTwoFactor(ctx, userID, code, ip, ready, s.consumeSecondFactor, func(ctx context.Context, tx bun.Tx, _ *userRow) error {
		if _, err := tx.NewUpdate().Model((*userRow)(nil)).
			Set("totp_enabled = ?", false).Set("totp_secret = ''").Set("totp_last_step = 0").Set("updated_at = ?", s.now()).
			Where("id = ?", userID).Exec(ctx); err != nil {
			return db.Translate(err)
		}
		if _, err := tx.NewDelete().Model((*recoveryRow)(nil)).Where("user_id = ?", userID).Exec(ctx); err != nil {
			return db.Translate(err)
		}
		return s.record(ctx, tx, userID, "account.2fa_disable", "two-factor authentication disabled")
	})
}

// consumeFunc uses up a second-factor code of the user's (in idb, the
// caller's transaction) and reports whether it counted.
type consumeFunc func(ctx context.Context, idb bun.IDB, row *userRow, code string) (bool, error)

// changeTwoFactor makes a change to userID's 2FA, within the per-IP and
// per-user attempt limits: ready judges the user's row first; then, in one
// transaction, consume must accept code before change runs. A change made
// gives the user's attempt back.
func (s *Service) changeTwoFactor(ctx context.Context, userID platform.ID, code, ip string,
	ready func(*userRow) error, consume consumeFunc, change func(context.Context, bun.Tx, *userRow) error) error {
	if err := s.allow(ctx, ip, "2fa-ip:", s.d.Limits.TwoFactorPerIP); err != nil {
		return err
	}
	return s.twoFactorAttempt(ctx, userID, func() error {
		row, err := s.userRow(ctx, s.db, "id", userID)
		if err != nil {
			return err
		}
		if err := ready(row); err != nil {
			return err
		}
		return db.InTx(ctx, s.db, func(ctx context.Context, tx bun.Tx) error {
			if err := s.requireCode(ctx, tx, row, code, consume, errCodeInvalid); err != nil {
				return err
			}
			return change(ctx, tx, row)
		})
	})
}

// twoFactorAttempt spends one attempt of userID's two-factor budget (429 when
// none is left), then runs try. A try that succeeds gives the attempt back,
// so only failed attempts (a wrong code) use the budget up.
func (s *Service) twoFactorAttempt(ctx context.Context, userID platform.ID, try func() error) error {
	if err := s.allow(ctx, userID, "2fa-user:", s.d.Limits.TwoFactorPerUser); err != nil {
		return err
	}
	if err := try(); err != nil {
		return err
	}
	s.refund(ctx, userID, "2fa-user:", s.d.Limits.TwoFactorPerUser)
	return nil
}

// requireCode uses up code with consume (in idb); a code that does not count
// is answered with invalid.
func (s *Service) requireCode(ctx context.Context, idb bun.IDB, row *userRow, code string, consume consumeFunc, invalid error) error {
	ok, err := consume(ctx, idb, row, code)
	if err != nil {
		return err
	}
	if !ok {
		return invalid
	}
	return nil
}

// consumeSecondFactor accepts a 6-digit TOTP code or an unused recovery code
// and uses it up (in idb, which should be the caller's transaction).
func (s *Service) consumeSecondFactor(ctx context.Context, idb bun.IDB, row *userRow, code string) (bool, error) {
	code = strings.TrimSpace(code)
	if onetime.Shaped(code) {
		return s.consumeTOTP(ctx, idb, row, code)
	}
	n := onetime.NormalizeRecovery(code)
	if n == "" {
		return false, nil
	}
	res, err := idb.NewUpdate().Model((*recoveryRow)(nil)).Set("used_at = ?", s.now()).
		Where("user_id = ? AND hash = ? AND used_at IS NULL", row.ID, onetime.Hash(n)).Exec(ctx)
	if err != nil {
		return false, db.Translate(err)
	}
	affected, _ := res.RowsAffected()
	return affected == 1, nil
}

// consumeTOTP accepts code if it is valid for a time step near now that is
// later than the last accepted one, and records that step so the code never
// works again.
func (s *Service) consumeTOTP(ctx context.Context, idb bun.IDB, row *userRow, code string) (bool, error) {
	code = strings.TrimSpace(code)
	if !onetime.Shaped(code) || row.TOTPSecret == "" {
		return false, nil
	}
	secret, err := s.d.Sealer.Open(row.TOTPSecret)
	if err != nil {
		return false, errors.New("auth: open TOTP secret: sealed value unreadable")
	}
	matched, err := onetime.Match(secret, code, s.now(), row.TOTPLastStep)
	if err != nil || matched < 0 {
		return false, err
	}
	res, err := idb.NewUpdate().Model((*userRow)(nil)).Set("totp_last_step = ?", matched).
		Where("id = ? AND totp_last_step < ?", row.ID, matched).Exec(ctx)
	if err != nil {
		return false, db.Translate(err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}
