package auth

import (
	"context"
	"errors"
	"time"

	"github.com/keelson-dev/keelson/auth/internal/onetime"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// A login another party vouched for (an OAuth provider) does not stand in for
// the account's second factor: when 2FA is on, the provider's callback gets a
// challenge instead of tokens, and POST /auth/2fa/login trades the challenge
// and a TOTP or recovery code for the token pair.
const (
	challengeTTL         = 5 * time.Minute
	challengeMaxAttempts = 5
)

// TwoFactorChallenge answers "" when the user has 2FA off (issue tokens), or
// a new single-use challenge, valid 5 minutes and at most 5 codes, to redeem
// at POST /auth/2fa/login with a code.
func (s *Service) TwoFactorChallenge(ctx context.Context, userID platform.ID) (string, error) {
	row, err := s.userRow(ctx, s.db, "id", userID)
	if err != nil {
		return "", err
	}
	if !row.TOTPEnabled {
		return "", nil
	}
	raw, hash := onetime.NewToken()
	now := s.now()
	if _, err := s.db.NewDelete().Model((*challengeRow)(nil)).Where("expires_at < ?", now).Exec(ctx); err != nil {
		s.log.WarnContext(ctx, "purge expired 2FA challenges", "err", err)
	}
	if _, err := s.db.NewInsert().Model(&challengeRow{
		ID: hash, UserID: row.ID, CreatedAt: now, ExpiresAt: now.Add(challengeTTL),
	}).Exec(ctx); err != nil {
		return "", db.Translate(err)
	}
	return raw, nil
}

var errBadChallenge = platform.Invalid("challenge: invalid, expired or already used; log in again")

// CompleteTwoFactorLogin trades a challenge and a TOTP or recovery code for a
// new session. A wrong code answers 401 TWO_FACTOR_INVALID and spends one of
// the challenge's attempts (and of the user's 2FA budget).
func (s *Service) CompleteTwoFactorLogin(ctx context.Context, challenge, code, ip string) (TokenPair, error) {
	if err := s.allow(ctx, ip, "2fa-ip:", s.d.Limits.TwoFactorPerIP); err != nil {
		return TokenPair{}, err
	}
	id, now := onetime.Hash(challenge), s.now()
	ch := new(challengeRow)
	if err := s.db.NewSelect().Model(ch).Where("id = ?", id).Scan(ctx); err != nil {
		if err = db.Translate(err); errors.Is(err, platform.ErrNotFound) {
			return TokenPair{}, errBadChallenge
		}
		return TokenPair{}, err
	}
	if ch.UsedAt != nil || !now.Before(ch.ExpiresAt) || ch.Attempts >= challengeMaxAttempts {
		return TokenPair{}, errBadChallenge
	}
	var pair TokenPair
	err := s.twoFactorAttempt(ctx, ch.UserID, func() (err error) {
		pair, err = s.redeemChallenge(ctx, ch, code, now)
		return err
	})
	if err != nil {
		return TokenPair{}, err
	}
	return pair, nil
}

// redeemChallenge spends one of ch's attempts on code and, when the code
// counts, uses ch up and starts the user's session.
func (s *Service) redeemChallenge(ctx context.Context, ch *challengeRow, code string, now time.Time) (TokenPair, error) {
	// Spend an attempt first, outside the transaction below, so a wrong code
	// (which rolls that transaction back) still counts.
	err := execOne(ctx, s.db.NewUpdate().Model((*challengeRow)(nil)).Set("attempts = attempts + 1").
		Where("id = ? AND used_at IS NULL AND attempts < ?", ch.ID, challengeMaxAttempts), errBadChallenge)
	if err != nil {
		return TokenPair{}, err
	}
	var pair TokenPair
	err = db.InTx(ctx, s.db, func(ctx context.Context, tx bun.Tx) error {
		row, err := s.userRow(ctx, tx, "id", ch.UserID)
		if errors.Is(err, platform.ErrNotFound) {
			return errBadChallenge
		}
		if err != nil {
			return err
		}
		if err := s.requireCode(ctx, tx, row, code, s.consumeSecondFactor, twoFactorRejected()); err != nil {
			return err
		}
		err = execOne(ctx, tx.NewUpdate().Model((*challengeRow)(nil)).Set("used_at = ?", now).
			Where("id = ? AND used_at IS NULL", ch.ID), errBadChallenge)
		if err != nil {
			return err
		}
		pair, err = s.startSession(ctx, tx, row, "through an identity provider, with a two-factor code")
		return err
	})
	return pair, err
}
