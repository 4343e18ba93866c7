// Package bandwidth stores what the ingress meters (ingress.Meter: the bytes
// each project's requests and responses carry) per project and calendar
// month (UTC), and holds each project to its plan's maxBandwidthGb.
//
//   - Counting is in memory, in the ingress. Every Deps.FlushEvery (and at
//     Close) the counts are taken and added to the database in one
//     transaction of additive upserts, so several ingresses (replicas) add up
//     and a request never waits on a write. A failed flush puts its counts
//     back into the meter for the next one.
//   - After each flush the projects that just carried traffic, and those
//     at their limit this month (from any replica), are checked against their
//     plan's limit: a project at or past it is refused by the ingress (429
//     with a short page naming the limit, Retry-After the next month) until
//     the month turns on the injected clock or its plan changes (at once
//     with PlanChanged, else within a minute: projects and their plans are
//     cached that long). The ingress only reads an in-memory set: no query
//     per request.
//   - The owner is mailed once at 80% and once at 100% in a month. Each notice
//     is recorded before it is mailed, so neither a restart nor another
//     replica mails it again (and a mail that fails is not retried).
//
// The module owns the bandwidth_usage and bandwidth_notices tables and
// reaches projects, plans and mail only through the interfaces it declares.
// It has no routes: GET /usage (projects module) reads BandwidthThisMonth.
package bandwidth

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/keelson-dev/keelson/deployments/ingress"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// Project is what the module needs to know of a project.
type Project struct {
	ID, OwnerID, Slug string
	// PlanName is the project's effective plan, named on the refusal page.
	PlanName string
	// MaxBandwidthGb is that plan's monthly bandwidth in GB (0: no limit).
	MaxBandwidthGb int
}

// Projects finds the project the ingress serves at a slug.
type Projects interface {
	// ProjectBySlug returns the live project whose slug is slug: an error
	// wrapping platform.ErrNotFound when there is none (deleted, deleting).
	ProjectBySlug(ctx context.Context, slug string) (*Project, error)
}

// Notifier mails a user (the server adapts the auth module's mailer).
type Notifier interface {
	Notify(ctx context.Context, userID, subject, text string) error
}

// Metrics receives the module's figures (the server's Prometheus metrics).
type Metrics interface {
	// BandwidthFlushed reports bytes this process stored in one flush.
	BandwidthFlushed(in, out int64)
	// BandwidthRefused reports how many projects the ingress now refuses.
	BandwidthRefused(projects int)
	// BandwidthFlushFailed reports a flush that stored nothing (retried next time).
	BandwidthFlushFailed()
}

// Defaults of Deps.
const (
	DefaultFlushEvery = 10 * time.Second
	// GB is how many bytes one GB of maxBandwidthGb is (decimal, as billed).
	GB = 1_000_000_000
	// cacheTTL is how long a slug's project (and its plan) is reused between
	// flushes; refused projects are looked up at every flush.
	cacheTTL = time.Minute
	// batch is how many rows one upsert statement carries.
	batch = 500
)

// Deps are what the module needs from its host.
type Deps struct {
	// DB holds the module's tables (see Migrations). Required.
	DB *bun.DB
	// Meter is the ingress' meter. Nil on a process that serves no apps: the
	// module then only answers BandwidthThisMonth.
	Meter *ingress.Meter
	// Projects resolves slugs. Required with a Meter.
	Projects Projects
	// Notifier mails owners at 80% and 100%. Required with a Meter.
	Notifier Notifier
	// FlushEvery is how often (real time) counts are stored. Default 10 s.
	FlushEvery time.Duration
	// BytesPerGB is the size of one GB of maxBandwidthGb. Default GB (10^9).
	// Tests set a small one to cross a limit with a few kilobytes; the
	// reference server has no setting for it, as plans are sold in GB.
	BytesPerGB int64
	// Metrics receives figures. Optional.
	Metrics Metrics
	// Clock tells the month. Default platform.SystemClock.
	Clock platform.Clock
	// Log receives the module's messages. Default: discard.
	Log *slog.Logger
}

func (d Deps) validate() error {
	var errs []error
	if d.DB == nil {
		errs = append(errs, errors.New("DB is required"))
	}
	if d.Meter != nil && d.Projects == nil {
		errs = append(errs, errors.New("Projects is required with a Meter"))
	}
	if d.Meter != nil && d.Notifier == nil {
		errs = append(errs, errors.New("Notifier is required with a Meter"))
	}
	if d.FlushEvery < 0 || d.BytesPerGB < 0 {
		errs = append(errs, errors.New("FlushEvery and BytesPerGB must not be negative"))
	}
	return errors.Join(errs...)
}

// Service is the bandwidth module.
type Service struct {
	d    Deps
	kick chan struct{} // a plan changed: check the refused projects now

	mu    sync.Mutex // serializes flushes; guards cache
	cache map[string]cached

	flusher platform.LoopSlot // the flush loop, between Start and Close
}

type cached struct {
	p  *Project // nil: no live project at the slug
	at time.Time
}

var _ platform.Module = (*Service)(nil)

// New checks d and builds the service.
func New(d Deps) (*Service, error) {
	if err := d.validate(); err != nil {
		return nil, fmt.Errorf("bandwidth: %w", err)
	}
	d.FlushEvery = cmp.Or(d.FlushEvery, DefaultFlushEvery)
	d.BytesPerGB = cmp.Or(d.BytesPerGB, GB)
	d.Clock = cmp.Or[platform.Clock](d.Clock, platform.SystemClock{})
	d.Log = cmp.Or(d.Log, slog.New(slog.DiscardHandler))
	return &Service{d: d, kick: make(chan struct{}, 1), cache: map[string]cached{}}, nil
}

type usageRow struct {
	bun.BaseModel `bun:"table:bandwidth_usage"`
	ProjectID     string `bun:"project_id,pk,type:varchar(36)"`
	Month         string `bun:"month,pk,type:varchar(7)"` // 2026-11, UTC
	BytesIn       int64  `bun:"bytes_in,notnull"`
	BytesOut      int64  `bun:"bytes_out,notnull"`
}

type noticeRow struct {
	bun.BaseModel `bun:"table:bandwidth_notices"`
	ProjectID     string `bun:"project_id,pk,type:varchar(36)"`
	Month         string `bun:"month,pk,type:varchar(7)"`
	Percent       int    `bun:"percent,pk"` // 80 or 100
	// Slug is the project's: every replica refuses the projects at 100% from here.
	Slug      string    `bun:"slug,notnull"`
	CreatedAt time.Time `bun:"created_at,notnull"`
}

// Migrations returns the module's tables.
func Migrations() db.MigrationSet {
	return db.MigrationSet{Module: "bandwidth", Migrations: []db.Migration{{
		ID: "0001_init",
		Up: db.Steps(
			db.CreateTables((*usageRow)(nil), (*noticeRow)(nil)),
			// Every flush reads the month's 100% notices.
			db.CreateIndex((*noticeRow)(nil), "bandwidth_notices_month", false, "month", "percent"),
		),
	}}}
}

// Migrations returns the module's tables (the package's Migrations), for platform.Module.
func (s *Service) Migrations() db.MigrationSet { return Migrations() }

// Register adds nothing: the module has no routes of its own.
func (s *Service) Register(huma.API) error { return nil }

// Start flushes once (so the projects at their limit are refused from the
// start), then every Deps.FlushEvery until Close (nothing without a Meter).
func (s *Service) Start(ctx context.Context) error {
	if s.d.Meter == nil {
		return nil
	}
	started := s.flusher.Start(func() *platform.Loop {
		if err := s.Flush(ctx); err != nil {
			// Not fatal: the next flush refuses them.
			s.d.Log.WarnContext(ctx, "bandwidth: first flush", "err", err)
		}
		return platform.Every(context.Background(), s.d.FlushEvery, false, s.kick, func(ctx context.Context) {
			if err := s.Flush(ctx); err != nil && ctx.Err() == nil {
				s.d.Log.WarnContext(ctx, "bandwidth: flush (its counts are kept for the next one)", "err", err)
			}
		})
	})
	if !started {
		return errors.New("bandwidth: already started")
	}
	return nil
}

// Close stops the loop and stores what is still counted, within ctx.
func (s *Service) Close(ctx context.Context) error {
	if !s.flusher.Stop() {
		return nil
	}
	if err := s.Flush(ctx); err != nil {
		return fmt.Errorf("bandwidth: last flush: %w", err)
	}
	return nil
}

// PlanChanged tells the module that a plan, an account plan or a project's
// plan changed: projects are looked up again, and the refused ones checked
// again at once (in the background).
func (s *Service) PlanChanged() {
	s.mu.Lock()
	clear(s.cache)
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// BandwidthThisMonth returns the bytes (in and out) each of projectIDs
// carried this calendar month (UTC), and the bytes in one GB of a limit.
func (s *Service) BandwidthThisMonth(ctx context.Context, projectIDs []string) (map[string]int64, int64, error) {
	return s.usage().BandwidthThisMonth(ctx, projectIDs)
}

func (s *Service) usage() Usage {
	return Usage{DB: s.d.DB, BytesPerGB: s.d.BytesPerGB, Clock: s.d.Clock}
}

func (s *Service) used(ctx context.Context, month string, ids []string) (map[string]int64, error) {
	return s.usage().used(ctx, month, ids)
}

// Usage answers GET /usage's bandwidth from the database alone, with no
// service: projects, built before this module (which resolves projects'
// slugs through it), asks it. Its answers are the service's.
type Usage struct {
	DB bun.IDB
	// BytesPerGB is Deps.BytesPerGB. Default GB.
	BytesPerGB int64
	// Clock tells the month. Default platform.SystemClock.
	Clock platform.Clock
}

// BandwidthThisMonth is Service.BandwidthThisMonth.
func (u Usage) BandwidthThisMonth(ctx context.Context, projectIDs []string) (map[string]int64, int64, error) {
	clock := cmp.Or[platform.Clock](u.Clock, platform.SystemClock{})
	used, err := u.used(ctx, monthOf(clock.Now()), projectIDs)
	return used, cmp.Or(u.BytesPerGB, GB), err
}

func (u Usage) used(ctx context.Context, month string, ids []string) (map[string]int64, error) {
	out := make(map[string]int64, len(ids))
	for len(ids) > 0 {
		n := min(len(ids), batch)
		var rows []usageRow
		if err := u.DB.NewSelect().Model(&rows).Where("month = ? AND project_id IN (?)", month, bun.In(ids[:n])).
			Scan(ctx); err != nil {
			return nil, fmt.Errorf("bandwidth: usage: %w", err)
		}
		for _, r := range rows {
			out[r.ProjectID] = r.BytesIn + r.BytesOut
		}
		ids = ids[n:]
	}
	return out, nil
}

// monthOf is t's calendar month in UTC, as stored: 2026-11.
func monthOf(t time.Time) string { return t.UTC().Format("2006-01") }

// nextMonth is the start of the month after t's (UTC).
func nextMonth(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, time.UTC)
}
