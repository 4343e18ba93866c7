package dbtest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/client"
)

// Labels on every container dbtest starts, so a later test binary can find
// the containers of one that was killed before its TestMain could stop them.
const (
	labelOwner     = "dev.keelson.dbtest"       // "1"
	labelHost      = "dev.keelson.dbtest.host"  // os.Hostname of the owning process
	labelPID       = "dev.keelson.dbtest.pid"   // its process ID
	labelPIDStart  = "dev.keelson.dbtest.start" // its start time (/proc/<pid>/stat field 22), against PID reuse
	staleElsewhere = 2 * time.Hour              // age after which another host's container counts as abandoned
)

// ownerLabels are the labels of a container owned by this process.
func ownerLabels() map[string]string {
	host, _ := os.Hostname()
	pid := os.Getpid()
	return map[string]string{
		labelOwner:    "1",
		labelHost:     host,
		labelPID:      strconv.Itoa(pid),
		labelPIDStart: processStart(pid),
	}
}

// processStart returns the start time of process pid in clock ticks since
// boot, or "" when the process does not exist (or /proc is not there).
func processStart(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	if i := bytes.LastIndexByte(b, ')'); i >= 0 {
		b = b[i+1:]
	}
	f := strings.Fields(string(b))
	if len(f) < 20 { // fields 3.. ; starttime is field 22
		return ""
	}
	return f[19]
}

// abandoned reports whether a dbtest container with labels l, created at
// created, belongs to no running test binary: on this host, its owner process
// is gone (or its PID now names another process); from another host sharing
// the daemon, it is older than staleElsewhere.
func abandoned(l map[string]string, created time.Time, now time.Time) bool {
	host, _ := os.Hostname()
	if l[labelHost] != host || l[labelPID] == "" {
		return now.Sub(created) > staleElsewhere
	}
	pid, err := strconv.Atoi(l[labelPID])
	if err != nil || pid <= 0 {
		return now.Sub(created) > staleElsewhere
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil { // no /proc: cannot tell
		return now.Sub(created) > staleElsewhere
	}
	start := processStart(pid)
	return start == "" || start != l[labelPIDStart]
}

// dockerClient is a plain Docker client from the environment (DOCKER_HOST or
// the default socket), used before testcontainers reads its configuration.
func dockerClient() (*client.Client, error) {
	return client.New(client.FromEnv, client.WithAPIVersionNegotiation())
}

// reapAbandoned removes the containers of dbtest binaries that were killed
// (kill -9, a go test -timeout panic) before they could stop them, and
// returns how many it removed.
func reapAbandoned(ctx context.Context) int {
	cli, err := dockerClient()
	if err != nil {
		return 0
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", labelOwner+"=1"),
	})
	if err != nil {
		return 0
	}
	n := 0
	now := time.Now()
	for _, c := range list.Items {
		if !abandoned(c.Labels, time.Unix(c.Created, 0), now) {
			continue
		}
		if _, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err == nil {
			n++
		}
	}
	return n
}

// configureRyuk disables testcontainers' reaper (Ryuk) for this process when
// its image is neither on the machine nor pullable (a machine with no
// registry), instead of failing every container start. dbtest stops its own
// containers in Main and reapAbandoned removes those of killed binaries, so
// nothing is left behind either way. It must run before testcontainers reads
// its configuration (the first testcontainers call of the process), and does
// nothing when TESTCONTAINERS_RYUK_DISABLED is set.
func configureRyuk(ctx context.Context, ryukImage string) {
	if _, set := os.LookupEnv("TESTCONTAINERS_RYUK_DISABLED"); set {
		return
	}
	if p := os.Getenv("TESTCONTAINERS_HUB_IMAGE_NAME_PREFIX"); p != "" {
		ryukImage = strings.TrimSuffix(p, "/") + "/" + ryukImage
	}
	cli, err := dockerClient()
	if err != nil {
		return
	}
	defer cli.Close()
	if _, err := cli.ImageInspect(ctx, ryukImage); err == nil {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	resp, err := cli.ImagePull(pctx, ryukImage, client.ImagePullOptions{})
	if err == nil {
		err = resp.Wait(pctx)
		resp.Close()
	}
	if err == nil {
		return
	}
	os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	report(fmt.Sprintf("Ryuk image %s is not on this machine and cannot be pulled (%s): Ryuk disabled; dbtest removes its own containers",
		ryukImage, firstLine(err.Error())))
}

// reachableHost returns one of hosts on which a TCP connection to port
// succeeds, dialling them all at once, round after round, until ctx ends.
// testcontainers dials the default gateway when it believes it runs inside a
// container (/.dockerenv); where the daemon runs in that same container (as
// on CI machines here), the gateway never answers and published ports answer
// on loopback only, so loopback is tried as well.
func reachableHost(ctx context.Context, hosts []string, port string) (string, error) {
	type result struct {
		host string
		err  error
	}
	var last error
	for {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		results := make(chan result, len(hosts))
		for _, h := range hosts {
			go func() {
				var d net.Dialer
				conn, err := d.DialContext(rctx, "tcp", net.JoinHostPort(h, port))
				if err == nil {
					conn.Close()
				}
				results <- result{h, err}
			}()
		}
		found := ""
		for range hosts {
			r := <-results
			if r.err != nil {
				last = r.err
				continue
			}
			if found == "" {
				found = r.host
				cancel() // the others need not finish their dial
			}
		}
		cancel()
		if found != "" {
			return found, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("port %s answers on none of %v: %w", port, hosts, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
