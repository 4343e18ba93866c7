package main

import (
	"context"
	"fmt"

	"github.com/keelson-dev/keelson/deployments/bandwidth"
	"github.com/keelson-dev/keelson/projects"
)

// buildBandwidth builds the bandwidth module on every role: its tables, and
// GET /usage's figures (projects reads them through bandwidthCounter). Where
// this process serves apps it also stores the ingress meter's counts (built
// in buildDeployments) and tells it which projects are over their plan's
// maxBandwidthGb; its Close, after the listeners stopped, stores the last
// counts. Plan changes reach it through planChanges.
func (a *App) buildBandwidth(context.Context) error {
	d := bandwidth.Deps{DB: a.DB, BytesPerGB: a.Cfg.bandwidthBytesPerGB, Log: a.Log.With("module", "bandwidth")}
	if a.meter != nil {
		d.Meter = a.meter
		d.Projects = bandwidthProjects{a.Projects}
		d.Notifier = mailNotifier{a.Auth, a.Mailer, a.Teams}
	}
	if a.metrics != nil {
		d.Metrics = a.metrics
	}
	svc, err := bandwidth.New(d)
	if err != nil {
		return err
	}
	a.add(svc)
	a.Bandwidth = svc
	return nil
}

// bandwidthProjects adapts the projects module to bandwidth.Projects.
type bandwidthProjects struct{ p *projects.Service }

func (b bandwidthProjects) ProjectBySlug(ctx context.Context, slug string) (*bandwidth.Project, error) {
	p, err := b.p.ProjectBySlug(ctx, slug)
	if err != nil {
		return nil, err
	}
	return &bandwidth.Project{ID: p.ID, OwnerID: p.OwnerID, Slug: p.Slug, PlanName: p.Plan.Name,
		MaxBandwidthGb: p.Plan.MaxBandwidthGb}, nil
}

// bandwidthCounter answers GET /usage's bandwidth through the bandwidth
// module, built after projects (an edge).
type bandwidthCounter struct{ e *edges }

func (c bandwidthCounter) BandwidthThisMonth(ctx context.Context, ids []string) (map[string]int64, int64, error) {
	if c.e.bandwidth == nil {
		return nil, 0, fmt.Errorf("bandwidth: module not built")
	}
	return c.e.bandwidth.BandwidthThisMonth(ctx, ids)
}

var (
	_ bandwidth.Projects        = bandwidthProjects{}
	_ projects.BandwidthCounter = bandwidthCounter{}
	_ bandwidth.Metrics         = (*serverMetrics)(nil)
)
