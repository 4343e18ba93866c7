package containertest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// hostileMain is a Go web app that probes its sandbox the way a hostile
// tenant would; each probe answers what it saw. It listens on all
// interfaces (a container's published port reaches it there).
const hostileMain = `package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

var hoard [][]byte

func main() {
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello "+version) })
	http.HandleFunc("/env", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, os.Getenv(r.URL.Query().Get("k"))) })
	http.HandleFunc("/crash", func(w http.ResponseWriter, r *http.Request) { os.Exit(3) })
	// /read?p=path answers the file's bytes or "ERR <error>".
	http.HandleFunc("/read", func(w http.ResponseWriter, r *http.Request) {
		b, err := os.ReadFile(r.URL.Query().Get("p"))
		if err != nil {
			fmt.Fprint(w, "ERR ", err)
			return
		}
		w.Write(b)
	})
	// /ls?p=dir answers the names in dir or "ERR <error>".
	http.HandleFunc("/ls", func(w http.ResponseWriter, r *http.Request) {
		es, err := os.ReadDir(r.URL.Query().Get("p"))
		if err != nil {
			fmt.Fprint(w, "ERR ", err)
			return
		}
		for _, e := range es {
			fmt.Fprintln(w, e.Name())
		}
	})
	// /dial?a=host:port answers "OPEN" or "ERR <error>".
	http.HandleFunc("/dial", func(w http.ResponseWriter, r *http.Request) {
		c, err := net.DialTimeout("tcp", r.URL.Query().Get("a"), 2*time.Second)
		if err != nil {
			fmt.Fprint(w, "ERR ", err)
			return
		}
		c.Close()
		fmt.Fprint(w, "OPEN")
	})
	// /alloc?mb=N touches N MiB and keeps them.
	http.HandleFunc("/alloc", func(w http.ResponseWriter, r *http.Request) {
		var n int
		fmt.Sscan(r.URL.Query().Get("mb"), &n)
		for i := 0; i < n; i++ {
			b := make([]byte, 1<<20)
			for j := range b {
				b[j] = byte(j)
			}
			hoard = append(hoard, b)
		}
		fmt.Fprint(w, "allocated")
	})
	// /gateway answers the default gateway of the container (the host side of its bridge).
	http.HandleFunc("/gateway", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, gateway()) })
	// "app dial host:port..." (a RUN step) prints "OPEN <addr>" or "ERR <addr> <error>"
	// per address and exits; "gateway" in an address is the default gateway.
	if len(os.Args) > 2 && os.Args[1] == "dial" {
		for _, a := range os.Args[2:] {
			a = strings.Replace(a, "gateway", gateway(), 1)
			if c, err := net.DialTimeout("tcp", a, 2*time.Second); err != nil {
				fmt.Println("ERR", a, err)
			} else {
				c.Close()
				fmt.Println("OPEN", a)
			}
		}
		return
	}
	fmt.Println("app starting with token=" + os.Getenv("API_TOKEN"))
	if err := http.ListenAndServe(":"+os.Getenv("PORT"), nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
`

// hostileGateway is the default gateway, from /proc/net/route.
const hostileGateway = `
func gateway() string {
	b, _ := os.ReadFile("/proc/net/route")
	for _, l := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(l)
		if len(f) > 2 && f[1] == "00000000" {
			var x uint32
			fmt.Sscanf(f[2], "%x", &x)
			return fmt.Sprintf("%d.%d.%d.%d", byte(x), byte(x>>8), byte(x>>16), byte(x>>24))
		}
	}
	return ""
}
`

// HostileApp is the files of that app answering "hello <version>" on /.
func HostileApp(version string) map[string]string {
	return map[string]string{
		"go.mod":     "module example.com/hostile\n\ngo 1.21\n",
		"main.go":    hostileMain + hostileGateway,
		"version.go": fmt.Sprintf("package main\n\nconst version = %q\n", version),
	}
}

// HostileBinary builds that app on this machine (a static binary, for
// images FROM scratch that take no toolchain to build) and returns it.
func HostileBinary(t testing.TB) []byte {
	t.Helper()
	dir := t.TempDir()
	for name, text := range HostileApp("bin") {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "build", "-trimpath", "-o", "app", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the hostile app: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "app"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ScratchDockerfile runs the HostileBinary, saved as "app" beside it.
const ScratchDockerfile = "FROM scratch\nCOPY app /app\nENTRYPOINT [\"/app\"]\n"
