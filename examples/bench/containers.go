package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The container rows (issue 28, item 4): a prebuilt static binary in an
// image FROM scratch, deployed on a server whose runtime is docker
// (KEELSON_RUNTIME=docker: a reachable engine, and the KEELSON_IMAGE_*
// settings of the environment), against the same binary started by the
// process runtime (build command true, start command ./app) on a server of
// its own. Each is deployed once to warm up, then once more with a changed
// binary (a new commit), timed from POST /deployments to LIVE; docker also
// once more with nothing changed. The split comes from the deployment's log
// lines (their timestamps): fetch, build, create, start, health, route.

var flagContainersOnly = flag.Bool("containers-only", false, "measure only the container time-to-LIVE rows (a prebuilt binary FROM scratch under docker against the process runtime)")

const scratchDockerfile = "FROM scratch\nCOPY app /app\nENTRYPOINT [\"/app\"]\n"

// benchContainers measures the container rows with the server binary bin.
func benchContainers(bin, dir string) (rows []Row, goals []GoalFigure) {
	name := "container time to LIVE, changed binary FROM scratch"
	repo, err := scratchRepo(dir)
	if err != nil {
		return []Row{{Name: name, NA: err.Error()}}, nil
	}
	var proc, dock timedDeploy
	for _, kind := range []string{"process", "docker"} {
		fmt.Fprintf(os.Stderr, "containers: %s runtime...\n", kind)
		d, err := deployScratch(bin, filepath.Join(dir, kind), repo, kind)
		if err != nil {
			rows = append(rows, Row{Name: fmt.Sprintf("%s (%s runtime)", name, kind), NA: err.Error()})
			continue
		}
		if kind == "process" {
			proc = d
		} else {
			dock = d
		}
	}
	if proc.total > 0 {
		rows = append(rows, Row{Name: name + " (process runtime)", Value: ms3(proc.total), Note: proc.split})
	}
	if dock.total == 0 {
		return rows, nil
	}
	r := Row{Name: name + " (docker runtime)", Value: ms3(dock.total), Note: dock.split}
	if proc.total > 0 {
		r.Note = joinNotes(fmt.Sprintf("%s over the process runtime", ms3(dock.total-proc.total)), r.Note)
		goals = append(goals, GoalFigure{Name: "container time to LIVE over the process runtime (changed binary)",
			Figure: ms3(dock.total - proc.total), Target: "<= 1s", Met: dock.total-proc.total <= time.Second})
	}
	rows = append(rows, r, Row{Name: "container time to LIVE, same commit again (docker runtime)", Value: ms3(dock.same), Note: dock.sameSplit})
	return rows, goals
}

func ms3(d time.Duration) string { return d.Round(time.Millisecond).String() }

type timedDeploy struct {
	total, same      time.Duration
	split, sameSplit string
}

// scratchRepo commits the hello app, built static, beside a Dockerfile FROM
// scratch into a new repository under dir.
func scratchRepo(dir string) (string, error) {
	src := filepath.Join(dir, "scratch-src")
	repo := filepath.Join(dir, "scratch-repo")
	for _, d := range []string{src, repo} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", err
		}
	}
	// In a container the app must listen beyond its own loopback.
	files := map[string]string{"go.mod": "module example.com/app\n\ngo 1.21\n",
		"main.go": strings.Replace(appMain, `"127.0.0.1:"+`, `":"+`, 1)}
	for n, body := range files {
		if err := os.WriteFile(filepath.Join(src, n), []byte(body), 0o644); err != nil {
			return "", err
		}
	}
	build := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(repo, "app"), ".")
	build.Dir, build.Env = src, append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=-mod=mod")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the static app: %v: %s", err, out)
	}
	if err := os.WriteFile(filepath.Join(repo, "Dockerfile"), []byte(scratchDockerfile), 0o644); err != nil {
		return "", err
	}
	return repo, gitCommit(repo, true)
}

// gitCommit commits everything in repo (after git init when init).
func gitCommit(repo string, init bool) error {
	steps := [][]string{{"add", "-A"}, {"-c", "user.name=bench", "-c", "user.email=bench@example.com", "commit", "-q", "-m", "app"}}
	if init {
		steps = append([][]string{{"init", "-q", "-b", "main"}}, steps...)
	}
	for _, args := range steps {
		cmd := exec.Command("git", args...)
		cmd.Dir = repo
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %v: %v: %s", args, err, out)
		}
	}
	return nil
}

// deployScratch runs a server with the runtime kind and deploys the app of
// repo on it: warm-up, changed binary (timed), and for docker the same
// commit again (timed).
func deployScratch(bin, dir, repo, kind string) (timedDeploy, error) {
	var d timedDeploy
	s, err := startServer(bin, dir, "", "KEELSON_RUNTIME="+kind)
	if err != nil {
		return d, err
	}
	defer stop(s.cmd)
	c := newClient("", 4)
	users, err := benchAccounts(c, s, dir)
	if err != nil {
		return d, err
	}
	tok := users["reader"]
	project := map[string]any{"name": "scratch-" + kind, "repoUrl": repo, "framework": "docker", "port": 8080}
	if kind == "process" {
		project["framework"] = "go"
	}
	var p struct{ ID string }
	if err := call(c, "POST", s.url+"/projects", tok, project, 201, &p); err != nil {
		return d, err
	}
	if kind == "process" {
		// Its settings: what it has, and the two commands.
		var cur map[string]any
		if err := call(c, "GET", s.url+"/projects/"+p.ID, tok, nil, 200, &cur); err != nil {
			return d, err
		}
		settings := map[string]any{"region": cur["region"], "planName": cur["planName"], "envVars": []any{},
			"buildCommand": "true", "startCommand": "./app"}
		if err := call(c, "PATCH", s.url+"/projects/"+p.ID+"/settings", tok, settings, 200, nil); err != nil {
			return d, err
		}
	}
	// The project goes when the row is done: its containers and images
	// with it (the engine outlives the bench).
	defer deleteProject(c, s.url, tok, p.ID)
	if _, _, _, err := deployAndWait(c, s.url, tok, p.ID, "LIVE"); err != nil {
		return d, fmt.Errorf("warm-up deployment: %w", err)
	}
	// A changed binary: the same program with bytes appended, committed.
	f, err := os.OpenFile(filepath.Join(repo, "app"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return d, err
	}
	_, err = fmt.Fprintf(f, "%s %d", kind, time.Now().UnixNano())
	f.Close()
	if err == nil {
		err = gitCommit(repo, false)
	}
	if err != nil {
		return d, err
	}
	t0 := time.Now()
	id, _, total, err := deployAndWait(c, s.url, tok, p.ID, "LIVE")
	if err != nil {
		return d, fmt.Errorf("changed-binary deployment: %w", err)
	}
	d.total, d.split = total, logSplit(c, s.url, tok, id, t0, total)
	if kind == "docker" {
		t0 = time.Now()
		id, _, same, err := deployAndWait(c, s.url, tok, p.ID, "LIVE")
		if err != nil {
			return d, fmt.Errorf("same-commit deployment: %w", err)
		}
		d.same, d.sameSplit = same, logSplit(c, s.url, tok, id, t0, same)
	}
	return d, nil
}

// splitMarks are the log lines that begin each part of a deployment, in
// order (docker's and the process runtime's wording).
var splitMarks = []struct{ part, prefix string }{
	{"fetch", "fetching "},
	{"build", "building the image"}, {"build", "running build command"}, {"build", "no build command"},
	{"create", "image built in"}, {"create", "nothing changed since"}, {"create", "build finished in"},
	{"start", "starting the app's container"}, {"start", "starting app:"},
	{"health", "the app's container started"},
	{"route", "app answers HTTP on"},
}

// logSplit reads the deployment's log (the stream ends at LIVE) and answers
// how long each part took, from the first line of one part to the first of
// the next; route runs until LIVE was seen (t0 + total).
func logSplit(c *http.Client, base, tok, id string, t0 time.Time, total time.Duration) string {
	req, _ := http.NewRequest("GET", base+"/deployments/"+id+"/logs", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	res, err := c.Do(req)
	if err != nil {
		return "log: " + err.Error()
	}
	defer res.Body.Close()
	var parts []string
	var at []time.Time
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Type, Stream, Message string
			Timestamp             time.Time
		}
		if json.Unmarshal([]byte(data), &ev) != nil || ev.Type == "done" || ev.Type == "error" {
			break
		}
		if ev.Type != "log" || ev.Stream != "system" {
			continue
		}
		for _, m := range splitMarks {
			if strings.HasPrefix(ev.Message, m.prefix) && (len(parts) == 0 || parts[len(parts)-1] != m.part) {
				parts, at = append(parts, m.part), append(at, ev.Timestamp)
			}
		}
	}
	if len(at) == 0 {
		return "no log lines to split by"
	}
	out := []string{"queue " + ms3(at[0].Sub(t0))}
	for i, p := range parts {
		end := t0.Add(total)
		if i+1 < len(at) {
			end = at[i+1]
		}
		out = append(out, p+" "+ms3(end.Sub(at[i])))
	}
	return strings.Join(out, ", ")
}

// deleteProject deletes a project and waits (up to a minute) until its
// deletion, which removes its containers and images, is done.
func deleteProject(c *http.Client, base, tok, id string) {
	if err := call(c, "DELETE", base+"/projects/"+id, tok, nil, 202, nil); err != nil {
		fmt.Fprintln(os.Stderr, "bench: deleting the project:", err)
		return
	}
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		var st struct{ Status string }
		if err := call(c, "GET", base+"/projects/"+id+"/delete-status", tok, nil, 200, &st); err != nil || st.Status == "DELETED" || st.Status == "FAILED" {
			return
		}
		time.Sleep(100 * time.Millisecond) // polling the deletion's status
	}
}
