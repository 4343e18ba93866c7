package codehost

import (
	"errors"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/keelson-dev/keelson/platform"
)

const stateAudience = "keelson-codehost-install"

var (
	errStateInvalid = errors.New("install state is invalid")
	errStateExpired = errors.New("install state has expired")
)

type stateClaims struct {
	jwt.RegisteredClaims
}

// newState signs a state for userID: a random id (recorded when used), the
// user it is bound to, and an expiry.
func newState(key []byte, userID string, now time.Time, ttl time.Duration) (string, error) {
	c := stateClaims{jwt.RegisteredClaims{
		ID:        platform.NewID(),
		Subject:   userID,
		Audience:  jwt.ClaimStrings{stateAudience},
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(key)
}

// parseState verifies a state's signature, audience and expiry and returns its
// id, user and expiry.
func parseState(key []byte, s string, now time.Time) (id, userID string, exp time.Time, err error) {
	var c stateClaims
	_, err = jwt.ParseWithClaims(s, &c, func(*jwt.Token) (any, error) { return key, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithAudience(stateAudience),
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(func() time.Time { return now }),
	)
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return "", "", time.Time{}, errStateExpired
	case err != nil:
		return "", "", time.Time{}, errStateInvalid
	}
	if !platform.ValidID(c.ID) || c.Subject == "" {
		return "", "", time.Time{}, errStateInvalid
	}
	return c.ID, c.Subject, c.ExpiresAt.Time, nil
}
