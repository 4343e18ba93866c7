package oauth

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// ConnectTicketTTL is how long a connect ticket can be opened: it is meant to
// be opened by the same page right after it was issued.
const ConnectTicketTTL = 5 * time.Minute

// connectTicketRow is a one-time connect ticket, keyed by the SHA-256 of the
// ticket. Binding is the SHA-256 of the cookie value given to the browser
// that asked for it; Next, when set, is where the flow ends on success
// instead of the connected-accounts page (a URL a Keelson module chose, never
// one from a request).
type connectTicketRow struct {
	bun.BaseModel `bun:"table:oauth_connect_tickets"`

	ID        string     `bun:"id,pk,type:varchar(64)"`
	UserID    string     `bun:"user_id,notnull,type:varchar(36)"`
	Binding   string     `bun:"binding,notnull,type:varchar(64)"`
	Next      string     `bun:"next_url,notnull,default:''"`
	CreatedAt time.Time  `bun:"created_at,notnull"`
	ExpiresAt time.Time  `bun:"expires_at,notnull"`
	UsedAt    *time.Time `bun:"used_at"`
}

// migrateConnectTickets adds the tickets table and the state's next_url.
func migrateConnectTickets(ctx context.Context, idb bun.IDB) error {
	if err := db.Steps(
		db.CreateTables((*connectTicketRow)(nil)),
		db.CreateIndex((*connectTicketRow)(nil), "oauth_connect_tickets_expires_idx", false, "expires_at"),
	)(ctx, idb); err != nil {
		return err
	}
	_, err := idb.NewAddColumn().Model((*stateRow)(nil)).ColumnExpr("next_url VARCHAR(2048) NOT NULL DEFAULT ''").Exec(ctx)
	return err
}

// ConnectTicket is what POST /auth/codehost/connect answers, and what
// IssueConnectTicket gives another module.
type ConnectTicket struct {
	Ticket     string    `json:"ticket" doc:"One-time ticket; open connectUrl in this same browser (the cookie set with this answer binds it)"`
	ConnectURL string    `json:"connectUrl" doc:"<API>/auth/codehost/connect?ticket=...: send this browser there to link its code-host account"`
	ExpiresAt  time.Time `json:"expiresAt" doc:"When the ticket stops being accepted (5 minutes)"`
	// Cookie binds the ticket to the browser that receives it; the ticket
	// works only together with it.
	Cookie *http.Cookie `json:"-"`
}

// connectCookieName is the binding cookie's name: with the __Host- prefix on
// https, so no sibling subdomain (a deployed app, say) can plant its own.
func (s *Service) connectCookieName() string {
	if s.secure() {
		return "__Host-keelson_connect"
	}
	return "keelson_connect"
}

func (s *Service) secure() bool { return strings.HasPrefix(s.d.PublicURL, "https://") }

func (s *Service) connectCookie(value string, maxAge int) *http.Cookie {
	c := &http.Cookie{
		Name: s.connectCookieName(), Value: value, Path: "/auth/codehost/connect", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: s.secure(),
	}
	if s.secure() {
		c.Path = "/" // required by the __Host- prefix
	}
	return c
}

// IssueConnectTicket issues a one-time ticket for userID to link their
// code-host account: open ConnectURL in the browser that holds Cookie. next,
// when not empty, is where the browser goes after a successful link instead
// of the connected-accounts page; it must be on the code host's web origin,
// the frontend or this API (another module's URL, never a request's).
func (s *Service) IssueConnectTicket(ctx context.Context, userID, next string) (*ConnectTicket, error) {
	if err := unavailable(s.codehost); err != nil {
		return nil, err
	}
	if userID == "" {
		return nil, errors.New("oauth: connect ticket without a user")
	}
	if next != "" && !s.allowedNext(next) {
		return nil, errors.New("oauth: connect ticket next URL is not on the code host, the frontend or this API")
	}
	ticket, binding, now := randomToken(), randomToken(), s.now()
	s.purgeExpired(ctx)
	row := &connectTicketRow{
		ID: hashToken(ticket), UserID: userID, Binding: hashToken(binding), Next: next,
		CreatedAt: now, ExpiresAt: now.Add(ConnectTicketTTL),
	}
	if _, err := s.db.NewInsert().Model(row).Exec(ctx); err != nil {
		return nil, db.Translate(err)
	}
	return &ConnectTicket{
		Ticket:     ticket,
		ConnectURL: s.d.PublicURL + "/auth/codehost/connect?" + url.Values{"ticket": {ticket}}.Encode(),
		ExpiresAt:  row.ExpiresAt.Truncate(time.Second),
		Cookie:     s.connectCookie(binding, int(ConnectTicketTTL.Seconds())),
	}, nil
}

func (s *Service) allowedNext(next string) bool {
	u, err := url.Parse(next)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return false
	}
	for _, base := range []string{s.d.Codehost.WebURL, s.d.FrontendURL, s.d.PublicURL} {
		b, err := url.Parse(base)
		if err == nil && strings.EqualFold(b.Scheme, u.Scheme) && strings.EqualFold(b.Host, u.Host) {
			return true
		}
	}
	return false
}

// redeemConnectTicket uses up ticket when cookie is the value it was bound
// to, and answers its row. Anything else (unknown, expired, used, or opened
// in another browser) is platform.ErrNotFound and uses nothing up.
func (s *Service) redeemConnectTicket(ctx context.Context, ticket, cookie string) (*connectTicketRow, error) {
	return consumeOnce[connectTicketRow](ctx, s, ticket, "binding = ?", hashToken(cookie))
}

// startConnectWithTicket begins connect mode for the holder of a ticket:
// the ticket must come with the cookie issued alongside it, in this browser.
func (s *Service) startConnectWithTicket(ctx context.Context, ticket, cookie string) (*redirect, error) {
	if err := unavailable(s.codehost); err != nil {
		return nil, err
	}
	if cookie == "" {
		return nil, platform.Invalid("ticket: this browser did not ask for it (no connect cookie); " +
			"get a ticket with POST /auth/codehost/connect from this browser and open its connectUrl here")
	}
	row, err := s.redeemConnectTicket(ctx, ticket, cookie)
	if errors.Is(err, platform.ErrNotFound) {
		return nil, platform.Invalid("ticket: invalid, expired, already used, or issued to another browser; " +
			"get a new one with POST /auth/codehost/connect")
	}
	if err != nil {
		return nil, err
	}
	r, err := s.start(ctx, s.codehost, modeConnect, row.UserID, row.Next)
	if err != nil {
		return nil, err
	}
	r.cookies = append(r.cookies, s.connectCookie("", -1))
	return r, nil
}

func (s *Service) purgeConnectTickets(ctx context.Context, cut time.Time) {
	if _, err := s.db.NewDelete().Model((*connectTicketRow)(nil)).Where("expires_at < ?", cut).Exec(ctx); err != nil {
		s.log.WarnContext(ctx, "purge expired connect tickets", "err", err)
	}
}
