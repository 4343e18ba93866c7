package bandwidth

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/keelson-dev/keelson/deployments/ingress"
	"github.com/keelson-dev/keelson/platform"
	"github.com/uptrace/bun"
)

// Flush stores what the meter counted since the last flush (adding it to
// the month's totals), then checks the projects that carried it and the
// refused ones against their limits: it mails the 80% and 100% notices due
// and hands the ingress its new set of refused projects. On an error the
// counts go back into the meter. Without a Meter it does nothing.
func (s *Service) Flush(ctx context.Context) error {
	if s.d.Meter == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.d.Clock.Now().UTC()
	taken := s.d.Meter.Take()
	sums, err := s.store(ctx, now, taken)
	if err != nil {
		for slug, b := range taken {
			s.d.Meter.Add(slug, b)
		}
		if s.d.Metrics != nil {
			s.d.Metrics.BandwidthFlushFailed()
		}
		return err
	}
	return s.refresh(ctx, now, sums)
}

// store adds taken to this month's rows, one transaction for the batch.
// It returns the projects that carried bytes.
func (s *Service) store(ctx context.Context, now time.Time, taken map[string]ingress.Bytes) (map[string]*Project, error) {
	month := monthOf(now)
	rows := map[string]*usageRow{}
	carried := map[string]*Project{}
	var in, out int64
	for slug, b := range taken {
		p, err := s.project(ctx, slug, now)
		if err != nil {
			return nil, err
		}
		if p == nil {
			s.d.Log.DebugContext(ctx, "bandwidth: bytes of a slug no live project has; dropped", "slug", slug, "in", b.In, "out", b.Out)
			continue
		}
		r := rows[p.ID]
		if r == nil {
			r = &usageRow{ProjectID: p.ID, Month: month}
			rows[p.ID] = r
		}
		r.BytesIn += b.In
		r.BytesOut += b.Out
		in, out = in+b.In, out+b.Out
		carried[p.ID] = p
	}
	if len(rows) == 0 {
		return carried, nil
	}
	all := slices.Collect(maps.Values(rows))
	err := s.d.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		for chunk := range slices.Chunk(all, batch) {
			// Additive: other replicas add to the same rows.
			if _, err := tx.NewInsert().Model(&chunk).
				On("CONFLICT (project_id, month) DO UPDATE").
				Set("bytes_in = ?TableAlias.bytes_in + EXCLUDED.bytes_in").
				Set("bytes_out = ?TableAlias.bytes_out + EXCLUDED.bytes_out").
				Exec(ctx); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("bandwidth: store counts: %w", err)
	}
	if s.d.Metrics != nil {
		s.d.Metrics.BandwidthFlushed(in, out)
	}
	return carried, nil
}

// project returns the live project at slug (nil when none), from the cache
// unless its entry is older than cacheTTL.
func (s *Service) project(ctx context.Context, slug string, now time.Time) (*Project, error) {
	if c, ok := s.cache[slug]; ok && now.Sub(c.at) < cacheTTL && !now.Before(c.at) {
		return c.p, nil
	}
	p, err := s.d.Projects.ProjectBySlug(ctx, slug)
	if errors.Is(err, platform.ErrNotFound) {
		p, err = nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("bandwidth: project at %q: %w", slug, err)
	}
	s.cache[slug] = cached{p: p, at: now}
	return p, nil
}

// refresh checks carried and the projects at their limit this month (their
// 100% notice, from any replica) against their limits, mails the notices
// due and hands the ingress the projects to refuse. Projects come from the
// cache, which PlanChanged empties, so a plan change lifts a refusal.
func (s *Service) refresh(ctx context.Context, now time.Time, carried map[string]*Project) error {
	check := maps.Clone(carried)
	var slugs []string
	if err := s.d.DB.NewSelect().Model((*noticeRow)(nil)).Column("slug").
		Where("month = ? AND percent = 100", monthOf(now)).Scan(ctx, &slugs); err != nil {
		return fmt.Errorf("bandwidth: projects at their limit: %w", err)
	}
	for _, slug := range slugs {
		p, err := s.project(ctx, slug, now)
		if err != nil {
			return err
		}
		if p != nil {
			check[p.ID] = p
		}
	}
	month := monthOf(now)
	used, err := s.used(ctx, month, slices.Collect(maps.Keys(check)))
	if err != nil {
		return err
	}
	blocks := map[string]ingress.Block{}
	for id, p := range check {
		limit := int64(p.MaxBandwidthGb) * s.d.BytesPerGB
		if limit <= 0 {
			continue
		}
		u := used[id]
		switch {
		case u >= limit:
			blocks[p.Slug] = ingress.Block{Message: s.page(p, now), Until: nextMonth(now)}
			s.notice(ctx, p, month, 100, u, limit, now)
		case u*10 >= limit*8:
			s.notice(ctx, p, month, 80, u, limit, now)
		}
	}
	s.d.Meter.Block(blocks)
	if s.d.Metrics != nil {
		s.d.Metrics.BandwidthRefused(len(blocks))
	}
	return nil
}

func (s *Service) page(p *Project, now time.Time) string {
	return fmt.Sprintf("This app has used its monthly bandwidth: the %d GB its plan %s includes. "+
		"It answers again on %s (UTC), or as soon as its plan changes.",
		p.MaxBandwidthGb, p.PlanName, nextMonth(now).Format("2 January 2006"))
}

// notice mails p's owner that p reached percent of its limit this month,
// unless that notice is recorded already (by this process before a restart,
// or another replica). Reaching 100% records the 80% notice too, unmailed.
func (s *Service) notice(ctx context.Context, p *Project, month string, percent int, used, limit int64, now time.Time) {
	rows := []noticeRow{{ProjectID: p.ID, Month: month, Percent: percent, Slug: p.Slug, CreatedAt: now}}
	if percent == 100 {
		rows = append(rows, noticeRow{ProjectID: p.ID, Month: month, Percent: 80, Slug: p.Slug, CreatedAt: now})
	}
	res, err := s.d.DB.NewInsert().Model(&rows[0]).On("CONFLICT DO NOTHING").Exec(ctx)
	if err != nil {
		s.d.Log.WarnContext(ctx, "bandwidth: record notice; not mailed", "project_id", p.ID, "percent", percent, "err", err)
		return
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return // recorded before: mailed once already
	}
	if len(rows) > 1 {
		if _, err := s.d.DB.NewInsert().Model(&rows[1]).On("CONFLICT DO NOTHING").Exec(ctx); err != nil {
			s.d.Log.WarnContext(ctx, "bandwidth: record 80% notice", "project_id", p.ID, "err", err)
		}
	}
	subject := fmt.Sprintf("Your project %s used %d%% of its monthly bandwidth", p.Slug, percent)
	text := fmt.Sprintf("Your project %s has carried %s this month, %d%% of the %d GB its plan %s includes.\n\n",
		p.Slug, human(used), used*100/limit, p.MaxBandwidthGb, p.PlanName)
	if percent == 100 {
		text += fmt.Sprintf("Its hosts now answer 429 (bandwidth limit reached) until %s (UTC), or until you choose a plan with more bandwidth for it.\n",
			nextMonth(now).Format("2 January 2006"))
	} else {
		text += "At 100% its hosts answer 429 until the month ends; a plan with more bandwidth avoids that.\n"
	}
	nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := s.d.Notifier.Notify(nctx, p.OwnerID, subject, text); err != nil {
		s.d.Log.WarnContext(ctx, "bandwidth: mail owner", "project_id", p.ID, "percent", percent, "err", err)
	}
}

// human writes n bytes in decimal units.
func human(n int64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%d bytes", n)
	}
	v, i := float64(n), -1
	for v >= unit && i < 4 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %cB", v, "kMGTP"[i])
}
