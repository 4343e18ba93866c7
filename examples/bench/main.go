// Command bench measures the reference server (examples/server) against a
// bare net/http hello-world on the same machine, over loopback only:
//
//	go run ./examples/bench [-postgres URL] [-duration 10s] [-concurrency 32] [-json out.json] [-pocketbase PATH]
//	go run ./examples/bench -ingress-only [-ingress-conns 64,512] [-caddy PATH] [-ingress-profile cpu.pprof]
//	go run ./examples/bench -containers-only
//
// It builds the server, runs it as a subprocess (SQLite in a temporary data
// dir; also Postgres when -postgres is given) configured through its
// environment, and reports requests per second, p50/p99 latency and the ratio
// to the baseline for GET /projects (a user with 20 projects), GET
// /deployments/{id}/status, POST /projects and POST /auth/login, with
// PocketBase (peer.go) listing 20 records measured next to GET /projects;
// SSE fan-out of one deployment's log to 1, 100, 1,000 and 10,000
// subscribers (lines delivered per second, p99 delay from the build process
// writing a line to a subscriber reading it); the server's resident memory
// idle and with 1,000 and 10,000 open streams (and per stream); and the time
// from POST /deployments to LIVE for a trivial Go
// app minus that app's own build and start time. The routes a UI polls
// (GET /projects, GET /deployments/{id}/status, GET /deployments?projectId=
// with 50 deployments, GET /projects/{id}) are each measured against their
// own floor, net/http writing the same body (floor.go; -polled-only measures
// only those, -cpuprofile DIR keeps the server's CPU profile of each). It
// prints a table, then the goals of issue 28 with their figures and whether
// they are met (goals.go); the ingress against the app served directly and
// against Caddy (ingress.go, wrk); a prebuilt binary FROM scratch under the
// docker runtime against the process runtime (containers.go), with their
// goals (goal | figure | target | met). With -json it writes the same as
// JSON. A row it cannot measure says why ("n/a").
//
// The load generator is closed-loop: a fixed number of workers, each sending
// its next request when the previous one answered, for a fixed duration.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"
)

// Row is one measurement.
type Row struct {
	DB       string  `json:"db,omitempty"`
	Name     string  `json:"name"`
	ReqPerS  float64 `json:"reqPerSec,omitempty"`
	P50Ms    float64 `json:"p50Ms,omitempty"`
	P99Ms    float64 `json:"p99Ms,omitempty"`
	Ratio    float64 `json:"ratioToBaseline,omitempty"`
	LinesPS  float64 `json:"linesPerSec,omitempty"`
	Value    string  `json:"value,omitempty"` // memory, times
	Requests int     `json:"requests,omitempty"`
	Errors   int     `json:"errors,omitempty"`
	Note     string  `json:"note,omitempty"`
	// CPUUsPerReq is the server process's CPU time (utime+stime from
	// /proc/<pid>/stat) during the measurement, per request (per delivered
	// line in the SSE fan-out rows), in microseconds.
	CPUUsPerReq float64 `json:"cpuUsPerReq,omitempty"`
	// RatioToFloor is req/s over the same run's net/http floor writing the
	// same body (floor.go).
	RatioToFloor float64 `json:"ratioToFloor,omitempty"`
	// KiBPerStream and Streams: the open-streams memory rows.
	KiBPerStream float64 `json:"kibPerStream,omitempty"`
	Streams      int     `json:"streams,omitempty"`
	NA           string  `json:"na,omitempty"` // why it was not measured
}

// Report is the JSON output.
type Report struct {
	Time        time.Time    `json:"time"`
	Command     string       `json:"command"`
	GoVersion   string       `json:"goVersion"`
	CPUs        int          `json:"cpus"`
	CPUModel    string       `json:"cpuModel"`
	Duration    string       `json:"duration"`
	Concurrency int          `json:"concurrency"`
	Rows        []Row        `json:"rows"`
	Goals       []Goal       `json:"goals"`
	GoalFigures []GoalFigure `json:"goalFigures,omitempty"`
}

var (
	flagPostgres    = flag.String("postgres", "", "also bench on this Postgres database URL (its tables are created; use an empty database)")
	flagDuration    = flag.Duration("duration", 10*time.Second, "duration of each request-rate measurement")
	flagConcurrency = flag.Int("concurrency", 32, "concurrent workers of the load generator")
	flagJSON        = flag.String("json", "", "also write the results as JSON to this file")
	flagMaxSubs     = flag.Int("max-subscribers", 10000, "largest SSE fan-out measured")
	flagSubs        = flag.String("subscribers", "1,100,1000,10000", "the SSE fan-out rows: subscribers per row, comma-separated")
	flagOpenConc    = flag.Int("open-concurrency", 64, "SSE streams being opened at once (a stream counts until its ready event); the RSS rows measure open streams, not a burst of opening requests")
	flagAPIOnly     = flag.Bool("api-only", false, "measure only the request rows (floor, GET /projects, POST /projects), not login, deployments or streams")
	flagStreamsOnly = flag.Bool("streams-only", false, "measure only the SSE fan-out and stream memory rows (and the idle RSS)")
	flagPolledOnly  = flag.Bool("polled-only", false, "measure only GET /projects and the polled routes (status, a project's deployments, a project), each against its floor")
	flagCPUProfile  = flag.String("cpuprofile", "", "write the server's CPU profile during each route measured against its floor, the fan-out and the HTTPS ingress rows to this directory (<db>-<row>.pprof)")

	// Internal modes: the bench runs itself as the baseline server and as the
	// log emitter inside a deployment's build.
	flagServeBaseline = flag.String("serve-baseline", "", "internal: serve hello-world on this address")
	flagServeFile     = flag.String("serve-file", "", "internal: with -serve-baseline, serve this file's bytes as application/json instead")
	flagEmit          = flag.String("emit", "", "internal: trigger-file,lines,lines-per-second")
)

func main() {
	flag.Parse()
	if *flagServeBaseline != "" {
		serveBaseline(*flagServeBaseline)
		return
	}
	if *flagEmit != "" {
		if err := emit(*flagEmit); err != nil {
			fmt.Fprintln(os.Stderr, "emit:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	raiseNofile()
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "keelson-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	rep := &Report{Time: time.Now().UTC(), Command: "go run ./examples/bench " + strings.Join(os.Args[1:], " "),
		GoVersion: runtime.Version(), CPUs: runtime.NumCPU(), CPUModel: cpuModel(),
		Duration: flagDuration.String(), Concurrency: *flagConcurrency}

	fmt.Fprintln(os.Stderr, "building the server...")
	bin := filepath.Join(tmp, "keelson-server")
	build := exec.Command("go", "build", "-o", bin, "./examples/server")
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("go build ./examples/server: %w", err)
	}

	if *flagContainersOnly {
		rep.Rows, rep.GoalFigures = benchContainers(bin, filepath.Join(tmp, "containers"))
		rep.Goals = figureGoals(rep.GoalFigures)
		printTable(os.Stdout, rep)
		printGoals(os.Stdout, rep.Goals)
		return nil
	}

	// Baseline: the same load on a hello-world, in its own process like the server.
	self, err := os.Executable()
	if err != nil {
		return err
	}
	baseAddr := freeAddr()
	base := exec.Command(self, "-serve-baseline", baseAddr)
	if err := base.Start(); err != nil {
		return err
	}
	defer stop(base)
	if err := waitHTTP("http://"+baseAddr+"/", 10*time.Second); err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	fmt.Fprintln(os.Stderr, "baseline: GET / on net/http hello-world...")
	c := newClient("", *flagConcurrency)
	bres := load(*flagConcurrency, *flagDuration, func(int) error { return get(c, "http://"+baseAddr+"/", "", 200, nil) })
	baseline := bres.rps
	rep.Rows = append(rep.Rows, bres.row("", "baseline: net/http hello-world GET /", baseline))
	stop(base)

	dbs := []struct{ name, url string }{{"sqlite", ""}}
	if *flagPostgres != "" {
		dbs = append(dbs, struct{ name, url string }{"postgres", *flagPostgres})
	}
	var pb *peer
	if *flagStreamsOnly || *flagIngressOnly {
		pb = &peer{na: "-streams-only or -ingress-only"}
	} else {
		fmt.Fprintln(os.Stderr, "peer: starting PocketBase...")
		pb = startPeer(filepath.Join(tmp, "pocketbase"))
		defer pb.stop()
	}
	for _, d := range dbs {
		rows, goals, err := benchServer(bin, self, tmp, d.name, d.url, baseline, pb)
		for i := range goals {
			goals[i].DB = d.name
		}
		rep.Rows = append(rep.Rows, rows...)
		rep.GoalFigures = append(rep.GoalFigures, goals...)
		if err != nil {
			rep.Rows = append(rep.Rows, Row{DB: d.name, Name: "server", NA: err.Error()})
		}
	}

	if !*flagAPIOnly && !*flagStreamsOnly && !*flagIngressOnly && !*flagPolledOnly {
		rows, goals := benchContainers(bin, filepath.Join(tmp, "containers"))
		rep.Rows, rep.GoalFigures = append(rep.Rows, rows...), append(rep.GoalFigures, goals...)
	}
	rep.Goals = append(goals(rep.Rows), figureGoals(rep.GoalFigures)...)
	printTable(os.Stdout, rep)
	printGoals(os.Stdout, rep.Goals)
	if *flagJSON != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(*flagJSON, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// ---- the server under test ------------------------------------------------

type server struct {
	url     string
	ingress string // the apps' ingress (KEELSON_INGRESS_ADDR)
	cmd     *exec.Cmd
	dataDir string
	pprof   string     // the server's pprof listener (KEELSON_PPROF_ADDR)
	tlsAddr string     // the ingress's HTTPS listener (KEELSON_INGRESS_TLS_ADDR)
	cert    *benchCert // its static certificate, for *.localhost
}

// liveKiB is the server's heap and goroutine stacks in use, in KiB, right
// after a garbage collection (pprof's heap profile with gc=1, whose text
// form ends with runtime.MemStats); 0 if unknown. Unlike RSS, memory a
// previous row freed but the runtime has not given back does not count.
func (s *server) liveKiB() int64 {
	res, err := http.Get(s.pprof + "/debug/pprof/heap?gc=1&debug=1")
	if err != nil {
		return 0
	}
	defer res.Body.Close()
	var total int64
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		for _, k := range []string{"# HeapInuse = ", "# StackInuse = "} {
			if v, ok := strings.CutPrefix(sc.Text(), k); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				total += n
			}
		}
	}
	return total / 1024
}

// startServer runs the server on a fresh data dir under dir; env, when
// given, is added to (and overrides) its environment.
func startServer(bin, dir, dbURL string, env ...string) (*server, error) {
	dataDir := filepath.Join(dir, "data")
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, err
	}
	addr, ingress, pprofAddr, tlsAddr := freeAddr(), freeAddr(), freeAddr(), freeAddr()
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return nil, err
	}
	cert, err := makeBenchCert(dir)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"KEELSON_ADDR="+addr, "KEELSON_INGRESS_ADDR="+ingress, "KEELSON_DATA_DIR="+dataDir,
		"KEELSON_DATABASE_URL="+dbURL, "KEELSON_PUBLIC_URL=http://"+addr,
		"KEELSON_ADMIN_EMAILS=bench-admin@example.com", "KEELSON_ALLOW_LOCAL_REPOS=true",
		// One user holds every subscriber of the fan-out rows.
		"KEELSON_MAX_LOG_STREAMS=50000",
		// ... and every stream holds a connection.
		"KEELSON_MAX_CONNS=50000", "KEELSON_MAX_CONNS_PER_ADDR=50000",
		// The ingress rows open 512 connections and more from one address.
		"KEELSON_INGRESS_MAX_CONNS_PER_ADDR=8192",
		// The server's own overhead against a plain go build of the same
		// commit on the host; docker vs process is BenchmarkTimeToLive in
		// deployments/container.
		"KEELSON_RUNTIME=process",
		// The stream memory rows read the heap after a GC here.
		"KEELSON_PPROF_ADDR="+pprofAddr,
	)
	// The HTTPS rows (ingress_tls.go); the hello projects keep plain HTTP
	// (httpsRedirect false) for the plain rows.
	cmd.Env = append(cmd.Env, tlsEnv(tlsAddr, cert)...)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{url: "http://" + addr, ingress: "http://" + ingress, cmd: cmd, dataDir: dataDir, pprof: "http://" + pprofAddr, tlsAddr: tlsAddr, cert: cert}
	if err := waitHTTP(s.url+"/readyz", 60*time.Second); err != nil {
		stop(cmd)
		return nil, fmt.Errorf("server did not become ready (log: %s): %w", logf.Name(), err)
	}
	return s, nil
}

func benchServer(bin, self, tmp, dbName, dbURL string, baseline float64, pb *peer) (rows []Row, goals []GoalFigure, err error) {
	dir := filepath.Join(tmp, dbName)
	fmt.Fprintf(os.Stderr, "%s: starting the server...\n", dbName)
	s, err := startServer(bin, dir, dbURL)
	if err != nil {
		return nil, nil, err
	}
	defer stop(s.cmd)
	add := func(r Row) { r.DB = dbName; rows = append(rows, r) }
	admin := newClient("", 4)

	time.Sleep(time.Second) // settle start-up work (seeding, engine start) before reading idle memory
	add(Row{Name: "server RSS, idle", Value: rss(s.cmd.Process.Pid)})

	users, err := benchAccounts(admin, s, dir)
	if err != nil {
		return rows, nil, err
	}
	for i := 0; i < 20; i++ {
		if err := call(admin, "POST", s.url+"/projects", users["reader"], projectBody(fmt.Sprintf("list-%02d", i)), 201, nil); err != nil {
			return rows, nil, err
		}
	}

	n := *flagConcurrency
	c := newClient("", n)
	if *flagStreamsOnly {
		rows, err := benchStreams(admin, s, users["reader"], self, dir, dbName, rows)
		return rows, nil, err
	}
	if *flagIngressOnly {
		// One deployment of the hello app: the upstream the rows measure.
		fmt.Fprintf(os.Stderr, "%s: deploying the hello app...\n", dbName)
		slug, err := deployHello(admin, s.url, users["reader"], dir)
		if err != nil {
			return append(rows, Row{DB: dbName, Name: "ingress", NA: "deploying the hello app: " + err.Error()}), nil, nil
		}
		ing, goals := benchIngress(s, slug, dir, dbName)
		return append(rows, ing...), goals, nil
	}
	var list []json.RawMessage
	if err := call(admin, "GET", s.url+"/projects", users["reader"], nil, 200, &list); err != nil || len(list) != 20 {
		return rows, nil, fmt.Errorf("GET /projects: %d projects, %v", len(list), err)
	}
	floorRow, row, err := benchAgainstFloor(admin, s, self, dir, dbName, baseline,
		floorRoute{name: "GET /projects (20 projects)", url: s.url + "/projects", tok: users["reader"]})
	if err != nil {
		return rows, nil, err
	}
	add(floorRow)
	pid := s.cmd.Process.Pid
	fmt.Fprintf(os.Stderr, "%s: peer: PocketBase list...\n", dbName)
	pbRow, row := peerRow(pb, dbName, row, baseline)
	add(row)
	add(pbRow)
	if *flagPolledOnly {
		live, _, depRows := benchDeploy(admin, s.url, users["reader"], dir)
		for _, r := range depRows {
			add(r)
		}
		return benchPolledRows(admin, s, self, dir, dbName, users["reader"], live, baseline, rows), nil, nil
	}

	fmt.Fprintf(os.Stderr, "%s: POST /projects (1,000 owned)...\n", dbName)
	var seq atomic.Int64
	for i := 0; i < 1000; i++ {
		if err := call(admin, "POST", s.url+"/projects", users["writer"], projectBody(fmt.Sprintf("seed-%d", i)), 201, nil); err != nil {
			return rows, nil, err
		}
	}
	add(measured(pid, dbName, "POST /projects (1,000+ already owned)", baseline, func() loadResult {
		return load(n, *flagDuration, func(int) error {
			return call(c, "POST", s.url+"/projects", users["writer"], projectBody(fmt.Sprintf("w-%d", seq.Add(1))), 201, nil)
		})
	}))
	if *flagAPIOnly {
		return rows, nil, nil
	}

	fmt.Fprintf(os.Stderr, "%s: POST /auth/login...\n", dbName)
	add(benchLogin(s.url, baseline))

	// Deployments: time to LIVE, then the status route on the LIVE deployment.
	if !hasRoute(admin, s.url, "post", "/deployments") {
		na := "deployments are not wired into the reference server"
		add(Row{Name: "time POST /deployments -> LIVE minus app build+start", NA: na})
		add(Row{Name: "GET /deployments/{id}/status", NA: na})
		add(Row{Name: "SSE fan-out", NA: na})
		return rows, nil, nil
	}
	fmt.Fprintf(os.Stderr, "%s: POST /deployments -> LIVE...\n", dbName)
	live, slug, depRows := benchDeploy(admin, s.url, users["reader"], dir)
	for _, r := range depRows {
		add(r)
	}
	if live != "" {
		ing, g := benchIngress(s, slug, dir, dbName)
		for _, r := range ing {
			add(r)
		}
		goals = append(goals, g...)
	}
	rows = benchPolledRows(admin, s, self, dir, dbName, users["reader"], live, baseline, rows)

	rows, err = benchStreams(admin, s, users["reader"], self, dir, dbName, rows)
	return rows, goals, err
}

// benchAccounts makes an admin, a reader and a writer; both on a plan that
// allows what the bench creates. It answers the users' tokens by name.
func benchAccounts(admin *http.Client, s *server, dir string) (map[string]string, error) {
	// Accounts: an admin, a reader with 20 projects, a writer; both on a plan
	// that allows what the bench creates.
	adminTok, err := signup(admin, s.url, "bench-admin@example.com")
	if err != nil {
		return nil, err
	}
	// ADMIN needs a verified address: redeem the link the server logged
	// (no SMTP configured, so mail goes to its log).
	if err := verifyFromLog(admin, s.url, filepath.Join(dir, "server.log"), "bench-admin@example.com"); err != nil {
		return nil, err
	}
	var plan struct{ ID string }
	if err := call(admin, "POST", s.url+"/plans", adminTok, map[string]any{"name": "bench", "tier": "ENTERPRISE",
		"maxProjects": 1000000, "maxDeployments": 1000000, "maxMemoryMi": 1024, "maxCpuM": 1000, "maxStorageGi": 10,
		"maxBandwidthGb": 100, "buildTimeoutMins": 60}, 201, &plan); err != nil {
		return nil, err
	}
	users := map[string]string{}
	for _, name := range []string{"reader", "writer"} {
		tok, err := signup(admin, s.url, "bench-"+name+"@example.com")
		if err != nil {
			return nil, err
		}
		var me struct{ ID string }
		if err := call(admin, "GET", s.url+"/auth/me", tok, nil, 200, &me); err != nil {
			return nil, err
		}
		if err := call(admin, "PUT", s.url+"/plans/"+plan.ID+"/accounts/"+me.ID, adminTok, nil, 204, nil); err != nil {
			return nil, err
		}
		users[name] = tok
	}
	return users, nil
}

// benchStreams adds the SSE fan-out rows (1, 100, 1,000 and 10,000
// subscribers of one deployment's log) and the memory of 10,000 open streams.
func benchStreams(c *http.Client, s *server, tok, self, dir, dbName string, rows []Row) ([]Row, error) {
	for _, f := range strings.Split(*flagSubs, ",") {
		subs, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || subs < 1 {
			return rows, fmt.Errorf("-subscribers: %q is not a positive number", f)
		}
		if subs > *flagMaxSubs {
			continue
		}
		fmt.Fprintf(os.Stderr, "%s: SSE fan-out to %d subscribers...\n", dbName, subs)
		for _, r := range benchFanout(c, s, tok, self, dir, dbName, subs) {
			r.DB = dbName
			rows = append(rows, r)
		}
	}
	return rows, nil
}

func projectBody(name string) map[string]any {
	return map[string]any{"name": name, "repoUrl": "https://github.com/acme/" + name, "framework": "node", "port": 3000}
}

// ---- POST /auth/login -----------------------------------------------------

// benchLogin measures logins honestly against the server's limits: argon2id
// on every attempt, at most 10 attempts per account and 100 per client IP in
// 15 minutes. It spreads attempts over many accounts and many loopback
// source addresses (127.0.x.y) and reports how many were refused.
func benchLogin(base string, baseline float64) Row {
	const accounts, perAccount = 400, 10
	name := "POST /auth/login"
	// Registration is limited to 30 per IP per hour: register from many addresses.
	var wg sync.WaitGroup
	errc := make(chan error, accounts)
	sem := make(chan struct{}, 4)
	for i := 0; i < accounts; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			c := newClient(fmt.Sprintf("127.0.%d.%d", 10+i/25, 1+i%25), 1)
			const pw = "bench password 1"
			errc <- call(c, "POST", base+"/auth/register", "", map[string]any{"email": fmt.Sprintf("login-%d@example.com", i),
				"password": pw, "confirmPassword": pw}, 201, nil)
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			return Row{Name: name, NA: "registering the login accounts: " + err.Error()}
		}
	}
	n := *flagConcurrency
	clients := make([]*http.Client, n)
	for w := range clients {
		clients[w] = newClient(fmt.Sprintf("127.0.100.%d", 1+w), 1) // 100 per IP: a worker's own address
	}
	var next, refused atomic.Int64
	r := load(n, *flagDuration, func(w int) error {
		i := next.Add(1) - 1
		if i >= accounts*perAccount {
			return errBudget
		}
		err := call(clients[w], "POST", base+"/auth/login", "", map[string]any{
			"email": fmt.Sprintf("login-%d@example.com", i%accounts), "password": "bench password 1"}, 200, nil)
		if err != nil && strings.Contains(err.Error(), "status 429") {
			refused.Add(1)
		}
		return err
	})
	row := r.row("", name, baseline)
	row.Note = fmt.Sprintf("argon2id (19 MiB, t=2) per attempt, at most max(2, CPUs) at once; limits 10/account and 100/IP per 15 min: spread over %d accounts, %d source IPs; %d refused (429)",
		accounts, n, refused.Load())
	if r.budgetOut {
		row.Note += "; stopped early: the accounts' login budget was used up"
	}
	return row
}

var errBudget = errors.New("login budget used up")

// ---- deployments ----------------------------------------------------------

const appMain = `package main

import (
	"fmt"
	"net/http"
	"os"
)

func main() {
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") })
	http.HandleFunc("/where", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, os.Getenv("PORT"), " ", os.Getpid()) })
	if err := http.ListenAndServe("127.0.0.1:"+os.Getenv("PORT"), nil); err != nil {
		panic(err)
	}
}
`

// makeRepo commits a trivial Go web app into a new git repository under dir.
func makeRepo(dir string) (string, error) {
	repo := filepath.Join(dir, "app")
	if err := os.MkdirAll(repo, 0o755); err != nil {
		return "", err
	}
	files := map[string]string{"go.mod": "module example.com/app\n\ngo 1.21\n", "main.go": appMain}
	for n, body := range files {
		if err := os.WriteFile(filepath.Join(repo, n), []byte(body), 0o644); err != nil {
			return "", err
		}
	}
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "."},
		{"-c", "user.name=bench", "-c", "user.email=bench@example.com", "commit", "-q", "-m", "app"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = repo
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("git %v: %v: %s", args, err, out)
		}
	}
	return repo, nil
}

type status struct {
	Status        string   `json:"status"`
	ErrorMessage  string   `json:"errorMessage"`
	BuildDuration *float64 `json:"buildDuration"`
	Steps         []struct {
		Name       string     `json:"name"`
		StartedAt  *time.Time `json:"startedAt"`
		FinishedAt *time.Time `json:"finishedAt"`
	} `json:"steps"`
}

func deployAndWait(c *http.Client, base, tok, projectID string, want string) (string, status, time.Duration, error) {
	t0 := time.Now()
	var trig struct{ DeploymentID string }
	if err := call(c, "POST", base+"/deployments", tok, map[string]any{"projectId": projectID}, 201, &trig); err != nil {
		return "", status{}, 0, err
	}
	deadline := t0.Add(5 * time.Minute)
	for {
		var st status
		if err := call(c, "GET", base+"/deployments/"+trig.DeploymentID+"/status", tok, nil, 200, &st); err != nil {
			return trig.DeploymentID, st, 0, err
		}
		if st.Status == want {
			return trig.DeploymentID, st, time.Since(t0), nil
		}
		if st.Status == "FAILED" || st.Status == "CANCELLED" || st.Status == "LIVE" {
			return trig.DeploymentID, st, 0, fmt.Errorf("deployment %s: %s", st.Status, st.ErrorMessage)
		}
		if time.Now().After(deadline) {
			return trig.DeploymentID, st, 0, fmt.Errorf("deployment still %s after 5 minutes", st.Status)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// benchDeploy deploys the trivial app twice (the first warms the server's
// build cache) and compares the second with a plain `go build` (on an equally
// warm cache of its own) plus starting the binary until it answers HTTP.
func benchDeploy(c *http.Client, base, tok, dir string) (liveID, slug string, rows []Row) {
	name := "time POST /deployments -> LIVE minus app build+start"
	repo, err := makeRepo(dir)
	if err != nil {
		return "", "", []Row{{Name: name, NA: err.Error()}}
	}
	var p struct{ ID, Slug string }
	if err := createHello(c, base, tok, repo, &p); err != nil {
		return "", "", []Row{{Name: name, NA: err.Error()}}
	}
	_, _, first, err := deployAndWait(c, base, tok, p.ID, "LIVE")
	if err != nil {
		return "", "", []Row{{Name: name, NA: "first deployment: " + err.Error()}}
	}
	id, st, total, err := deployAndWait(c, base, tok, p.ID, "LIVE")
	if err != nil {
		return "", "", []Row{{Name: name, NA: "second deployment: " + err.Error()}}
	}
	plain, err := plainBuildAndStart(repo, dir)
	if err != nil {
		return id, p.Slug, []Row{{Name: name, NA: "plain build and start: " + err.Error()}}
	}
	var steps []string
	for _, s := range st.Steps {
		if s.StartedAt != nil && s.FinishedAt != nil {
			steps = append(steps, fmt.Sprintf("%s %s", s.Name, s.FinishedAt.Sub(*s.StartedAt).Round(time.Millisecond)))
		}
	}
	return id, p.Slug, []Row{{Name: name, Value: (total - plain).Round(time.Millisecond).String(),
		Note: fmt.Sprintf("POST -> LIVE %s (status polled every 5 ms; first deploy, cold build cache: %s); plain go build + start on a warm cache %s; steps: %s",
			total.Round(time.Millisecond), first.Round(time.Millisecond), plain.Round(time.Millisecond), strings.Join(steps, ", "))}}
}

// createHello creates the hello project from repo into p, serving plain
// HTTP too (httpsRedirect false: the server holds a certificate for it).
func createHello(c *http.Client, base, tok, repo string, p *struct{ ID, Slug string }) error {
	if err := call(c, "POST", base+"/projects", tok, map[string]any{"name": "hello", "repoUrl": repo, "framework": "go", "port": 8080}, 201, p); err != nil {
		return err
	}
	var cur struct {
		Region, PlanName string
		EnvVars          []map[string]any
	}
	if err := get(c, base+"/projects/"+p.ID, tok, 200, &cur); err != nil {
		return err
	}
	return call(c, "PATCH", base+"/projects/"+p.ID+"/settings", tok, map[string]any{
		"region": cur.Region, "planName": cur.PlanName, "envVars": append([]map[string]any{}, cur.EnvVars...), "httpsRedirect": false}, 200, nil)
}

// deployHello deploys the hello app once and answers its slug.
func deployHello(c *http.Client, base, tok, dir string) (string, error) {
	repo, err := makeRepo(dir)
	if err != nil {
		return "", err
	}
	var p struct{ ID, Slug string }
	if err := createHello(c, base, tok, repo, &p); err != nil {
		return "", err
	}
	_, _, _, err = deployAndWait(c, base, tok, p.ID, "LIVE")
	return p.Slug, err
}

// plainBuildAndStart builds the app as the go preset does (once to warm a
// cache, then timed in a fresh clone) and starts it until it answers.
func plainBuildAndStart(repo, dir string) (time.Duration, error) {
	cache := filepath.Join(dir, "plain-cache")
	env := append(os.Environ(), "GOCACHE="+filepath.Join(cache, "go-build"), "GOFLAGS=-modcacherw")
	var d time.Duration
	for i := 0; i < 2; i++ {
		work := filepath.Join(dir, fmt.Sprintf("plain-%d", i))
		if out, err := exec.Command("git", "clone", "-q", repo, work).CombinedOutput(); err != nil {
			return 0, fmt.Errorf("git clone: %v: %s", err, out)
		}
		t0 := time.Now()
		build := exec.Command("go", "build", "-trimpath", "-o", "./.keelson/app", ".")
		build.Dir, build.Env = work, env
		if out, err := build.CombinedOutput(); err != nil {
			return 0, fmt.Errorf("go build: %v: %s", err, out)
		}
		addr := freeAddr()
		_, port, _ := net.SplitHostPort(addr)
		app := exec.Command(filepath.Join(work, ".keelson", "app"))
		app.Env = append(os.Environ(), "PORT="+port)
		if err := app.Start(); err != nil {
			return 0, err
		}
		err := waitHTTP("http://"+addr+"/", 30*time.Second)
		d = time.Since(t0)
		stop(app)
		if err != nil {
			return 0, err
		}
	}
	return d, nil
}

// ---- SSE fan-out ------------------------------------------------------------

// benchFanout opens subs log streams on one deployment whose build command
// waits for a trigger, then writes lines stamped with the time they were
// written; every subscriber records when it reads each line.
func benchFanout(c *http.Client, s *server, tok, self, dir, dbName string, subs int) []Row {
	name := fmt.Sprintf("SSE fan-out, %d subscriber(s)", subs)
	lines, rate := 5000, 0 // 0: as fast as the build can write
	switch {
	case subs >= 10000:
		lines, rate = 100, 20
	case subs >= 1000:
		lines, rate = 500, 100
	case subs >= 100:
		lines, rate = 2000, 1000
	}
	trigger := filepath.Join(dir, fmt.Sprintf("trigger-%d", subs))
	repo := filepath.Join(dir, "app")
	if _, err := os.Stat(repo); err != nil {
		if repo, err = makeRepo(dir); err != nil {
			return []Row{{Name: name, NA: err.Error()}}
		}
	}
	var p struct{ ID string }
	if err := call(c, "POST", s.url+"/projects", tok, map[string]any{"name": fmt.Sprintf("fanout-%d", subs), "repoUrl": repo, "framework": "go", "port": 8080}, 201, &p); err != nil {
		return []Row{{Name: name, NA: err.Error()}}
	}
	build := fmt.Sprintf("%s -emit %s,%d,%d", self, trigger, lines, rate)
	if err := call(c, "PATCH", s.url+"/projects/"+p.ID+"/settings", tok, map[string]any{"region": "local", "planName": "bench",
		"envVars": []any{}, "buildCommand": build}, 200, nil); err != nil {
		return []Row{{Name: name, NA: "settings: " + err.Error()}}
	}
	var trig struct{ DeploymentID string }
	if err := call(c, "POST", s.url+"/deployments", tok, map[string]any{"projectId": p.ID}, 201, &trig); err != nil {
		return []Row{{Name: name, NA: err.Error()}}
	}
	defer call(c, "POST", s.url+"/deployments/"+trig.DeploymentID+"/cancel", tok, nil, 200, nil) //nolint:errcheck

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	results := make([]fanoutResult, subs)
	var ready, wg sync.WaitGroup
	ready.Add(subs)
	url := s.url + "/deployments/" + trig.DeploymentID + "/logs"
	var openErr atomic.Value
	liveBefore := s.liveKiB()
	loops := make([]*epollLoop, runtime.NumCPU())
	for i := range loops {
		l, err := newEpollLoop(&wg)
		if err != nil {
			return []Row{{Name: name, NA: "epoll: " + err.Error()}}
		}
		loops[i] = l
		go l.run(ctx)
	}
	opening := make(chan struct{}, max(1, *flagOpenConc))
	for i := 0; i < subs; i++ {
		wg.Add(1)
		opening <- struct{}{}
		go func() {
			signalled := false
			sub := &subscriber{lines: lines, res: &results[i], ready: func() {
				if !signalled {
					signalled = true
					<-opening
					ready.Done()
				}
			}}
			sub.res.delays = make([]time.Duration, 0, lines)
			err := openSubscriber(ctx, i, url, tok, sub)
			if err == nil {
				if err = loops[i%len(loops)].watch(int32(i), sub); err == nil {
					return // the loop reads it from here on
				}
			}
			sub.res.err = err
			openErr.Store(err.Error())
			sub.ready()
			wg.Done()
		}()
	}
	ready.Wait()
	if e, _ := openErr.Load().(string); e != "" {
		cancel()
		wg.Wait()
		return []Row{{Name: name, NA: "opening streams: " + e}}
	}
	var rows []Row
	if subs >= 1000 {
		r := Row{Name: fmt.Sprintf("server RSS, %d open streams", subs), Value: rss(s.cmd.Process.Pid), Streams: subs}
		if after := s.liveKiB(); liveBefore > 0 && after > 0 {
			r.KiBPerStream = float64(after-liveBefore) / float64(subs)
			r.Note = fmt.Sprintf("%.1f KiB per stream (heap and stacks in use after a GC, %.1f -> %.1f MiB)",
				float64(after-liveBefore)/float64(subs), float64(liveBefore)/1024, float64(after)/1024)
		}
		rows = append(rows, r)
	}
	start := time.Now()
	cpu0, self0 := cpuTime(s.cmd.Process.Pid), cpuTime(os.Getpid())
	perSec := rate
	if perSec == 0 {
		perSec = 1000 // as fast as the build writes: about that
	}
	prof := s.profileFor(dbName, name, time.Duration(lines/perSec)*time.Second) // while the lines are written
	if err := os.WriteFile(trigger, nil, 0o644); err != nil {
		return append(rows, Row{Name: name, NA: err.Error()})
	}
	wg.Wait()
	prof()
	cpu := cpuTime(s.cmd.Process.Pid) - cpu0
	client := cpuTime(os.Getpid()) - self0
	var all []time.Duration
	var last time.Time
	failed := 0
	for _, r := range results {
		all = append(all, r.delays...)
		if r.last.After(last) {
			last = r.last
		}
		if len(r.delays) < lines {
			failed++
		}
	}
	if len(all) == 0 {
		return append(rows, Row{Name: name, NA: "no line was delivered"})
	}
	slices.Sort(all)
	span := last.Sub(start).Seconds()
	offered := "as fast as the build writes"
	if rate > 0 {
		offered = fmt.Sprintf("%d lines/s", rate)
	}
	row := Row{Name: name, LinesPS: float64(len(all)) / span, P50Ms: ms(pct(all, 50)), P99Ms: ms(pct(all, 99)),
		Requests: len(all), Errors: failed, CPUUsPerReq: float64(cpu.Microseconds()) / float64(len(all)),
		Note: fmt.Sprintf("%d lines written at %s to each subscriber; %d of %d deliveries; %d subscriber(s) missed lines; the bench's own CPU (its subscribers) %.1f us per delivered line",
			lines, offered, len(all), lines*subs, failed, float64(client.Microseconds())/float64(len(all)))}
	return append(rows, row)
}

// emit is the build command of the fan-out rows: it waits for the trigger
// file, then writes "bench-line <n> <unix nanoseconds>" lines.
func emit(spec string) error {
	parts := strings.Split(spec, ",")
	if len(parts) != 3 {
		return fmt.Errorf("bad -emit %q", spec)
	}
	lines, _ := strconv.Atoi(parts[1])
	rate, _ := strconv.Atoi(parts[2])
	deadline := time.Now().Add(10 * time.Minute)
	for {
		if _, err := os.Stat(parts[0]); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("no trigger")
		}
		time.Sleep(5 * time.Millisecond)
	}
	w := bufio.NewWriter(os.Stdout)
	start := time.Now()
	for i := 0; i < lines; i++ {
		if rate > 0 {
			if d := time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate))); d > 0 {
				time.Sleep(d)
			}
		}
		fmt.Fprintf(w, "bench-line %d %d\n", i, time.Now().UnixNano())
		w.Flush()
	}
	return nil
}

// ---- load generator ---------------------------------------------------------

type loadResult struct {
	rps       float64
	lat       []time.Duration
	ok, errs  int
	firstErr  string
	budgetOut bool
}

// load runs workers closed-loop for d; each sample is bounded (1M per worker).
func load(workers int, d time.Duration, do func(worker int) error) loadResult {
	var wg sync.WaitGroup
	lats := make([][]time.Duration, workers)
	errs := make([]int, workers)
	var firstErr atomic.Value
	var budget atomic.Bool
	start := time.Now()
	end := start.Add(d)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) && len(lats[w]) < 1<<20 {
				t0 := time.Now()
				err := do(w)
				if errors.Is(err, errBudget) {
					budget.Store(true)
					return
				}
				if err != nil {
					errs[w]++
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				lats[w] = append(lats[w], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	var r loadResult
	for w := range lats {
		r.lat = append(r.lat, lats[w]...)
		r.errs += errs[w]
	}
	r.ok = len(r.lat)
	slices.Sort(r.lat)
	r.rps = float64(r.ok) / elapsed.Seconds()
	r.firstErr, _ = firstErr.Load().(string)
	r.budgetOut = budget.Load()
	return r
}

func (r loadResult) row(db, name string, baseline float64) Row {
	row := Row{DB: db, Name: name, ReqPerS: r.rps, Requests: r.ok, Errors: r.errs}
	if r.ok > 0 {
		row.P50Ms, row.P99Ms = ms(pct(r.lat, 50)), ms(pct(r.lat, 99))
	}
	if baseline > 0 {
		row.Ratio = r.rps / baseline
	}
	if r.firstErr != "" {
		row.Note = "first error: " + r.firstErr
	}
	return row
}

func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	return sorted[min(max(i-1, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// ---- HTTP helpers -----------------------------------------------------------

// newClient is a keep-alive client for loopback; localIP, when set, is the
// source address of its connections (the server's per-IP limits see it).
func newClient(localIP string, conns int) *http.Client {
	d := &net.Dialer{Timeout: 10 * time.Second}
	if localIP != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(localIP)}
	}
	return &http.Client{Timeout: 5 * time.Minute, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, _ := net.SplitHostPort(addr)
			if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
				return nil, fmt.Errorf("bench only talks to loopback, not %s", addr)
			}
			return d.DialContext(ctx, network, addr)
		},
		MaxIdleConns: conns, MaxIdleConnsPerHost: conns, DisableCompression: true,
	}}
}

func get(c *http.Client, url, tok string, want int, out any) error {
	return call(c, "GET", url, tok, nil, want, out)
}

func call(c *http.Client, method, url, tok string, body any, want int, out any) error {
	auth := ""
	if tok != "" {
		auth = "Bearer " + tok
	}
	raw, err := request(c, method, url, auth, body, func(status int) bool { return status == want })
	return decode(raw, err, out)
}

// decode unmarshals raw into out (when out is not nil) unless err is set.
func decode(raw []byte, err error, out any) error {
	if err != nil || out == nil {
		return err
	}
	return json.Unmarshal(raw, out)
}

// request sends body as JSON with the Authorization header auth (none when
// empty), checks the status with ok and returns the answer's body.
func request(c *http.Client, method, url, auth string, body any, ok func(status int) bool) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if !ok(resp.StatusCode) {
		return raw, fmt.Errorf("%s %s: status %d: %.300s", method, url, resp.StatusCode, raw)
	}
	return raw, nil
}

// status200 is the check of a GET that must answer 200.
func status200(status int) bool { return status == http.StatusOK }

func signup(c *http.Client, base, email string) (string, error) {
	const pw = "bench password 1"
	if err := call(c, "POST", base+"/auth/register", "", map[string]any{"email": email, "password": pw, "confirmPassword": pw}, 201, nil); err != nil {
		return "", err
	}
	var tok struct{ AccessToken string }
	err := call(c, "POST", base+"/auth/login", "", map[string]any{"email": email, "password": pw}, 200, &tok)
	return tok.AccessToken, err
}

func hasRoute(c *http.Client, base, method, path string) bool {
	var doc struct {
		Paths map[string]map[string]any `json:"paths"`
	}
	if call(c, "GET", base+"/openapi.json", "", nil, 200, &doc) != nil {
		return false
	}
	_, ok := doc.Paths[path][method]
	return ok
}

func waitHTTP(url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	c := &http.Client{Timeout: time.Second}
	for {
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func serveBaseline(addr string) {
	hello, ctype := []byte("hello, world\n"), "text/plain"
	if *flagServeFile != "" {
		b, err := os.ReadFile(*flagServeFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		hello, ctype = b, "application/json"
	}
	srv := &http.Server{Addr: addr, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", ctype)
		w.Write(hello)
	})}
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// ---- process helpers --------------------------------------------------------

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func stop(cmd *exec.Cmd) {
	if cmd == nil || cmd.Process == nil || cmd.ProcessState != nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// raiseNofile lifts this process's open-file limit to its hard limit (Go does
// this at start too since 1.19; explicit here because the bench needs it).
func raiseNofile() {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil && lim.Cur < lim.Max {
		lim.Cur = lim.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
}

// cpuTime is the CPU time (user + system) pid used so far, from /proc/<pid>/stat.
func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command (which may hold spaces) start after the last ')'.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const hz = 100 // USER_HZ: 100 on every Linux ABI Go supports
	return time.Duration(ut+st) * time.Second / hz
}

// measured runs load against pid's server and answers the row with the
// server's CPU per request.
func measured(pid int, db, name string, baseline float64, run func() loadResult) Row {
	c0 := cpuTime(pid)
	r := run()
	row := r.row(db, name, baseline)
	if r.ok > 0 {
		row.CPUUsPerReq = float64((cpuTime(pid) - c0).Microseconds()) / float64(r.ok)
	}
	return row
}

// rss is VmRSS of pid from /proc.
func rss(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "n/a (" + err.Error() + ")"
	}
	for _, ln := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(ln, "VmRSS:") {
			f := strings.Fields(ln)
			if kb, err := strconv.Atoi(f[1]); err == nil {
				return fmt.Sprintf("%.1f MiB", float64(kb)/1024)
			}
		}
	}
	return "n/a"
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, ln := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(ln, "model name") {
			if _, v, ok := strings.Cut(ln, ":"); ok {
				return strings.TrimSpace(v)
			}
		}
	}
	return runtime.GOARCH
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" || strings.TrimSpace(string(out)) == os.DevNull {
		return "", errors.New("run the bench from inside the keelson module (go run ./examples/bench)")
	}
	return filepath.Dir(strings.TrimSpace(string(out))), nil
}

func printTable(w io.Writer, rep *Report) {
	fmt.Fprintf(w, "Keelson bench: %s, %d CPUs (%s), %s, -duration %s -concurrency %d\n\n",
		rep.Time.Format(time.RFC3339), rep.CPUs, rep.CPUModel, rep.GoVersion, rep.Duration, rep.Concurrency)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "db\tmeasurement\treq/s\tp50 ms\tp99 ms\tvs baseline\tCPU us/req\tlines/s\tvalue\terrors\tnotes")
	f := func(v float64, format string) string {
		if v == 0 {
			return ""
		}
		return fmt.Sprintf(format, v)
	}
	for _, r := range rep.Rows {
		if r.NA != "" {
			fmt.Fprintf(tw, "%s\t%s\tn/a (%s)\t\t\t\t\t\t\t\t\n", r.DB, r.Name, r.NA)
			continue
		}
		errs := ""
		if r.Errors > 0 {
			errs = strconv.Itoa(r.Errors)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.DB, r.Name, f(r.ReqPerS, "%.0f"), f(r.P50Ms, "%.2f"),
			f(r.P99Ms, "%.2f"), f(r.Ratio, "%.3f"), f(r.CPUUsPerReq, "%.0f"), f(r.LinesPS, "%.0f"), r.Value, errs, r.Note)
	}
	tw.Flush()
}

// rawGet answers the body of an authenticated GET url (status 200 required).
func rawGet(c *http.Client, url, tok string) ([]byte, error) {
	return request(c, "GET", url, "Bearer "+tok, nil, status200)
}

var verifyLink = regexp.MustCompile(`verify-email\?token=([A-Za-z0-9_%.~-]+)`)

// verifyFromLog finds the verification link mailed to email in the server's
// log (polled until a deadline: mail is sent in the background) and redeems it.
func verifyFromLog(c *http.Client, base, logPath, email string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(logPath)
		if err != nil {
			return err
		}
		for _, ln := range strings.Split(string(b), "\n") {
			if !strings.Contains(ln, email) {
				continue
			}
			if m := verifyLink.FindStringSubmatch(ln); m != nil {
				tok, err := url.QueryUnescape(m[1])
				if err != nil {
					return err
				}
				return call(c, "POST", base+"/auth/verify-email", "", map[string]any{"token": tok}, 200, nil)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no verification link for %s in %s", email, logPath)
		}
		time.Sleep(50 * time.Millisecond) // polling a file another process writes
	}
}
