package containertest

import "fmt"

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
	http.HandleFunc("/gateway", func(w http.ResponseWriter, r *http.Request) {
		b, _ := os.ReadFile("/proc/net/route")
		for _, l := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(l)
			if len(f) > 2 && f[1] == "00000000" {
				var x uint32
				fmt.Sscanf(f[2], "%x", &x)
				fmt.Fprintf(w, "%d.%d.%d.%d", byte(x), byte(x>>8), byte(x>>16), byte(x>>24))
				return
			}
		}
	})
	fmt.Println("app starting with token=" + os.Getenv("API_TOKEN"))
	if err := http.ListenAndServe(":"+os.Getenv("PORT"), nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
`

// HostileApp is the files of that app answering "hello <version>" on /.
func HostileApp(version string) map[string]string {
	return map[string]string{
		"go.mod":     "module example.com/hostile\n\ngo 1.21\n",
		"main.go":    hostileMain,
		"version.go": fmt.Sprintf("package main\n\nconst version = %q\n", version),
	}
}
