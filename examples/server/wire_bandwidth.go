package main

import (
	"context"

	"github.com/keelson-dev/keelson/deployments/bandwidth"
	"github.com/keelson-dev/keelson/examples/glue"
	"github.com/keelson-dev/keelson/plans"
	"github.com/keelson-dev/keelson/platform/events"
	"github.com/keelson-dev/keelson/projects"
)

// buildBandwidth builds the bandwidth module on every role: its tables, and
// GET /usage's figures (projects reads them from its table: bandwidth.Usage). Where
// this process serves apps it also stores the ingress meter's counts (built
// in buildDeployments) and tells it which projects are over their plan's
// maxBandwidthGb; its Close, after the listeners stopped, stores the last
// counts. It follows plan changes: the plans module's, and a project's own
// plan (the projects module's PlanChanged).
func (a *App) buildBandwidth(context.Context) error {
	d := bandwidth.Deps{DB: a.DB, BytesPerGB: a.Cfg.bandwidthBytesPerGB, Log: a.Log.With("module", "bandwidth")}
	if a.meter != nil {
		d.Meter = a.meter
		d.Projects = glue.BandwidthProjects{Projects: a.Projects}
		d.Notifier = glue.MailNotifier{Users: a.Auth, Mailer: a.Mailer, Teams: a.Teams}
	}
	if a.metrics != nil {
		d.Metrics = a.metrics
	}
	svc, err := bandwidth.New(d)
	if err != nil {
		return err
	}
	a.Plans.Changed().Subscribe(events.Notify(func(plans.PlanChanged) { svc.PlanChanged() }))
	a.Projects.Events().PlanChanged.Subscribe(events.Notify(func(projects.PlanChanged) { svc.PlanChanged() }))
	a.add(svc)
	a.Bandwidth = svc
	return nil
}

var (
	_ bandwidth.Projects = glue.BandwidthProjects{}
	_ bandwidth.Metrics  = (*serverMetrics)(nil)
)
