package auth

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base32"
	"errors"
	"strings"
	"time"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/pquerna/otp"
	"github.com/pquerna/otp/totp"
	"github.com/uptrace/bun"
)

// TOTP per DESIGN.md section 4: RFC 6238, SHA-1, 6 digits, 30 s.
const (
	totpPeriod        = 30
	totpSkew          = 1 // accept one time step either side of now (clock drift)
	recoveryCodeCount = 10
)

var totpOpts = totp.ValidateOpts{Period: totpPeriod, Digits: otp.DigitsSix, Algorithm: otp.AlgorithmSHA1}

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
	key, err := totp.Generate(totp.GenerateOpts{
		Issuer: s.d.TOTPIssuer, AccountName: row.Email, Period: totpPeriod,
		Digits: otp.DigitsSix, Algorithm: otp.AlgorithmSHA1, SecretSize: 20,
	})
	if err != nil {
		return TwoFactorSetup{}, err
	}
	sealed, err := s.d.Sealer.Seal(key.Secret())
	if err != nil {
		return TwoFactorSetup{}, err
	}
	res, err := s.db.NewUpdate().Model((*userRow)(nil)).
		Set("totp_secret = ?", sealed).Set("totp_last_step = 0").Set("updated_at = ?", s.now()).
		Where("id = ? AND totp_enabled = ?", userID, false).Exec(ctx)
	if err != nil {
		return TwoFactorSetup{}, db.Translate(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return TwoFactorSetup{}, platform.Conflict("two-factor authentication is already enabled; disable it first")
	}
	return TwoFactorSetup{Secret: key.Secret(), OtpauthURL: key.URL()}, nil
}

// TwoFactorEnabled is the answer of POST /auth/2fa/verify.
type TwoFactorEnabled struct {
	Enabled       bool     `json:"enabled"`
	RecoveryCodes []string `json:"recoveryCodes" doc:"One-time codes accepted in place of a TOTP code. Shown only now."`
}

var errCodeInvalid = platform.Invalid("code: invalid or already used two-factor code")

// VerifyTwoFactor enables 2FA when code is valid for the secret from setup,
// and answers fresh recovery codes.
func (s *Service) VerifyTwoFactor(ctx context.Context, userID platform.ID, code, ip string) (TwoFactorEnabled, error) {
	if err := s.allow(ctx, ip, "2fa-ip:", s.d.Limits.TwoFactorPerIP); err != nil {
		return TwoFactorEnabled{}, err
	}
	if err := s.allow(ctx, userID, "2fa-user:", s.d.Limits.TwoFactorPerUser); err != nil {
		return TwoFactorEnabled{}, err
	}
	row, err := s.userRow(ctx, s.db, "id", userID)
	if err != nil {
		return TwoFactorEnabled{}, err
	}
	if row.TOTPEnabled {
		return TwoFactorEnabled{}, platform.Conflict("two-factor authentication is already enabled")
	}
	if row.TOTPSecret == "" {
		return TwoFactorEnabled{}, platform.Invalid("two-factor authentication is not set up: call POST /auth/2fa/setup first")
	}
	codes := make([]string, recoveryCodeCount)
	for i := range codes {
		codes[i] = newRecoveryCode()
	}
	err = db.InTx(ctx, s.db, func(ctx context.Context, tx bun.Tx) error {
		ok, err := s.consumeTOTP(ctx, tx, row, code)
		if err != nil {
			return err
		}
		if !ok {
			return errCodeInvalid
		}
		res, err := tx.NewUpdate().Model((*userRow)(nil)).Set("totp_enabled = ?", true).Set("updated_at = ?", s.now()).
			Where("id = ? AND totp_enabled = ? AND totp_secret = ?", userID, false, row.TOTPSecret).Exec(ctx)
		if err != nil {
			return db.Translate(err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return platform.Conflict("two-factor authentication was changed concurrently; try again")
		}
		if _, err := tx.NewDelete().Model((*recoveryRow)(nil)).Where("user_id = ?", userID).Exec(ctx); err != nil {
			return db.Translate(err)
		}
		rows := make([]recoveryRow, len(codes))
		for i, c := range codes {
			rows[i] = recoveryRow{ID: platform.NewID(), UserID: userID, Hash: hashToken(normalizeRecovery(c)), CreatedAt: s.now()}
		}
		_, err = tx.NewInsert().Model(&rows).Exec(ctx)
		return db.Translate(err)
	})
	if err != nil {
		return TwoFactorEnabled{}, err
	}
	s.refund(ctx, userID, "2fa-user:", s.d.Limits.TwoFactorPerUser)
	return TwoFactorEnabled{Enabled: true, RecoveryCodes: codes}, nil
}

// DisableTwoFactor switches 2FA off when code is a valid TOTP or recovery
// code, and forgets the secret and the recovery codes.
func (s *Service) DisableTwoFactor(ctx context.Context, userID platform.ID, code, ip string) error {
	if err := s.allow(ctx, ip, "2fa-ip:", s.d.Limits.TwoFactorPerIP); err != nil {
		return err
	}
	if err := s.allow(ctx, userID, "2fa-user:", s.d.Limits.TwoFactorPerUser); err != nil {
		return err
	}
	row, err := s.userRow(ctx, s.db, "id", userID)
	if err != nil {
		return err
	}
	if !row.TOTPEnabled {
		return platform.Invalid("two-factor authentication is not enabled")
	}
	err = db.InTx(ctx, s.db, func(ctx context.Context, tx bun.Tx) error {
		ok, err := s.consumeSecondFactor(ctx, tx, row, code)
		if err != nil {
			return err
		}
		if !ok {
			return errCodeInvalid
		}
		if _, err := tx.NewUpdate().Model((*userRow)(nil)).
			Set("totp_enabled = ?", false).Set("totp_secret = ''").Set("totp_last_step = 0").Set("updated_at = ?", s.now()).
			Where("id = ?", userID).Exec(ctx); err != nil {
			return db.Translate(err)
		}
		_, err = tx.NewDelete().Model((*recoveryRow)(nil)).Where("user_id = ?", userID).Exec(ctx)
		return db.Translate(err)
	})
	if err != nil {
		return err
	}
	s.refund(ctx, userID, "2fa-user:", s.d.Limits.TwoFactorPerUser)
	return nil
}

// consumeSecondFactor accepts a 6-digit TOTP code or an unused recovery code
// and uses it up (in idb, which should be the caller's transaction).
func (s *Service) consumeSecondFactor(ctx context.Context, idb bun.IDB, row *userRow, code string) (bool, error) {
	code = strings.TrimSpace(code)
	if isTOTPShape(code) {
		return s.consumeTOTP(ctx, idb, row, code)
	}
	n := normalizeRecovery(code)
	if n == "" {
		return false, nil
	}
	res, err := idb.NewUpdate().Model((*recoveryRow)(nil)).Set("used_at = ?", s.now()).
		Where("user_id = ? AND hash = ? AND used_at IS NULL", row.ID, hashToken(n)).Exec(ctx)
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
	if !isTOTPShape(code) || row.TOTPSecret == "" {
		return false, nil
	}
	secret, err := s.d.Sealer.Open(row.TOTPSecret)
	if err != nil {
		return false, errors.New("auth: open TOTP secret: sealed value unreadable")
	}
	now := s.now().Unix() / totpPeriod
	var matched int64 = -1
	for st := now - totpSkew; st <= now+totpSkew; st++ {
		want, err := totp.GenerateCodeCustom(secret, time.Unix(st*totpPeriod, 0).UTC(), totpOpts)
		if err != nil {
			return false, err
		}
		if subtle.ConstantTimeCompare([]byte(want), []byte(code)) == 1 && st > row.TOTPLastStep && matched < 0 {
			matched = st
		}
	}
	if matched < 0 {
		return false, nil
	}
	res, err := idb.NewUpdate().Model((*userRow)(nil)).Set("totp_last_step = ?", matched).
		Where("id = ? AND totp_last_step < ?", row.ID, matched).Exec(ctx)
	if err != nil {
		return false, db.Translate(err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

func isTOTPShape(code string) bool {
	if len(code) != 6 {
		return false
	}
	for _, r := range code {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

var recoveryEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// newRecoveryCode returns 60 random bits as xxxx-xxxx-xxxx (lower-case base32).
func newRecoveryCode() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	s := strings.ToLower(recoveryEncoding.EncodeToString(b))[:12]
	return s[:4] + "-" + s[4:8] + "-" + s[8:]
}

// normalizeRecovery makes "ABCD EFGH-ijkl" and "abcdefghijkl" the same code.
func normalizeRecovery(code string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(code) {
		switch {
		case r == '-' || r == ' ':
		case (r >= 'a' && r <= 'z') || (r >= '2' && r <= '7'):
			b.WriteRune(r)
		default:
			return ""
		}
	}
	if b.Len() != 12 {
		return ""
	}
	return b.String()
}
