package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform/platformtest"
)

var serverBinary struct {
	once sync.Once
	path string
	err  error
}

// buildServer compiles this command once per test binary.
func buildServer(t *testing.T) string {
	t.Helper()
	serverBinary.once.Do(func() {
		dir, err := os.MkdirTemp("", "keelson-bin-")
		if err != nil {
			serverBinary.err = err
			return
		}
		serverBinary.path = filepath.Join(dir, "keelson")
		out, err := exec.Command("go", "build", "-o", serverBinary.path, ".").CombinedOutput()
		if err != nil {
			serverBinary.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if serverBinary.err != nil {
		t.Fatal(serverBinary.err)
	}
	return serverBinary.path
}

// freeAddr is a loopback address for a server binary the test starts, and
// may kill and start again on the same address: a port the kernel hands to
// no other listener or connection meanwhile (platformtest.StablePort), and
// none freeAddr gave before in this binary.
func freeAddr(t *testing.T) string {
	t.Helper()
	for {
		port, err := platformtest.StablePort()
		if err != nil {
			t.Fatal(err)
		}
		if _, taken := givenPorts.LoadOrStore(port, true); !taken {
			return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		}
	}
}

// givenPorts are the ports freeAddr gave.
var givenPorts sync.Map

// proc is the reference server running as a real child process.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	logs *platformtest.SyncBuffer
}

func startProc(t *testing.T, bin string, env []string) *proc {
	t.Helper()
	return startCmd(t, exec.Command(bin), env)
}

// startCmd starts cmd (the server binary, maybe behind nsenter) with env
// added to this process' environment.
func startCmd(t *testing.T, cmd *exec.Cmd, env []string) *proc {
	t.Helper()
	p := &proc{cmd: cmd, done: make(chan struct{}), logs: &platformtest.SyncBuffer{}}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.stop() })
	return p
}

// stop shuts the server down as an operator would (SIGTERM: it stops its
// builds and apps), so nothing it started outlives the test; SIGKILL if it
// does not exit within a minute.
func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(time.Minute)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		p.kill()
	}
}

func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// A deployment whose server is SIGKILLed mid-build (no shutdown code runs at
// all) resumes when the server starts again, and its app goes live.
func TestDeploymentSurvivesServerKill(t *testing.T) {
	t.Parallel()
	bin := buildServer(t)
	data := testDataDir(t)
	api, ingress := freeAddr(t), freeAddr(t)
	env := []string{
		"KEELSON_ADDR=" + api, "KEELSON_INGRESS_ADDR=" + ingress, "KEELSON_DATA_DIR=" + data,
		"KEELSON_ALLOW_LOCAL_REPOS=true", "KEELSON_DATABASE_URL=",
		"KEELSON_JWT_SECRET=", "KEELSON_SECRET_KEY=", "KEELSON_ENGINE=local", "KEELSON_RUNTIME=process",
	}
	srv := startProc(t, bin, env)
	ts := &testServer{URL: "http://" + api, Client: &http.Client{Timeout: 30 * time.Second}}
	platformtest.Eventually(t, time.Minute, "the server to answer /healthz", func() bool {
		resp, err := http.Get(ts.URL + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})

	alice := ts.signup(t, "alice@example.com")
	p, gate := gatedGoProject(t, ts, alice, "Killed Build", "after-kill")
	var tr struct {
		DeploymentID string `json:"deploymentId"`
	}
	ts.doJSON(t, http.StatusCreated, "POST", "/deployments", alice, map[string]any{"projectId": p.ID}, &tr)
	platformtest.Eventually(t, 2*time.Minute, "the build to wait at the gate", func() bool {
		return strings.Contains(strings.Join(sseLines(t, ts, alice, tr.DeploymentID, 2*time.Second), "\n"), "waiting for the gate")
	})
	var st e2eStatus
	ts.doJSON(t, http.StatusOK, "GET", "/deployments/"+tr.DeploymentID+"/status", alice, nil, &st)
	if st.Status != "BUILDING" {
		t.Fatalf("before the kill: %s", st.Status)
	}

	srv.kill() // SIGKILL: no deferred code, no graceful shutdown
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	srv2 := startProc(t, bin, env)
	platformtest.Eventually(t, time.Minute, "the restarted server to answer /healthz", func() bool {
		resp, err := http.Get(ts.URL + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})
	st, _ = waitDeployment(t, ts, alice, tr.DeploymentID)
	if st.Status != "LIVE" {
		t.Fatalf("after restart: %s %q\n%s", st.Status, st.ErrorMessage, srv2.logs.String())
	}
	logs := strings.Join(sseLines(t, ts, alice, tr.DeploymentID, 30*time.Second), "\n")
	if !strings.Contains(logs, "server restarted during BUILD") {
		t.Fatalf("the log does not say the server restarted:\n%s", logs)
	}
	// The app answers through the restarted server's ingress.
	req, _ := http.NewRequest("GET", "http://"+ingress+"/", nil)
	req.Host = p.Slug + ".localhost"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "version after-kill" {
		t.Fatalf("app answered %d %q", resp.StatusCode, body)
	}
}

// sseLines reads the deployment's log stream for at most d (or until done)
// and returns the log messages it carried.
func sseLines(t *testing.T, ts *testServer, token, id string, d time.Duration) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+"/deployments/"+id+"/logs", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev struct{ Type, Message string }
		if json.Unmarshal([]byte(line), &ev) != nil {
			t.Fatalf("bad event %q", line)
		}
		if ev.Type == "log" {
			out = append(out, ev.Message)
		}
		if ev.Type == "done" {
			break
		}
	}
	return out
}
