// Package hosts is the register of the machines that run apps: each worker
// (KEELSON_ROLE=worker or all, on the Temporal engine) records its host, its
// capacity and a heartbeat in the database; admins list them and cordon one.
// A host whose heartbeat is older than Deps.DownAfter is down.
//
// A cordoned host takes no new deployment: its worker stops polling the
// shared task queue (BUILD, and with it PROVISION and DNS, which follow the
// host that built), while the apps it runs keep running and can still be
// replaced or released. See the README's "Scaling out".
package hosts

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/uptrace/bun"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
)

// State is what a host does.
type State string

// Host states. Active and cordoned are stored; down is read: an active or
// cordoned host whose heartbeat is older than Deps.DownAfter.
const (
	StateActive   State = "active"
	StateCordoned State = "cordoned"
	StateDown     State = "down"
)

// Host is one machine that runs apps, as the API answers it.
type Host struct {
	ID       string `json:"id" doc:"The host's stable id (kept in its data directory)"`
	Queue    string `json:"queue" doc:"The host's own Temporal task queue: where the steps of the apps it runs go"`
	Name     string `json:"name" doc:"The machine's name, for people"`
	Address  string `json:"address,omitempty" doc:"Where other ingresses reach this host's ingress (host:port)"`
	State    State  `json:"state" enum:"active,cordoned,down" doc:"active: takes new deployments; cordoned: keeps its apps but takes no new deployment; down: no heartbeat within the down-after setting"`
	MemoryMB int64  `json:"memoryMb" doc:"Memory the host has for apps, in MiB (0: unknown)"`
	CPUs     int    `json:"cpus" doc:"CPUs the host has"`
	MaxApps  int    `json:"maxApps" doc:"Most apps the host runs (0: no limit)"`
	Apps     int    `json:"apps" doc:"LIVE deployments on the host at its last heartbeat"`
	// Reason is why the host is cordoned, as the admin gave it.
	Reason      string    `json:"reason,omitempty" doc:"Why the host is cordoned"`
	StartedAt   time.Time `json:"startedAt" doc:"When its worker last started"`
	HeartbeatAt time.Time `json:"heartbeatAt" doc:"The worker's last heartbeat"`
}

// SchemaName names Host in the OpenAPI document.
func (Host) SchemaName() string { return "Host" }

type hostRow struct {
	bun.BaseModel `bun:"table:hosts"`
	ID            string    `bun:"id,pk"`
	Queue         string    `bun:"queue,notnull"`
	Name          string    `bun:"name,notnull"`
	Address       string    `bun:"address,notnull"`
	State         State     `bun:"state,notnull"`
	Reason        string    `bun:"reason,notnull"`
	MemoryMB      int64     `bun:"memory_mb,notnull"`
	CPUs          int       `bun:"cpus,notnull"`
	MaxApps       int       `bun:"max_apps,notnull"`
	Apps          int       `bun:"apps,notnull"`
	StartedAt     time.Time `bun:"started_at,notnull"`
	HeartbeatAt   time.Time `bun:"heartbeat_at,notnull"`
	// DownHandled is the heartbeat time of the outage Deps.HostDown was run
	// for (once per outage, by one process); a heartbeat clears it.
	DownHandled *time.Time `bun:"down_handled"`
}

// Migrations returns the module's table.
func Migrations() db.MigrationSet {
	return db.MigrationSet{Module: "hosts", Migrations: []db.Migration{{
		ID: "0001_init",
		Up: db.Steps(
			db.CreateTables((*hostRow)(nil)),
			db.CreateIndex((*hostRow)(nil), "hosts_queue", true, "queue"),
		),
	}}}
}

// Local is the host this process runs apps on, and how to count them.
type Local struct {
	Host
	// CountApps counts the LIVE deployments on this host (its queue).
	CountApps func(ctx context.Context) (int, error)
	// Cordoned is told when an admin cordons or uncordons this host (at the
	// next heartbeat), and once at start with the stored state.
	Cordoned func(cordoned bool)
}

// Deps are the module's dependencies.
type Deps struct {
	DB   *bun.DB
	Auth platform.Authenticator // for the admin routes; required by Register
	Log  *slog.Logger
	// Clock tells the time; default the wall clock.
	Clock platform.Clock
	// Local, when set, is registered at Start and kept alive by a heartbeat
	// every HeartbeatEvery until Close.
	Local *Local
	// HeartbeatEvery defaults to 10s; DownAfter, past which a host without a
	// heartbeat is down, to 30s (and at least twice HeartbeatEvery).
	HeartbeatEvery, DownAfter time.Duration
	// HostDown, when set, is run once for each outage of another host, by
	// one of the processes with a Local host (after its heartbeat): it moves
	// the down host's apps elsewhere. An error runs it again next time.
	HostDown func(ctx context.Context, h *Host) error
	// MoveDue, when set, is asked at each pass about each down host whose
	// outage was handled: whether a move of its apps failed and is due to
	// be tried again at now (Clock; bounded, with backoff); if so HostDown
	// runs again, once across every process, and the reason is logged.
	MoveDue func(ctx context.Context, h *Host, now time.Time) (due bool, why string, err error)
	// MoveApps deploys the apps of host h on other hosts, each log saying
	// why (Drain); required by Drain.
	MoveApps func(ctx context.Context, h *Host, why string) error
	// Load, when set, gives by host queue what each host holds: its
	// deployments LIVE or placed and not LIVE yet, and their needs (one
	// grouped query), so a burst of deployments spreads out. Without it
	// Place counts each host's apps of its last heartbeat, needing nothing.
	Load func(ctx context.Context) (map[string]Load, error)
}

// Service is the hosts module.
type Service struct {
	d         Deps
	heartbeat platform.LoopSlot
	mu        sync.Mutex
	cordoned  *bool // the local host's state last told to Local.Cordoned
}

var _ platform.Module = (*Service)(nil)

// New checks d and builds the service.
func New(d Deps) (*Service, error) {
	var p platform.Problems
	p.Require("hosts: Deps.DB", d.DB != nil)
	if d.Local != nil {
		p.Require("hosts: Deps.Local.ID", d.Local.ID != "")
		p.Require("hosts: Deps.Local.Queue", d.Local.Queue != "")
		p.Require("hosts: Deps.Local.CountApps", d.Local.CountApps != nil)
	}
	if err := errors.Join(p...); err != nil {
		return nil, err
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Clock == nil {
		d.Clock = platform.SystemClock{}
	}
	if d.HeartbeatEvery <= 0 {
		d.HeartbeatEvery = 10 * time.Second
	}
	if d.DownAfter <= 0 {
		d.DownAfter = 30 * time.Second
	}
	d.DownAfter = max(d.DownAfter, 2*d.HeartbeatEvery)
	return &Service{d: d}, nil
}

// Migrations returns the module's table, for platform.Module.
func (s *Service) Migrations() db.MigrationSet { return Migrations() }

func (s *Service) now() time.Time { return s.d.Clock.Now().UTC().Truncate(time.Microsecond) }

// Start registers the local host, if any, and starts its heartbeat.
func (s *Service) Start(ctx context.Context) error {
	if s.d.Local == nil {
		return nil
	}
	if err := s.join(ctx); err != nil {
		return fmt.Errorf("hosts: register this host: %w", err)
	}
	s.heartbeat.Start(func() *platform.Loop {
		return platform.Every(context.WithoutCancel(ctx), s.d.HeartbeatEvery, false, nil, func(ctx context.Context) {
			if err := s.Heartbeat(ctx); err != nil && ctx.Err() == nil {
				s.d.Log.WarnContext(ctx, "hosts: heartbeat", "host", s.d.Local.ID, "err", err)
				return // a host that cannot write its heartbeat may be the one cut off
			}
			if err := s.HandleDown(ctx); err != nil && ctx.Err() == nil {
				s.d.Log.WarnContext(ctx, "hosts: move the apps of a down host", "err", err)
			}
		})
	})
	return nil
}

// Close stops the heartbeat. The row stays: the host is down after
// DownAfter, or active again when its worker starts.
func (s *Service) Close(context.Context) error {
	s.heartbeat.Stop()
	return nil
}

// join inserts or refreshes the local host's row, keeping an admin's cordon.
func (s *Service) join(ctx context.Context) error {
	l := s.d.Local
	apps, err := l.CountApps(ctx)
	if err != nil {
		return err
	}
	now := s.now()
	row := &hostRow{ID: l.ID, Queue: l.Queue, Name: l.Name, Address: l.Address, State: StateActive,
		MemoryMB: l.MemoryMB, CPUs: l.CPUs, MaxApps: l.MaxApps, Apps: apps, StartedAt: now, HeartbeatAt: now}
	_, err = s.d.DB.NewInsert().Model(row).
		On("CONFLICT (id) DO UPDATE").
		Set("queue = EXCLUDED.queue, name = EXCLUDED.name, address = EXCLUDED.address").
		Set("memory_mb = EXCLUDED.memory_mb, cpus = EXCLUDED.cpus, max_apps = EXCLUDED.max_apps").
		Set("apps = EXCLUDED.apps, started_at = EXCLUDED.started_at, heartbeat_at = EXCLUDED.heartbeat_at").
		Set("down_handled = NULL").
		Exec(ctx)
	if err != nil {
		return db.Translate(err)
	}
	return s.tell(ctx)
}

// Heartbeat records that the local host is alive, with its app count, and
// tells Local.Cordoned of a change of state.
func (s *Service) Heartbeat(ctx context.Context) error {
	l := s.d.Local
	apps, err := l.CountApps(ctx)
	if err != nil {
		return err
	}
	res, err := s.d.DB.NewUpdate().Model((*hostRow)(nil)).Set("apps = ?", apps).Set("heartbeat_at = ?", s.now()).
		Set("down_handled = NULL").Where("id = ?", l.ID).Exec(ctx)
	if err != nil {
		return db.Translate(err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return s.join(ctx) // an admin removed the row while the host was up
	}
	return s.tell(ctx)
}

// tell passes the local host's stored state to Local.Cordoned when it changed.
func (s *Service) tell(ctx context.Context) error {
	if s.d.Local.Cordoned == nil {
		return nil
	}
	h, err := s.Get(ctx, s.d.Local.ID)
	if err != nil {
		return err
	}
	cordoned := h.State == StateCordoned
	s.mu.Lock()
	changed := s.cordoned == nil || *s.cordoned != cordoned
	s.cordoned = &cordoned
	s.mu.Unlock()
	if changed {
		s.d.Local.Cordoned(cordoned)
	}
	return nil
}

func (s *Service) out(r *hostRow) *Host {
	h := &Host{ID: r.ID, Queue: r.Queue, Name: r.Name, Address: r.Address, State: r.State, Reason: r.Reason,
		MemoryMB: r.MemoryMB, CPUs: r.CPUs, MaxApps: r.MaxApps, Apps: r.Apps,
		StartedAt: r.StartedAt.UTC(), HeartbeatAt: r.HeartbeatAt.UTC()}
	if s.now().Sub(r.HeartbeatAt) > s.d.DownAfter {
		h.State = StateDown
	}
	return h
}

// List returns every host, by id.
func (s *Service) List(ctx context.Context) ([]*Host, error) {
	var rows []*hostRow
	if err := s.d.DB.NewSelect().Model(&rows).Order("id").Scan(ctx); err != nil {
		return nil, db.Translate(err)
	}
	out := make([]*Host, len(rows))
	for i, r := range rows {
		out[i] = s.out(r)
	}
	return out, nil
}

// Addresses maps the queue of each host that is not down to its ingress
// address: where another ingress forwards the apps that host runs.
func (s *Service) Addresses(ctx context.Context) (map[string]string, error) {
	hs, err := s.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(hs))
	for _, h := range hs {
		if h.State != StateDown && h.Address != "" {
			out[h.Queue] = h.Address
		}
	}
	return out, nil
}

// Need is what a deployment asks of its host: its plan's memory and CPU
// per app (0: unlimited, counted as none), and the host its project is
// pinned to ("" for any).
type Need struct {
	MemoryMi, CPUm int
	Pin            string
}

// Load is what a host holds: its deployments LIVE or placed and not LIVE
// yet (building, starting), and the sum of their Needs.
type Load struct {
	Apps           int
	MemoryMi, CPUm int64
}

// ErrNoRoom is wrapped by Place's error when no host can take a deployment:
// the deployment fails, the message naming why each host was refused.
var ErrNoRoom = errors.New("no host can take the deployment")

// Place chooses the host a new deployment builds and runs on. Of the active
// hosts (not cordoned, not down) with room for need (its apps under MaxApps,
// the memory and CPU its deployments need plus need's within its own), it
// takes the one with the largest share of its memory free, then the fewest
// apps, then the first id; a pinned deployment only its pinned host. It
// returns the host's queue and the reason in words for the deployment's
// log, each other host with why it was not chosen. With no host registered
// (one machine) it returns "" (any worker); with none that can take it, an
// error wrapping ErrNoRoom. Two queries: the hosts, and Deps.Load.
func (s *Service) Place(ctx context.Context, need Need) (queue, reason string, err error) {
	hs, err := s.List(ctx)
	if err != nil || len(hs) == 0 {
		return "", "", err
	}
	loads := map[string]Load{}
	if s.d.Load != nil {
		if loads, err = s.d.Load(ctx); err != nil {
			return "", "", err
		}
	} else {
		for _, h := range hs {
			loads[h.Queue] = Load{Apps: h.Apps}
		}
	}
	var best *Host
	var bestFree float64
	var others []string
	for _, h := range hs {
		l := loads[h.Queue]
		h.Apps = l.Apps
		if why := refusal(h, l, need); why != "" {
			others = append(others, why)
			continue
		}
		free := 0.0
		if h.MemoryMB > 0 {
			free = 1 - float64(l.MemoryMi)/float64(h.MemoryMB)
		}
		if best == nil || free > bestFree || (free == bestFree && h.Apps < best.Apps) {
			if best != nil {
				others = append(others, fmt.Sprintf("%s %d apps, %s of %s MiB held", best.ID, best.Apps, num(loads[best.Queue].MemoryMi), num(best.MemoryMB)))
			}
			best, bestFree = h, free
		} else {
			others = append(others, fmt.Sprintf("%s %d apps, %s of %s MiB held", h.ID, h.Apps, num(l.MemoryMi), num(h.MemoryMB)))
		}
	}
	if best == nil && need.Pin != "" && !slices.ContainsFunc(hs, func(h *Host) bool { return h.ID == need.Pin }) {
		return "", "", fmt.Errorf("%w: the project is pinned to host %q, which is not registered", ErrNoRoom, need.Pin)
	}
	if best == nil {
		return "", "", fmt.Errorf("%w: %s", ErrNoRoom, strings.Join(others, "; "))
	}
	l := loads[best.Queue]
	reason = fmt.Sprintf("placed on host %s (%d apps, %s of %s MiB and %s of %s millicores held; needs %s MiB, %s millicores)",
		best.ID, best.Apps, num(l.MemoryMi), num(best.MemoryMB), num(l.CPUm), num(int64(best.CPUs)*1000), num(int64(need.MemoryMi)), num(int64(need.CPUm)))
	if need.Pin != "" {
		reason += "; the project is pinned to it"
	}
	if len(others) > 0 {
		reason += "; others: " + strings.Join(others, "; ")
	}
	return best.Queue, reason, nil
}

// refusal says why host h, holding l, cannot take need; "" when it can.
func refusal(h *Host, l Load, need Need) string {
	switch {
	case need.Pin != "" && h.ID != need.Pin:
		return fmt.Sprintf("%s not the pinned host", h.ID)
	case h.State != StateActive:
		return fmt.Sprintf("%s %s", h.ID, h.State)
	case h.MaxApps > 0 && l.Apps >= h.MaxApps:
		return fmt.Sprintf("%s full: %d of %d apps", h.ID, l.Apps, h.MaxApps)
	case h.MemoryMB > 0 && need.MemoryMi > 0 && l.MemoryMi+int64(need.MemoryMi) > h.MemoryMB:
		return fmt.Sprintf("%s full: %s of %s MiB held, needs %s", h.ID, num(l.MemoryMi), num(h.MemoryMB), num(int64(need.MemoryMi)))
	case h.CPUs > 0 && need.CPUm > 0 && l.CPUm+int64(need.CPUm) > int64(h.CPUs)*1000:
		return fmt.Sprintf("%s full: %s of %s millicores held, needs %s", h.ID, num(l.CPUm), num(int64(h.CPUs)*1000), num(int64(need.CPUm)))
	}
	return ""
}

// num writes n with thousands separators: 4,096.
func num(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// Registered reports whether host id is in the register, from the
// database alone: projects, built before this module, checks a host pin
// with it.
func Registered(ctx context.Context, idb bun.IDB, id string) (bool, error) {
	q, err := QueueOf(ctx, idb, id)
	return q != "", err
}

// QueueOf is host id's task queue (never "" for a registered host: Local
// requires one), from the database alone; "" when id is not in the register.
func QueueOf(ctx context.Context, idb bun.IDB, id string) (string, error) {
	var q []string
	err := idb.NewSelect().Model((*hostRow)(nil)).Column("queue").Where("id = ?", id).Scan(ctx, &q)
	if len(q) == 0 {
		return "", db.Translate(err)
	}
	return q[0], db.Translate(err)
}

// Get returns one host; platform.ErrNotFound when there is none.
func (s *Service) Get(ctx context.Context, id string) (*Host, error) {
	r := new(hostRow)
	if err := s.d.DB.NewSelect().Model(r).Where("id = ?", id).Scan(ctx); err != nil {
		return nil, hostErr(db.Translate(err), id)
	}
	return s.out(r), nil
}

// SetCordoned cordons (with a reason) or uncordons a host. The host's worker
// acts on it at its next heartbeat.
func (s *Service) SetCordoned(ctx context.Context, id string, cordoned bool, reason string) (*Host, error) {
	state, why := StateActive, ""
	if cordoned {
		state, why = StateCordoned, strings.TrimSpace(reason)
	}
	res, err := s.d.DB.NewUpdate().Model((*hostRow)(nil)).Set("state = ?", state).Set("reason = ?", why).
		Where("id = ?", id).Exec(ctx)
	if err != nil {
		return nil, db.Translate(err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nil, hostErr(platform.ErrNotFound, id)
	}
	if s.d.Local != nil && s.d.Local.ID == id {
		_ = s.tell(ctx) // this process: at once
	}
	return s.Get(ctx, id)
}

// HandleDown runs Deps.HostDown for each host that is down and whose
// outage no process handled yet. A process claims an outage with one
// conditional update, so each runs once across every process; a failed
// run is released for the next try.
func (s *Service) HandleDown(ctx context.Context) error {
	if s.d.HostDown == nil {
		return nil
	}
	if err := s.retryDue(ctx); err != nil {
		return err
	}
	var rows []*hostRow
	cutoff := s.now().Add(-s.d.DownAfter)
	if err := s.d.DB.NewSelect().Model(&rows).Where("heartbeat_at < ?", cutoff).Where("down_handled IS NULL").
		Order("id").Scan(ctx); err != nil {
		return db.Translate(err)
	}
	var errs []error
	for _, r := range rows {
		res, err := s.d.DB.NewUpdate().Model((*hostRow)(nil)).Set("down_handled = heartbeat_at").
			Where("id = ?", r.ID).Where("heartbeat_at = ?", r.HeartbeatAt).Where("down_handled IS NULL").Exec(ctx)
		if err != nil {
			return db.Translate(err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			continue // another process took it, or the host came back
		}
		s.d.Log.WarnContext(ctx, "hosts: host is down; moving its apps", "host", r.ID, "last_heartbeat", r.HeartbeatAt)
		if err := s.d.HostDown(ctx, s.out(r)); err != nil {
			errs = append(errs, fmt.Errorf("host %s: %w", r.ID, err))
			_, _ = s.d.DB.NewUpdate().Model((*hostRow)(nil)).Set("down_handled = NULL").
				Where("id = ?", r.ID).Where("heartbeat_at = ?", r.HeartbeatAt).Exec(context.WithoutCancel(ctx))
		}
	}
	return errors.Join(errs...)
}

// retryDue releases the handled outage of each down host that Deps.MoveDue
// says is due a move again, for HandleDown to run HostDown once more.
func (s *Service) retryDue(ctx context.Context) error {
	if s.d.MoveDue == nil {
		return nil
	}
	var rows []*hostRow
	if err := s.d.DB.NewSelect().Model(&rows).Where("heartbeat_at < ?", s.now().Add(-s.d.DownAfter)).
		Where("down_handled IS NOT NULL").Order("id").Scan(ctx); err != nil {
		return db.Translate(err)
	}
	for _, r := range rows {
		due, why, err := s.d.MoveDue(ctx, s.out(r), s.now())
		if err != nil || !due {
			if err != nil {
				return fmt.Errorf("host %s: %w", r.ID, err)
			}
			continue
		}
		res, err := s.d.DB.NewUpdate().Model((*hostRow)(nil)).Set("down_handled = NULL").
			Where("id = ?", r.ID).Where("down_handled = ?", *r.DownHandled).Exec(ctx)
		if err != nil {
			return db.Translate(err)
		}
		if n, _ := res.RowsAffected(); n > 0 {
			s.d.Log.WarnContext(ctx, "hosts: a move off a down host failed; moving its apps again", "host", r.ID, "why", why)
		}
	}
	return nil
}

// Drain cordons host id and moves its apps to other hosts: each is
// deployed again there and replaces its old deployment with the usual swap
// (the old app serves until the new one is LIVE, and a moment more).
func (s *Service) Drain(ctx context.Context, id string) (*Host, error) {
	if s.d.MoveApps == nil {
		return nil, errors.New("hosts: Deps.MoveApps is required to drain")
	}
	h, err := s.SetCordoned(ctx, id, true, "drained")
	if err != nil {
		return nil, err
	}
	if err := s.d.MoveApps(ctx, h, fmt.Sprintf("host %s is drained", id)); err != nil {
		return nil, fmt.Errorf("hosts: drain %s: %w", id, err)
	}
	return h, nil
}

// Remove deletes a down host's row (a machine taken away for good). A host
// that is not down answers 409: its worker would only register it again.
func (s *Service) Remove(ctx context.Context, id string) error {
	h, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	if h.State != StateDown {
		return platform.Conflict(fmt.Sprintf("host %s is %s: only a down host (no heartbeat for %s) can be removed", id, h.State, s.d.DownAfter))
	}
	_, err = s.d.DB.NewDelete().Model((*hostRow)(nil)).Where("id = ?", id).Where("heartbeat_at = ?", h.HeartbeatAt).Exec(ctx)
	return db.Translate(err)
}

func hostErr(err error, id string) error {
	if errors.Is(err, platform.ErrNotFound) {
		return platform.NotFound(fmt.Sprintf("no host %q", id))
	}
	return err
}
