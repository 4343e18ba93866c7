package auth

import (
	"cmp"
	"context"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/keelson-dev/keelson/auth/internal/emailaddr"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/httpx"
)

// Request size cap for every auth route: the bodies are a few short strings.
const maxBody = 16 << 10

// Register adds the routes of SPEC 4.1 and 4.2 to api.
func (s *Service) Register(api huma.API) error {
	pub := huma.Middlewares{s.clientIP}
	prot := huma.Middlewares{s.clientIP, platform.RequireAuth(api, s)}
	tags := []string{"Auth"}
	op := func(id, method, path, summary string, mw huma.Middlewares) huma.Operation {
		o := huma.Operation{OperationID: id, Method: method, Path: path, Summary: summary, Tags: tags,
			Middlewares: mw, MaxBodyBytes: maxBody}
		if len(mw) > 1 {
			o.Security = platform.Bearer()
		}
		return o
	}

	reg := op("auth-register", http.MethodPost, "/auth/register", "Create an account", pub)
	reg.DefaultStatus = http.StatusCreated
	huma.Register(api, reg, s.handleRegister)
	huma.Register(api, op("auth-login", http.MethodPost, "/auth/login", "Log in with email and password", pub), s.handleLogin)
	huma.Register(api, op("auth-refresh", http.MethodPost, "/auth/refresh", "Trade a refresh token for a new token pair", pub), s.handleRefresh)
	huma.Register(api, op("auth-forgot-password", http.MethodPost, "/auth/forgot-password", "Mail a password-reset link", pub), s.handleForgot)
	huma.Register(api, op("auth-reset-password", http.MethodPost, "/auth/reset-password", "Set a new password with a reset token", pub), s.handleReset)
	huma.Register(api, op("auth-verify-email", http.MethodPost, "/auth/verify-email", "Redeem a mailed email link (verification or email change)", pub), s.handleVerifyEmail)
	huma.Register(api, op("auth-verify-email-resend", http.MethodPost, "/auth/verify-email/resend", "Mail a new verification link to the account's address", prot), s.handleResendVerification)

	huma.Register(api, op("auth-2fa-login", http.MethodPost, "/auth/2fa/login", "Finish an OAuth login of a 2FA account with a TOTP or recovery code", pub), s.handleTwoFactorLogin)
	huma.Register(api, op("auth-2fa-setup", http.MethodPost, "/auth/2fa/setup", "Generate a TOTP secret", prot), s.handleSetup)
	huma.Register(api, op("auth-2fa-verify", http.MethodPost, "/auth/2fa/verify", "Enable 2FA with a TOTP code", prot), s.handleVerify)
	huma.Register(api, op("auth-2fa-disable", http.MethodPost, "/auth/2fa/disable", "Disable 2FA with a TOTP or recovery code", prot), s.handleDisable)
	huma.Register(api, op("auth-me", http.MethodGet, "/auth/me", "The caller's profile", prot), s.handleMe)
	huma.Register(api, op("auth-me-update", http.MethodPatch, "/auth/me", "Change the caller's profile", prot), s.handleUpdateMe)
	huma.Register(api, op("auth-logout", http.MethodPost, "/auth/logout", "Log out", prot), s.handleLogout)
	return nil
}

// DeviceCookie carries a device token (auth/internal/device) to browsers
// (HttpOnly, Path /auth); other clients send the login's deviceToken back.
const DeviceCookie = "keelson_device"

type ipKey struct{}

// clientIP puts the client in the context, as the key of every per-address
// limit (httpx.AddrKey of httpx.ClientAddr: an IPv6 client by its /64): the
// TCP peer, unless the peer is a trusted proxy (TrustedProxies); then the
// rightmost X-Forwarded-For address that is not a trusted proxy.
func (s *Service) clientIP(ctx huma.Context, next func(huma.Context)) {
	client := httpx.ClientAddr(ctx.RemoteAddr(), httpx.ForwardedFor(ctx.EachHeader), s.d.TrustedProxies)
	if a, err := netip.ParseAddr(client); err == nil {
		client = httpx.AddrKey(a)
	}
	next(huma.WithValue(ctx, ipKey{}, client))
}

func ipFrom(ctx context.Context) string {
	ip, _ := ctx.Value(ipKey{}).(string)
	return ip
}

func principal(ctx context.Context) platform.Principal {
	p, _ := platform.PrincipalFrom(ctx)
	return p
}

// emailField normalizes *e in place, or reports a validation error at path.
func emailField(e *string, pb *huma.PathBuffer, name string) []error {
	n, err := emailaddr.Normalize(*e)
	if err != nil {
		return []error{&huma.ErrorDetail{Location: pb.With(name), Message: err.Error()}}
	}
	*e = n
	return nil
}

func mismatch(pb *huma.PathBuffer) error {
	return &huma.ErrorDetail{Location: pb.With("confirmPassword"), Message: "passwords do not match"}
}

// ---- register ----

type registerBody struct {
	Email            string `json:"email" format:"email" maxLength:"254" doc:"Login email; stored lower-case"`
	Password         string `json:"password" minLength:"6" maxLength:"128"`
	ConfirmPassword  string `json:"confirmPassword" maxLength:"128" doc:"Must equal password"`
	Name             string `json:"name,omitempty" maxLength:"100"`
	Username         string `json:"username,omitempty" maxLength:"64"`
	Bio              string `json:"bio,omitempty" maxLength:"1000"`
	Company          string `json:"company,omitempty" maxLength:"100"`
	Location         string `json:"location,omitempty" maxLength:"100"`
	Website          string `json:"website,omitempty" maxLength:"2048"`
	CodehostUsername string `json:"codehostUsername,omitempty" maxLength:"100"`
	Image            string `json:"image,omitempty" maxLength:"2048" doc:"Avatar URL"`
}

func (b *registerBody) Resolve(_ huma.Context, pb *huma.PathBuffer) []error {
	errs := emailField(&b.Email, pb, "email")
	if b.ConfirmPassword != b.Password {
		errs = append(errs, mismatch(pb))
	}
	return errs
}

type registerInput struct{ Body registerBody }
type userOutput struct{ Body *User }

func (s *Service) handleRegister(ctx context.Context, in *registerInput) (*userOutput, error) {
	if err := s.allow(ctx, ipFrom(ctx), "register-ip:", s.d.Limits.RegisterPerIP); err != nil {
		return nil, err
	}
	b := in.Body
	u, err := s.CreateUser(ctx, CreateUserParams{
		Email: b.Email, Password: b.Password, Name: b.Name, Username: b.Username, Bio: b.Bio, Company: b.Company,
		Location: b.Location, Website: b.Website, CodehostUsername: b.CodehostUsername, Image: b.Image,
	})
	if err != nil {
		return nil, err
	}
	// The verification mail is queued; a full queue, or an address that
	// was sent enough mail, does not undo the account (POST
	// /auth/verify-email/resend sends another link later).
	if err := s.allowMail(ctx, "", u.Email); err != nil {
		s.log.WarnContext(ctx, "verification mail not sent: the address got enough mail", "user_id", u.ID)
	} else if err := s.queue("verify-email", s.verifyJob(u.ID, u.Email)); err != nil {
		s.log.WarnContext(ctx, "verification mail not queued", "user_id", u.ID, "err", err)
	}
	return &userOutput{Body: u}, nil
}

// ---- login, refresh ----

type loginBody struct {
	Email         string `json:"email" format:"email" maxLength:"254"`
	Password      string `json:"password" minLength:"1" maxLength:"128"`
	TwoFactorCode string `json:"twoFactorCode,omitempty" maxLength:"32" doc:"TOTP code or recovery code; required when 2FA is enabled"`
	DeviceToken   string `json:"deviceToken,omitempty" maxLength:"512" doc:"The deviceToken of an earlier login of this account (clients that keep no cookies): others' failed attempts never lock this client out"`
}

func (b *loginBody) Resolve(_ huma.Context, pb *huma.PathBuffer) []error {
	return emailField(&b.Email, pb, "email")
}

type loginInput struct {
	Device string `cookie:"keelson_device" hidden:"true"`
	Body   loginBody
}
type tokenOutput struct{ Body TokenPair }
type loginOutput struct {
	SetCookie http.Cookie `header:"Set-Cookie"`
	Body      LoginResult
}

func (s *Service) handleLogin(ctx context.Context, in *loginInput) (*loginOutput, error) {
	device := cmp.Or(in.Body.DeviceToken, in.Device)
	res, err := s.Login(ctx, LoginParams{Email: in.Body.Email, Password: in.Body.Password,
		TwoFactorCode: in.Body.TwoFactorCode, IP: ipFrom(ctx), Device: device})
	if err != nil {
		return nil, err
	}
	return &loginOutput{Body: res, SetCookie: http.Cookie{
		Name: DeviceCookie, Value: res.DeviceToken, Path: "/auth", MaxAge: int(deviceTTL / time.Second),
		HttpOnly: true, Secure: strings.HasPrefix(s.d.FrontendURL, "https:"), SameSite: http.SameSiteLaxMode,
	}}, nil
}

// deviceTTL is how long a browser keeps its device cookie (renewed at each login).
const deviceTTL = 365 * 24 * time.Hour

type refreshInput struct {
	Body struct {
		RefreshToken string `json:"refreshToken" minLength:"1" maxLength:"256"`
	}
}

func (s *Service) handleRefresh(ctx context.Context, in *refreshInput) (*tokenOutput, error) {
	return platform.Reply[tokenOutput](s.Refresh(ctx, in.Body.RefreshToken))
}

// ---- password reset ----

// Ack is a plain acknowledgment.
type Ack struct {
	OK      bool   `json:"ok"`
	Message string `json:"message,omitempty"`
}

type ackOutput struct{ Body Ack }

type forgotBody struct {
	Email string `json:"email" format:"email" maxLength:"254"`
}

func (b *forgotBody) Resolve(_ huma.Context, pb *huma.PathBuffer) []error {
	return emailField(&b.Email, pb, "email")
}

type forgotInput struct{ Body forgotBody }

func (s *Service) handleForgot(ctx context.Context, in *forgotInput) (*ackOutput, error) {
	if err := s.ForgotPassword(ctx, in.Body.Email, ipFrom(ctx)); err != nil {
		return nil, err
	}
	return &ackOutput{Body: Ack{OK: true, Message: "If an account exists for this email, a password reset link has been sent."}}, nil
}

type resetBody struct {
	Token           string `json:"token" minLength:"1" maxLength:"256" doc:"The token from the reset link"`
	NewPassword     string `json:"newPassword" minLength:"6" maxLength:"128"`
	ConfirmPassword string `json:"confirmPassword" maxLength:"128" doc:"Must equal newPassword"`
}

func (b *resetBody) Resolve(_ huma.Context, pb *huma.PathBuffer) []error {
	if b.ConfirmPassword != b.NewPassword {
		return []error{mismatch(pb)}
	}
	return nil
}

type resetInput struct{ Body resetBody }

func (s *Service) handleReset(ctx context.Context, in *resetInput) (*ackOutput, error) {
	if err := s.ResetPassword(ctx, in.Body.Token, in.Body.NewPassword); err != nil {
		return nil, err
	}
	return &ackOutput{Body: Ack{OK: true, Message: "Password changed. Log in with the new password."}}, nil
}

// ---- email verification ----

type verifyEmailInput struct {
	Body struct {
		Token string `json:"token" minLength:"1" maxLength:"256" doc:"The token from the mailed link <FrontendURL>/verify-email?token=..."`
	}
}

func (s *Service) handleVerifyEmail(ctx context.Context, in *verifyEmailInput) (*ackOutput, error) {
	kind, err := s.VerifyEmail(ctx, in.Body.Token)
	if err != nil {
		return nil, err
	}
	msg := "Email address verified."
	if kind == emailKindChange {
		msg = "Email address changed and verified."
	}
	return &ackOutput{Body: Ack{OK: true, Message: msg}}, nil
}

func (s *Service) handleResendVerification(ctx context.Context, _ *struct{}) (*ackOutput, error) {
	if err := s.ResendVerification(ctx, principal(ctx).UserID); err != nil {
		return nil, err
	}
	return &ackOutput{Body: Ack{OK: true, Message: "A verification link is on its way to your address."}}, nil
}

// ---- 2FA ----

type twoFactorLoginInput struct {
	Body struct {
		Challenge string `json:"challenge" minLength:"1" maxLength:"256" doc:"The twoFactorChallenge from the OAuth callback's redirect (valid 5 minutes, at most 5 codes)"`
		Code      string `json:"code" minLength:"1" maxLength:"32" doc:"6-digit TOTP code or a recovery code"`
	}
}

func (s *Service) handleTwoFactorLogin(ctx context.Context, in *twoFactorLoginInput) (*tokenOutput, error) {
	return platform.Reply[tokenOutput](s.CompleteTwoFactorLogin(ctx, in.Body.Challenge, in.Body.Code, ipFrom(ctx)))
}

type setupOutput struct{ Body TwoFactorSetup }

func (s *Service) handleSetup(ctx context.Context, _ *struct{}) (*setupOutput, error) {
	return platform.Reply[setupOutput](s.SetupTwoFactor(ctx, principal(ctx).UserID))
}

type codeInput struct {
	Body codeBody
}

// codeBody is the body of the 2FA verify and disable routes.
type codeBody struct {
	Code string `json:"code" minLength:"1" maxLength:"32" doc:"6-digit TOTP code (disable also takes a recovery code)"`
}

func (codeBody) SchemaName() string { return "TwoFactorCodeRequest" }

type verifyOutput struct{ Body TwoFactorEnabled }

func (s *Service) handleVerify(ctx context.Context, in *codeInput) (*verifyOutput, error) {
	return platform.Reply[verifyOutput](s.VerifyTwoFactor(ctx, principal(ctx).UserID, in.Body.Code, ipFrom(ctx)))
}

type disableOutput struct {
	Body disabledBody
}

// disabledBody is the answer of the 2FA disable route.
type disabledBody struct {
	Enabled bool `json:"enabled"`
}

func (disabledBody) SchemaName() string { return "TwoFactorDisabled" }

func (s *Service) handleDisable(ctx context.Context, in *codeInput) (*disableOutput, error) {
	if err := s.DisableTwoFactor(ctx, principal(ctx).UserID, in.Body.Code, ipFrom(ctx)); err != nil {
		return nil, err
	}
	return &disableOutput{}, nil
}

// ---- profile, logout ----

func (s *Service) handleMe(ctx context.Context, _ *struct{}) (*userOutput, error) {
	return platform.Reply[userOutput](s.UserByID(ctx, principal(ctx).UserID))
}

type patchBody struct {
	Email            *string `json:"email,omitempty" format:"email" maxLength:"254"`
	Name             *string `json:"name,omitempty" maxLength:"100"`
	Username         *string `json:"username,omitempty" maxLength:"64"`
	Bio              *string `json:"bio,omitempty" maxLength:"1000"`
	Company          *string `json:"company,omitempty" maxLength:"100"`
	Location         *string `json:"location,omitempty" maxLength:"100"`
	Website          *string `json:"website,omitempty" maxLength:"2048"`
	CodehostUsername *string `json:"codehostUsername,omitempty" maxLength:"100"`
	Image            *string `json:"image,omitempty" maxLength:"2048"`
	CurrentPassword  string  `json:"currentPassword,omitempty" maxLength:"128" doc:"Required with a new email (accounts with a password)"`
	TwoFactorCode    string  `json:"twoFactorCode,omitempty" maxLength:"32" doc:"Required with a new email when 2FA is on (and the only proof for accounts without a password): a fresh TOTP or recovery code"`
}

func (b *patchBody) Resolve(_ huma.Context, pb *huma.PathBuffer) []error {
	if b.Email == nil {
		return nil
	}
	return emailField(b.Email, pb, "email")
}

type patchInput struct {
	Authorization string `header:"Authorization" hidden:"true"`
	Body          patchBody
}

func (s *Service) handleUpdateMe(ctx context.Context, in *patchInput) (*userOutput, error) {
	b := in.Body
	session := ""
	if tok, ok := platform.BearerToken(in.Authorization); ok {
		if c, err := s.parseAccess(tok); err == nil {
			session = c.Fam
		}
	}
	u, err := s.UpdateProfile(ctx, principal(ctx).UserID, ProfilePatch{
		Email: b.Email, Name: b.Name, Username: b.Username, Bio: b.Bio, Company: b.Company, Location: b.Location,
		Website: b.Website, CodehostUsername: b.CodehostUsername, Image: b.Image,
		CurrentPassword: b.CurrentPassword, TwoFactorCode: b.TwoFactorCode, Session: session,
	})
	if err != nil {
		return nil, err
	}
	return &userOutput{Body: u}, nil
}

type logoutInput struct {
	Body *struct {
		RefreshToken string `json:"refreshToken,omitempty" maxLength:"256" doc:"Also revoke this refresh token's session"`
	}
}

func (s *Service) handleLogout(ctx context.Context, in *logoutInput) (*ackOutput, error) {
	if in.Body != nil && in.Body.RefreshToken != "" {
		if err := s.RevokeSession(ctx, principal(ctx).UserID, in.Body.RefreshToken); err != nil {
			return nil, err
		}
	}
	return &ackOutput{Body: Ack{OK: true, Message: "Logged out."}}, nil
}

// SchemaName methods name these types in the OpenAPI document (platform.SchemaNamer).
func (registerBody) SchemaName() string { return "RegisterRequest" }
func (loginBody) SchemaName() string    { return "LoginRequest" }
func (forgotBody) SchemaName() string   { return "ForgotPasswordRequest" }
func (resetBody) SchemaName() string    { return "ResetPasswordRequest" }
func (patchBody) SchemaName() string    { return "UpdateProfileRequest" }
