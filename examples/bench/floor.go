package main

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Routes against their floor: net/http writing the very bytes the route
// answered (no auth, no database), in its own process, measured in the same
// run just before the route. A route's figure is its req/s over its floor's.

// floorRoute is one authenticated GET measured against its floor.
type floorRoute struct {
	name string // the row's name, e.g. "GET /projects (20 projects)"
	url  string
	tok  string
}

// benchAgainstFloor measures r's floor and then r, and answers both rows (the
// route's with RatioToFloor and a note saying it). With -cpuprofile the
// server's CPU profile during the route is written there.
func benchAgainstFloor(c *http.Client, s *server, self, dir, dbName string, baseline float64, r floorRoute) (floor, route Row, err error) {
	body, err := rawGet(c, r.url, r.tok)
	if err != nil {
		return floor, route, err
	}
	bodyFile := filepath.Join(dir, "floor-"+slug(r.name)+".json")
	if err := os.WriteFile(bodyFile, body, 0o600); err != nil {
		return floor, route, err
	}
	floorAddr := freeAddr()
	floorCmd := exec.Command(self, "-serve-baseline", floorAddr, "-serve-file", bodyFile)
	if err := floorCmd.Start(); err != nil {
		return floor, route, err
	}
	if err := waitHTTP("http://"+floorAddr+"/", 10*time.Second); err != nil {
		stop(floorCmd)
		return floor, route, fmt.Errorf("floor server: %w", err)
	}
	n := *flagConcurrency
	lc := newClient("", n)
	fmt.Fprintf(os.Stderr, "%s: floor of %s (net/http, the same %d bytes)...\n", dbName, r.name, len(body))
	floor = measured(floorCmd.Process.Pid, dbName, fmt.Sprintf("floor: net/http writing the same %d bytes as %s", len(body), r.name), baseline,
		func() loadResult {
			return load(n, *flagDuration, func(int) error { return get(lc, "http://"+floorAddr+"/", "", 200, nil) })
		})
	stop(floorCmd)
	fmt.Fprintf(os.Stderr, "%s: %s...\n", dbName, r.name)
	prof := s.profile(dbName, r.name)
	route = measured(s.cmd.Process.Pid, dbName, r.name, baseline, func() loadResult {
		return load(n, *flagDuration, func(int) error { return get(lc, r.url, r.tok, 200, nil) })
	})
	prof()
	if floor.ReqPerS > 0 {
		route.RatioToFloor = route.ReqPerS / floor.ReqPerS
		route.Note = joinNotes(fmt.Sprintf("%.3f of the same-body floor (%d bytes)", route.RatioToFloor, len(body)), route.Note)
	}
	return floor, route, nil
}

// profile starts, with -cpuprofile, a CPU profile of the server over the
// next measurement (its -duration less a second) and returns the function
// that waits for it and writes it to <dir>/<db>-<route>.pprof.
func (s *server) profile(dbName, name string) (wait func()) {
	return s.profileFor(dbName, name, *flagDuration-time.Second)
}

// profileFor is profile over d (at least a second).
func (s *server) profileFor(dbName, name string, d time.Duration) (wait func()) {
	if *flagCPUProfile == "" {
		return func() {}
	}
	secs := max(1, int(d/time.Second))
	done := make(chan struct{})
	go func() {
		defer close(done)
		c := &http.Client{Timeout: time.Duration(secs+30) * time.Second}
		res, err := c.Get(s.pprof + "/debug/pprof/profile?seconds=" + fmt.Sprint(secs))
		if err != nil {
			fmt.Fprintln(os.Stderr, "cpuprofile:", err)
			return
		}
		defer res.Body.Close()
		path := filepath.Join(*flagCPUProfile, dbName+"-"+slug(name)+".pprof")
		if err := writeFrom(path, res); err != nil {
			fmt.Fprintln(os.Stderr, "cpuprofile:", err)
			return
		}
		fmt.Fprintln(os.Stderr, "cpuprofile:", path)
	}()
	return func() { <-done }
}

func writeFrom(path string, res *http.Response) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.ReadFrom(res.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// slug makes a file name of a row's name.
func slug(name string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(name) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.TrimSuffix(b.String(), "-")
}

// ---- the polled routes ------------------------------------------------------

// polledDeployments is how many deployments the list row's project has.
const polledDeployments = 50

// benchPolled measures the routes a UI or CLI polls while a deploy runs,
// each against its floor: GET /deployments/{id}/status of the LIVE
// deployment live, GET /deployments?projectId= of its project (deployed
// again until it has polledDeployments) and GET /projects/{id}.
func benchPolled(c *http.Client, s *server, self, dir, dbName, tok, live string, baseline float64) ([]Row, error) {
	var d struct{ ProjectID string }
	if err := get(c, s.url+"/deployments/"+live, tok, 200, &d); err != nil {
		return nil, err
	}
	listURL := s.url + "/deployments?projectId=" + url.QueryEscape(d.ProjectID) + fmt.Sprintf("&limit=%d", polledDeployments)
	var list []json0
	if err := get(c, listURL, tok, 200, &list); err != nil {
		return nil, err
	}
	if len(list) < polledDeployments {
		fmt.Fprintf(os.Stderr, "%s: deploying %d more times (the list row's %d deployments)...\n", dbName, polledDeployments-len(list), polledDeployments)
	}
	for i := len(list); i < polledDeployments; i++ {
		id, _, _, err := deployAndWait(c, s.url, tok, d.ProjectID, "LIVE")
		if err != nil {
			return nil, fmt.Errorf("deployment %d of the list: %w", i+1, err)
		}
		live = id
	}
	var rows []Row
	for _, r := range []floorRoute{
		{name: "GET /deployments/{id}/status", url: s.url + "/deployments/" + live + "/status", tok: tok},
		{name: fmt.Sprintf("GET /deployments?projectId= (%d deployments)", polledDeployments), url: listURL, tok: tok},
		{name: "GET /projects/{id}", url: s.url + "/projects/" + d.ProjectID, tok: tok},
	} {
		floor, route, err := benchAgainstFloor(c, s, self, dir, dbName, baseline, r)
		if err != nil {
			rows = append(rows, Row{DB: dbName, Name: r.name, NA: err.Error()})
			continue
		}
		rows = append(rows, floor, route)
	}
	return rows, nil
}

// json0 is any JSON value the bench only counts.
type json0 = struct{}

// benchPolledRows adds the polled routes' rows to rows (n/a rows when there
// is no LIVE deployment or they fail).
func benchPolledRows(c *http.Client, s *server, self, dir, dbName, tok, live string, baseline float64, rows []Row) []Row {
	if live == "" {
		return append(rows, Row{DB: dbName, Name: "GET /deployments/{id}/status", NA: "no LIVE deployment (see the row above)"})
	}
	polled, err := benchPolled(c, s, self, dir, dbName, tok, live, baseline)
	rows = append(rows, polled...)
	if err != nil {
		rows = append(rows, Row{DB: dbName, Name: "polled routes", NA: err.Error()})
	}
	return rows
}
