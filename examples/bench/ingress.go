package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The ingress rows: requests per second through Keelson's ingress to the
// deployed hello app, against the app served directly and against Caddy's
// reverse_proxy (tuned with 64 idle upstream connections, the issue's
// comparison) in front of the same app, at 64 and 512 client connections,
// plain HTTP keep-alive, all measured in one run.
//
// The load generator is wrk (Debian: apt-get install wrk), 2 threads: it is
// written in C over epoll and leaves more of the shared cores to the proxy
// than a Go generator would. It runs on the same cores as the proxy and the
// app, so every figure is for proxy + app + generator on one machine.
// Without wrk the rows say how to get it.
//
// Caddy is built by the bench from the Go module proxy, in a throwaway
// module of its own under the user cache directory (so Keelson's go.mod
// never gains Caddy's dependencies), once; -caddy names another binary.

var (
	flagCaddy       = flag.String("caddy", "", "Caddy "+caddyVersion+" binary; default: built by the bench into $XDG_CACHE_HOME/keelson/caddy-"+caddyVersion+" (go build from the module proxy, once); \"off\" skips the peer")
	flagIngressOnly = flag.Bool("ingress-only", false, "measure only the ingress rows (and the deployment they need)")
	flagIngressConc = flag.String("ingress-conns", "64,512", "the ingress rows' client connections, comma-separated")
	flagIngressProf = flag.String("ingress-profile", "", "write the server's CPU profile during the first ingress row to this file (go tool pprof it)")
)

const caddyVersion = "v2.11.9"

// caddyBinary answers the Caddy to run, building it when it is not cached,
// or why there is none.
func caddyBinary() (string, string) {
	if *flagCaddy == "off" {
		return "", "skipped (-caddy off)"
	}
	if *flagCaddy != "" {
		if !isFile(*flagCaddy) {
			return "", "-caddy " + *flagCaddy + ": not a file"
		}
		return *flagCaddy, ""
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err.Error()
	}
	dir := filepath.Join(cache, "keelson", "caddy-"+caddyVersion)
	bin := filepath.Join(dir, "caddy")
	if isFile(bin) {
		return bin, ""
	}
	fmt.Fprintf(os.Stderr, "building Caddy %s into %s (once)...\n", caddyVersion, dir)
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err.Error()
	}
	files := map[string]string{
		"go.mod": "module keelson.bench/caddy\n\ngo 1.25\n\nrequire github.com/caddyserver/caddy/v2 " + caddyVersion + "\n",
		"main.go": "package main\n\nimport (\n\tcaddycmd \"github.com/caddyserver/caddy/v2/cmd\"\n\n" +
			"\t_ \"github.com/caddyserver/caddy/v2/modules/standard\"\n)\n\nfunc main() { caddycmd.Main() }\n",
	}
	for n, body := range files {
		if err := os.WriteFile(filepath.Join(src, n), []byte(body), 0o644); err != nil {
			return "", err.Error()
		}
	}
	for _, args := range [][]string{{"mod", "tidy"}, {"build", "-o", bin + ".tmp", "."}} {
		cmd := exec.Command("go", args...)
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Sprintf("building Caddy: go %s: %v: %.300s", strings.Join(args, " "), err, out)
		}
	}
	if err := os.Rename(bin+".tmp", bin); err != nil {
		return "", err.Error()
	}
	return bin, ""
}

// caddyPeer is a running Caddy proxying to one upstream.
type caddyPeer struct {
	cmd   *exec.Cmd
	url   string
	admin string // its admin endpoint (pprof under /debug/pprof/)
}

// startCaddy runs Caddy with reverse_proxy to upstream, keeping idle
// upstream connections per host (Caddy's default is 32), no access log,
// no automatic HTTPS.
func startCaddy(bin, dir, upstream string, idle int) (*caddyPeer, error) {
	addr, admin := freeAddr(), freeAddr()
	cfg := fmt.Sprintf(`{"admin": {"listen": %q},
 "logging": {"logs": {"default": {"level": "ERROR"}}},
 "apps": {"http": {"servers": {"bench": {"listen": [%q], "automatic_https": {"disable": true},
  "routes": [{"handle": [{"handler": "reverse_proxy", "upstreams": [{"dial": %q}],
   "transport": {"protocol": "http", "keep_alive": {"max_idle_conns_per_host": %d}}}]}]}}}}}`, admin, addr, upstream, idle)
	p := &caddyPeer{url: "http://" + addr, admin: "http://" + admin}
	if err := p.run(bin, dir, fmt.Sprintf("caddy-%d", idle), cfg, p.url+"/"); err != nil {
		return nil, err
	}
	return p, nil
}

// run starts Caddy with the JSON config cfg (written to dir/name.json, its
// log to dir/name.log) and waits until ready answers.
func (p *caddyPeer) run(bin, dir, name, cfg, ready string) error {
	file := filepath.Join(dir, name+".json")
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return err
	}
	p.cmd = exec.Command(bin, "run", "--config", file)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		return err
	}
	if err := waitHTTP(ready, 30*time.Second); err != nil {
		stop(p.cmd)
		return fmt.Errorf("%s (log: %s): %w", name, logf.Name(), err)
	}
	return nil
}

// wrkResult is one wrk run.
type wrkResult struct {
	rps      float64
	p50, p99 time.Duration
	requests int
	errors   int
}

var (
	wrkRPS      = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	wrkTotal    = regexp.MustCompile(`([0-9]+) requests in`)
	wrkPct      = regexp.MustCompile(`(?m)^\s+(50|99)%\s+([0-9.]+)(us|ms|s)\s*$`)
	wrkNon2xx   = regexp.MustCompile(`Non-2xx or 3xx responses:\s+([0-9]+)`)
	wrkSockErrs = regexp.MustCompile(`Socket errors: connect ([0-9]+), read ([0-9]+), write ([0-9]+), timeout ([0-9]+)`)
)

// runWrk loads url (GET, Host header host when set) with conns keep-alive
// connections over 2 threads for d.
func runWrk(url, host string, conns int, d time.Duration) (wrkResult, error) {
	args := []string{"-t", "2", "-c", strconv.Itoa(conns), "-d", fmt.Sprintf("%ds", int(d.Seconds())), "--latency"}
	if host != "" {
		args = append(args, "-H", "Host: "+host)
	}
	out, err := exec.Command("wrk", append(args, url)...).CombinedOutput()
	if err != nil {
		return wrkResult{}, fmt.Errorf("wrk: %v: %.300s", err, out)
	}
	var r wrkResult
	m := wrkRPS.FindSubmatch(out)
	if m == nil {
		return r, fmt.Errorf("wrk: no Requests/sec in %.300s", out)
	}
	r.rps, _ = strconv.ParseFloat(string(m[1]), 64)
	if m := wrkTotal.FindSubmatch(out); m != nil {
		r.requests, _ = strconv.Atoi(string(m[1]))
	}
	for _, m := range wrkPct.FindAllSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(string(m[2]), 64)
		unit := map[string]time.Duration{"us": time.Microsecond, "ms": time.Millisecond, "s": time.Second}[string(m[3])]
		if string(m[1]) == "50" {
			r.p50 = time.Duration(v * float64(unit))
		} else {
			r.p99 = time.Duration(v * float64(unit))
		}
	}
	if m := wrkNon2xx.FindSubmatch(out); m != nil {
		r.errors, _ = strconv.Atoi(string(m[1]))
	}
	if m := wrkSockErrs.FindSubmatch(out); m != nil {
		for _, s := range m[1:] {
			n, _ := strconv.Atoi(string(s))
			r.errors += n
		}
	}
	return r, nil
}

// wrkRow measures url with wrk and answers the row, with pid's CPU per request.
func wrkRow(pid int, db, name, url, host string, conns int) Row {
	c0 := cpuTime(pid)
	r, err := runWrk(url, host, conns, *flagDuration)
	if err != nil {
		return Row{DB: db, Name: name, NA: err.Error()}
	}
	row := Row{DB: db, Name: name, ReqPerS: r.rps, P50Ms: ms(r.p50), P99Ms: ms(r.p99), Requests: r.requests, Errors: r.errors}
	if r.requests > 0 {
		row.CPUUsPerReq = float64((cpuTime(pid) - c0).Microseconds()) / float64(r.requests)
	}
	return row
}

// connKiB opens n keep-alive connections to url (each sends one request
// with Host host and stays open) and answers the growth of live heap and
// stacks that live(), read before and after, reports, per connection.
func connKiB(url, host string, n int, live func() int64) (float64, error) {
	before := live()
	if before == 0 {
		return 0, errors.New("no heap profile")
	}
	addr := strings.TrimPrefix(url, "http://")
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	req := "GET / HTTP/1.1\r\nHost: " + host + "\r\n\r\n"
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return 0, err
		}
		conns = append(conns, c)
		if _, err := io.WriteString(c, req); err != nil {
			return 0, err
		}
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	after := live()
	return float64(after-before) / float64(n), nil
}

// liveKiBAt is liveKiB for any Go process serving net/http/pprof at base.
func liveKiBAt(base string) func() int64 {
	return func() int64 { return (&server{pprof: base}).liveKiB() }
}

// benchIngress measures the ingress rows against the LIVE app of slug: for
// each client count, the app directly, Caddy tuned (64 idle upstream
// connections) and the ingress, then the memory per open client connection
// of the ingress and of Caddy.
func benchIngress(s *server, slug, dir, db string) (rows []Row, goals []GoalFigure) {
	name := "ingress"
	if _, err := exec.LookPath("wrk"); err != nil {
		return []Row{{DB: db, Name: name, NA: "wrk not found (Debian/Ubuntu: apt-get install wrk)"}}, nil
	}
	host := slug + ".localhost"
	// The hello app answers "<port> <pid>" at /where.
	where, err := getHost(s.ingress+"/where", host)
	var port, pid int
	if err == nil {
		_, err = fmt.Sscanf(where, "%d %d", &port, &pid)
	}
	if err != nil {
		return []Row{{DB: db, Name: name, NA: "the app's address through the ingress: " + err.Error()}}, nil
	}
	direct := fmt.Sprintf("http://127.0.0.1:%d", port)
	var caddy *caddyPeer
	bin, na := caddyBinary()
	if na == "" {
		if caddy, err = startCaddy(bin, dir, strings.TrimPrefix(direct, "http://"), 64); err != nil {
			na = err.Error()
		} else {
			defer stop(caddy.cmd)
		}
	}
	for _, f := range strings.Split(*flagIngressConc, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return append(rows, Row{DB: db, Name: name, NA: fmt.Sprintf("-ingress-conns: %q is not a positive number", f)}), goals
		}
		fmt.Fprintf(os.Stderr, "%s: ingress at %d connections (direct, Caddy, ingress)...\n", db, n)
		d := wrkRow(pid, db, fmt.Sprintf("app served directly (%d conns, wrk)", n), direct+"/", "", n)
		d.Note = "the hello app (process runtime); CPU is the app's"
		cr := Row{DB: db, Name: fmt.Sprintf("Caddy %s reverse_proxy, 64 idle upstream conns (%d conns)", caddyVersion, n), NA: na}
		if caddy != nil {
			cr = wrkRow(caddy.cmd.Process.Pid, db, cr.Name, caddy.url+"/", "", n)
			cr.Note = "CPU is Caddy's"
		}
		prof := profile(s, *flagIngressProf)
		*flagIngressProf = ""
		ir := wrkRow(s.cmd.Process.Pid, db, fmt.Sprintf("ingress (%d conns)", n), s.ingress+"/", host, n)
		if err := prof(); err != nil {
			ir.Note = joinNotes(ir.Note, "profile: "+err.Error())
		}
		ir.Note = "CPU is the server's (ingress, metering on)"
		for _, r := range []*Row{&cr, &ir} {
			if r.NA == "" && d.ReqPerS > 0 {
				r.Ratio = r.ReqPerS / d.ReqPerS
				r.Note = joinNotes(r.Note, fmt.Sprintf("%.3f of direct, p99 %.2fx direct", r.Ratio, r.P99Ms/max(d.P99Ms, 0.001)))
			}
		}
		vsCaddy := 0.0
		if cr.NA == "" && cr.ReqPerS > 0 && ir.ReqPerS > 0 {
			vsCaddy = ir.ReqPerS / cr.ReqPerS
			ir.Note = joinNotes(ir.Note, fmt.Sprintf("%.2fx Caddy", vsCaddy))
		}
		rows = append(rows, d, cr, ir)
		goals = append(goals,
			GoalFigure{Name: fmt.Sprintf("ingress / app direct, %d conns", n), Figure: fmt.Sprintf("%.3f", ir.Ratio), Target: ">= 0.35", Met: ir.Ratio >= 0.35},
			GoalFigure{Name: fmt.Sprintf("ingress / Caddy tuned, %d conns", n), Figure: fmtOr(vsCaddy, "%.2fx", cr.NA), Target: ">= 1.25x", Met: vsCaddy >= 1.25})
		tr, tg := benchIngressTLS(s, bin, slug, strings.TrimPrefix(direct, "http://"), dir, db, n)
		rows, goals = append(rows, tr...), append(goals, tg...)
	}
	return append(rows, connRows(s, caddy, host, db)...), goals
}

// connRows are the memory per open client connection of the ingress and
// of Caddy (when it runs).
func connRows(s *server, caddy *caddyPeer, host, db string) []Row {
	const open = 2000
	mem := Row{DB: db, Name: fmt.Sprintf("ingress memory per open client connection (%d open)", open)}
	if kib, err := connKiB(s.ingress, host, open, s.liveKiB); err != nil {
		mem.NA = err.Error()
	} else {
		mem.Value = fmt.Sprintf("%.1f KiB", kib)
		mem.Note = "growth of heap + stacks in use after a GC, each connection idle after one request"
	}
	rows := []Row{mem}
	if caddy != nil {
		cm := Row{DB: db, Name: fmt.Sprintf("Caddy memory per open client connection (%d open)", open)}
		if kib, err := connKiB(caddy.url, host, open, liveKiBAt(caddy.admin)); err != nil {
			cm.NA = err.Error()
		} else {
			cm.Value = fmt.Sprintf("%.1f KiB", kib)
			cm.Note = "the same measure, from Caddy's admin pprof"
		}
		rows = append(rows, cm)
	}
	return rows
}

// profile starts taking s's CPU profile for the next -duration into file
// (nothing when file is empty); the function it answers waits for it.
func profile(s *server, file string) func() error {
	if file == "" {
		return func() error { return nil }
	}
	errc := make(chan error, 1)
	go func() {
		res, err := http.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", s.pprof, max(1, int(flagDuration.Seconds())-1)))
		if err != nil {
			errc <- err
			return
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err == nil {
			err = os.WriteFile(file, b, 0o644)
		}
		errc <- err
	}()
	return func() error { return <-errc }
}

// getHost answers the body of GET url sent with Host host (status 200 required).
func getHost(url, host string) (string, error) {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return "", err
	}
	req.Host = host
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err == nil && res.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s (Host %s): status %d: %.200s", url, host, res.StatusCode, b)
	}
	return string(b), err
}

// fmtOr formats v, or says why there is no figure.
func fmtOr(v float64, format, na string) string {
	if na != "" || v == 0 {
		return "n/a"
	}
	return fmt.Sprintf(format, v)
}

// GoalFigure is one of issue 28's goals with its figure from this run.
type GoalFigure struct {
	DB     string `json:"db,omitempty"` // the server's database ("" for none)
	Name   string `json:"name"`
	Figure string `json:"figure"`
	Target string `json:"target"`
	Met    bool   `json:"met"`
}
