package dbtest

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

func TestAbandoned(t *testing.T) {
	now := time.Now()
	host, _ := os.Hostname()

	own := ownerLabels()
	if own[labelPIDStart] == "" {
		t.Skip("no /proc on this machine: ownership is judged by age only")
	}
	if abandoned(own, now.Add(-24*time.Hour), now) {
		t.Error("a container of this live process was judged abandoned")
	}

	// A process that has exited.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := map[string]string{labelOwner: "1", labelHost: host, labelPID: strconv.Itoa(cmd.Process.Pid), labelPIDStart: "1"}
	if !abandoned(dead, now, now) {
		t.Error("a container of an exited process was not judged abandoned")
	}

	// This PID, but another start time: the PID was reused.
	reused := map[string]string{labelOwner: "1", labelHost: host, labelPID: own[labelPID], labelPIDStart: own[labelPIDStart] + "0"}
	if !abandoned(reused, now, now) {
		t.Error("a container whose owner PID was reused was not judged abandoned")
	}

	other := map[string]string{labelOwner: "1", labelHost: host + "-elsewhere", labelPID: "1", labelPIDStart: "1"}
	if abandoned(other, now.Add(-time.Minute), now) {
		t.Error("a fresh container of another host was judged abandoned")
	}
	if !abandoned(other, now.Add(-staleElsewhere-time.Minute), now) {
		t.Error("an old container of another host was not judged abandoned")
	}
}

func TestReachableHostPicksTheAddressThatAnswers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// 192.0.2.1 is TEST-NET-1 (RFC 5737): nothing answers there.
	got, err := reachableHost(ctx, []string{"192.0.2.1", "127.0.0.1"}, port)
	if err != nil || got != "127.0.0.1" {
		t.Fatalf("reachableHost = %q, %v; want 127.0.0.1", got, err)
	}

	ln.Close()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel2()
	if got, err := reachableHost(ctx2, []string{"127.0.0.1"}, port); err == nil {
		t.Fatalf("reachableHost on a closed port = %q, want an error", got)
	}
}
