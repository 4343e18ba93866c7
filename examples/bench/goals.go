package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// The goals table printed at the end of a run: each goal of the speed issues
// with its figure from this run and whether it is met, per database. A new
// goal is one more entry in goalDefs.

// Goal is one line of the goals table.
type Goal struct {
	DB     string `json:"db,omitempty"`
	Goal   string `json:"goal"`
	Figure string `json:"figure"`
	Target string `json:"target"`
	Met    string `json:"met"` // "met", "not met" or "n/a (why)"
}

// goalDef checks one goal against one database's rows.
type goalDef struct {
	goal, target string
	// check answers the figure and whether it meets the target; ok is false
	// when the run did not measure it.
	check func(rows []Row) (figure string, met, ok bool)
}

// goalDefs are the goals the bench reports, in the order printed.
var goalDefs = []goalDef{
	floorGoal("GET /projects (20 projects)", "GET /projects (cached) vs its floor", 0.5),
	floorGoal("GET /deployments/{id}/status", "GET /deployments/{id}/status vs its floor", 0.25),
	floorGoal(fmt.Sprintf("GET /deployments?projectId= (%d deployments)", polledDeployments), "GET /deployments?projectId= (50) vs its floor", 0.25),
	floorGoal("GET /projects/{id}", "GET /projects/{id} vs its floor", 0.25),
	p99Goal(1000, 10),
	p99Goal(10000, 100),
	{goal: "idle log stream memory (largest row)", target: "<= 16 KiB",
		check: func(rows []Row) (string, bool, bool) {
			var best *Row
			for i, r := range rows {
				if strings.HasPrefix(r.Name, "server RSS, ") && strings.HasSuffix(r.Name, " open streams") && r.KiBPerStream > 0 {
					if best == nil || r.Streams >= best.Streams {
						best = &rows[i]
					}
				}
			}
			if best == nil {
				return "", false, false
			}
			return fmt.Sprintf("%.1f KiB (%d streams)", best.KiBPerStream, best.Streams), best.KiBPerStream <= 16, true
		}},
}

// floorGoal: the row named route reaches at least min of its same-body floor.
func floorGoal(route, goal string, min float64) goalDef {
	return goalDef{goal: goal, target: fmt.Sprintf(">= %.2f", min), check: func(rows []Row) (string, bool, bool) {
		r, ok := findRow(rows, route)
		if !ok || r.RatioToFloor == 0 {
			return "", false, false
		}
		return fmt.Sprintf("%.3f (%.0f req/s, %.0f us CPU/req)", r.RatioToFloor, r.ReqPerS, r.CPUUsPerReq), r.RatioToFloor >= min, true
	}}
}

// p99Goal: the fan-out to subs followers delivers with p99 under maxMs.
func p99Goal(subs int, maxMs float64) goalDef {
	name := fmt.Sprintf("SSE fan-out, %d subscriber(s)", subs)
	return goalDef{goal: fmt.Sprintf("fan-out p99 append->delivery, %d followers", subs), target: fmt.Sprintf("< %.0f ms", maxMs),
		check: func(rows []Row) (string, bool, bool) {
			r, ok := findRow(rows, name)
			if !ok || r.P99Ms == 0 {
				return "", false, false
			}
			fig := fmt.Sprintf("%.1f ms (p50 %.1f)", r.P99Ms, r.P50Ms)
			if r.Errors > 0 {
				fig += fmt.Sprintf(", %d followers missed lines", r.Errors)
			}
			return fig, r.P99Ms < maxMs && r.Errors == 0, true
		}}
}

func findRow(rows []Row, name string) (Row, bool) {
	for _, r := range rows {
		if r.Name == name && r.NA == "" {
			return r, true
		}
	}
	return Row{}, false
}

// goals checks every goal on each database the run measured.
func goals(rows []Row) []Goal {
	var dbs []string
	byDB := map[string][]Row{}
	for _, r := range rows {
		if r.DB == "" {
			continue
		}
		if _, ok := byDB[r.DB]; !ok {
			dbs = append(dbs, r.DB)
		}
		byDB[r.DB] = append(byDB[r.DB], r)
	}
	var out []Goal
	for _, g := range goalDefs {
		for _, db := range dbs {
			fig, met, ok := g.check(byDB[db])
			res := "n/a (not measured in this run)"
			if ok {
				res = map[bool]string{true: "met", false: "not met"}[met]
			}
			out = append(out, Goal{DB: db, Goal: g.goal, Figure: fig, Target: g.target, Met: res})
		}
	}
	return out
}

// figureGoals are the goals measured beside the rows (the ingress against
// Caddy and the app served directly, container time to LIVE), in the goals
// table's form, so one table carries every goal.
func figureGoals(fs []GoalFigure) []Goal {
	out := make([]Goal, 0, len(fs))
	for _, f := range fs {
		db := f.DB
		if db == "" {
			db = "-"
		}
		out = append(out, Goal{DB: db, Goal: f.Name, Figure: f.Figure, Target: f.Target,
			Met: map[bool]string{true: "met", false: "not met"}[f.Met]})
	}
	return out
}

func printGoals(w io.Writer, gs []Goal) {
	fmt.Fprintln(w, "\nGoals (issue 28):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "goal\tdb\tfigure\ttarget\tmet")
	for _, g := range gs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", g.Goal, g.DB, g.Figure, g.Target, g.Met)
	}
	tw.Flush()
}
