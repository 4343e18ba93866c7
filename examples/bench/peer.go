package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// The peer: PocketBase v0.39.0 (its examples/base binary, built from the Go
// module proxy; its code is not part of this repository) serving an
// authenticated list of 20 records under an owner rule, measured in the same
// run as Keelson's GET /projects. The bench uses base from $GOBIN or
// $(go env GOPATH)/bin, else installs it into the user's cache dir once
// (go install github.com/pocketbase/pocketbase/examples/base@v0.39.0).

var flagPocketBase = flag.String("pocketbase", "", "PocketBase v0.39.0 binary (go install github.com/pocketbase/pocketbase/examples/base@v0.39.0); default: base in $GOBIN or $(go env GOPATH)/bin, else built into the user cache dir; \"off\" skips the peer")

// pocketBaseVersion is the peer release the bench was written against.
const pocketBaseVersion = "v0.39.0"

// peer is a running PocketBase with a user owning 20 records.
type peer struct {
	cmd   *exec.Cmd
	url   string
	token string // the record owner's auth token
	body  int    // bytes of one list answer
	na    string // why there is no peer
}

// pocketBaseBinary finds the peer's binary, or says why not.
func pocketBaseBinary() (string, string) {
	if *flagPocketBase == "off" {
		return "", "skipped (-pocketbase off)"
	}
	if *flagPocketBase != "" {
		if _, err := os.Stat(*flagPocketBase); err != nil {
			return "", fmt.Sprintf("-pocketbase %s: %v", *flagPocketBase, err)
		}
		return *flagPocketBase, ""
	}
	var dirs []string
	if d := os.Getenv("GOBIN"); d != "" {
		dirs = append(dirs, d)
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for _, d := range filepath.SplitList(strings.TrimSpace(string(out))) {
			dirs = append(dirs, filepath.Join(d, "bin"))
		}
	}
	for _, d := range dirs {
		if p := filepath.Join(d, "base"); isFile(p) {
			return p, ""
		}
	}
	return buildPocketBase()
}

// buildPocketBase installs the peer from the Go module proxy into the user's
// cache (once), as caddyBinary builds Caddy: the bench builds its peers.
func buildPocketBase() (string, string) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err.Error()
	}
	dir := filepath.Join(cache, "keelson", "pocketbase-"+pocketBaseVersion)
	bin := filepath.Join(dir, "base")
	if isFile(bin) {
		return bin, ""
	}
	fmt.Fprintf(os.Stderr, "building PocketBase %s into %s (once)...\n", pocketBaseVersion, dir)
	cmd := exec.Command("go", "install", "github.com/pocketbase/pocketbase/examples/base@"+pocketBaseVersion)
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOWORK=off", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Sprintf("building PocketBase: go install: %v: %.300s", err, out)
	}
	return bin, ""
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// startPeer runs PocketBase (--dev=false) on a fresh data dir under dir and
// seeds it through its REST API: a collection "items" whose list and view
// rules admit only the owner, a user, and 20 records owned by that user.
func startPeer(dir string) *peer {
	bin, na := pocketBaseBinary()
	if na != "" {
		return &peer{na: na}
	}
	data := filepath.Join(dir, "pb_data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		return &peer{na: err.Error()}
	}
	const email, pw = "bench-admin@example.com", "bench password 1"
	if out, err := exec.Command(bin, "superuser", "upsert", email, pw, "--dir", data).CombinedOutput(); err != nil {
		return &peer{na: fmt.Sprintf("%s superuser upsert: %v: %.200s", bin, err, out)}
	}
	addr := freeAddr()
	logf, err := os.Create(filepath.Join(dir, "pocketbase.log"))
	if err != nil {
		return &peer{na: err.Error()}
	}
	cmd := exec.Command(bin, "serve", "--http", addr, "--dir", data, "--dev=false")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return &peer{na: err.Error()}
	}
	p := &peer{cmd: cmd, url: "http://" + addr}
	fail := func(err error) *peer {
		stop(cmd)
		return &peer{na: fmt.Sprintf("PocketBase (log: %s): %v", logf.Name(), err)}
	}
	if err := waitHTTP(p.url+"/api/health", 30*time.Second); err != nil {
		return fail(err)
	}
	c := newClient("", 4)
	var su struct{ Token string }
	if err := pbCall(c, "POST", p.url+"/api/collections/_superusers/auth-with-password", "",
		map[string]any{"identity": email, "password": pw}, &su); err != nil {
		return fail(err)
	}
	owner := "owner = @request.auth.id"
	if err := pbCall(c, "POST", p.url+"/api/collections", su.Token, map[string]any{
		"name": "items", "type": "base",
		"listRule": owner, "viewRule": owner, "createRule": "@request.auth.id != '' && @request.body.owner = @request.auth.id",
		"fields": []map[string]any{
			{"name": "name", "type": "text", "required": true},
			{"name": "repoUrl", "type": "text"},
			{"name": "framework", "type": "text"},
			{"name": "port", "type": "number"},
			{"name": "owner", "type": "relation", "collectionId": "_pb_users_auth_", "maxSelect": 1, "required": true},
			{"name": "created", "type": "autodate", "onCreate": true},
			{"name": "updated", "type": "autodate", "onCreate": true, "onUpdate": true},
		},
	}, nil); err != nil {
		return fail(err)
	}
	const userEmail = "bench-reader@example.com"
	var user struct{ ID string }
	if err := pbCall(c, "POST", p.url+"/api/collections/users/records", "",
		map[string]any{"email": userEmail, "password": pw, "passwordConfirm": pw}, &user); err != nil {
		return fail(err)
	}
	var auth struct{ Token string }
	if err := pbCall(c, "POST", p.url+"/api/collections/users/auth-with-password", "",
		map[string]any{"identity": userEmail, "password": pw}, &auth); err != nil {
		return fail(err)
	}
	p.token = auth.Token
	for i := 0; i < 20; i++ {
		if err := pbCall(c, "POST", p.url+"/api/collections/items/records", p.token, map[string]any{
			"name": fmt.Sprintf("list-%02d", i), "repoUrl": fmt.Sprintf("https://github.com/acme/list-%02d", i),
			"framework": "node", "port": 3000, "owner": user.ID}, nil); err != nil {
			return fail(err)
		}
	}
	// The owner sees its 20 records; nobody else sees any.
	var list struct{ Items []json.RawMessage }
	body, err := pbGet(c, p.listURL(), p.token)
	if err == nil {
		err = json.Unmarshal(body, &list)
	}
	if err != nil || len(list.Items) != 20 {
		return fail(fmt.Errorf("list: %d records, %v", len(list.Items), err))
	}
	p.body = len(body)
	var anon struct{ Items []json.RawMessage }
	if err := pbCall(c, "GET", p.listURL(), "", nil, &anon); err != nil || len(anon.Items) != 0 {
		return fail(fmt.Errorf("anonymous list: %d records, %v (the owner rule must hide them)", len(anon.Items), err))
	}
	return p
}

// listURL is the list the bench measures: 20 records, no total count (the
// same work as GET /projects, which returns no total).
func (p *peer) listURL() string {
	return p.url + "/api/collections/items/records?perPage=20&skipTotal=1"
}

func (p *peer) stop() {
	if p.cmd != nil {
		stop(p.cmd)
	}
}

// pbGet sends an authenticated GET the way a PocketBase client does.
func pbGet(c *http.Client, url, tok string) ([]byte, error) {
	return request(c, "GET", url, tok, nil, status200)
}

// pbCall calls PocketBase's REST API (its tokens go in Authorization as
// they are); any 2xx status is success.
func pbCall(c *http.Client, method, url, tok string, body, out any) error {
	raw, err := request(c, method, url, tok, body, func(status int) bool { return status/100 == 2 })
	return decode(raw, err, out)
}

// peerRow measures the peer's list like GET /projects (same workers, same
// duration, CPU per request from /proc) and notes Keelson's ratio to it.
func peerRow(p *peer, db string, keelson Row, baseline float64) (Row, Row) {
	name := "peer: PocketBase " + pocketBaseVersion + " list of 20 records (owner rule)"
	if p.na != "" {
		return Row{DB: db, Name: name, NA: p.na}, keelson
	}
	n := *flagConcurrency
	c := newClient("", n)
	row := measured(p.cmd.Process.Pid, db, name, baseline, func() loadResult {
		return load(n, *flagDuration, func(int) error { _, err := pbGet(c, p.listURL(), p.token); return err })
	})
	row.Note = joinNotes(fmt.Sprintf("%d-byte body, --dev=false, skipTotal=1", p.body), row.Note)
	if row.ReqPerS > 0 && keelson.ReqPerS > 0 {
		ratio := fmt.Sprintf("Keelson/PocketBase (measured next): %.2fx req/s", keelson.ReqPerS/row.ReqPerS)
		if keelson.CPUUsPerReq > 0 && row.CPUUsPerReq > 0 {
			ratio += fmt.Sprintf(", %.2fx less CPU per request", row.CPUUsPerReq/keelson.CPUUsPerReq)
		}
		keelson.Note = joinNotes(keelson.Note, ratio)
	}
	return row, keelson
}

// joinNotes joins the non-empty parts with "; ".
func joinNotes(parts ...string) string {
	var out []string
	for _, p := range parts {
		if p = strings.Trim(strings.TrimSpace(p), ";"); p != "" {
			out = append(out, strings.TrimSpace(p))
		}
	}
	return strings.Join(out, "; ")
}
