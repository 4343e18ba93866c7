package deployments_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/danielgtaylor/huma/v2/adapters/humago"
	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/fleet"
	"github.com/keelson-dev/keelson/deployments/internal/deploytest"
	"github.com/keelson-dev/keelson/deployments/local"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/uptrace/bun"
)

// benchDBs runs fn on SQLite and, when available, Postgres.
func benchDBs(b *testing.B, fn func(b *testing.B, newDB func() *bun.DB)) {
	b.Run("sqlite", func(b *testing.B) { fn(b, func() *bun.DB { return dbtest.SQLite(b, sets...) }) })
	b.Run("postgres", func(b *testing.B) { fn(b, func() *bun.DB { return dbtest.Postgres(b, sets...) }) })
}

// BenchmarkLogFanOut: one producer logs b.N lines of a deployment; each of N
// in-process subscribers receives them (the fan-out after storage). lines/s
// is the producer-to-every-subscriber rate; dropped counts subscribers cut off
// for lagging (a real stream then refills from the database).
func BenchmarkLogFanOut(b *testing.B) {
	benchDBs(b, func(b *testing.B, newDB func() *bun.DB) {
		for _, n := range []int{1, 1000} {
			b.Run(fmt.Sprintf("subscribers=%d", n), func(b *testing.B) {
				store := deployments.NewStore(newDB())
				logs := deployments.NewLogs(store, deployments.LogsConfig{})
				defer logs.Close()
				id := platform.NewID()
				sink, err := logs.Sink(context.Background(), id)
				if err != nil {
					b.Fatal(err)
				}
				last := int64(b.N)
				var wg sync.WaitGroup
				var mu sync.Mutex
				dropped := 0
				for range n {
					sub := logs.Subscribe(id)
					wg.Add(1)
					go func() {
						defer wg.Done()
						for ev := range sub.C {
							if n := len(ev.Lines); n > 0 && ev.Lines[n-1].Seq == last {
								sub.Close()
								return
							}
						}
						mu.Lock()
						dropped++
						mu.Unlock()
					}()
				}
				b.ResetTimer()
				start := time.Now()
				for i := range b.N {
					sink.Log(deployments.StreamBuild, "compiling package number "+fmt.Sprint(i)+" of the app")
				}
				wg.Wait()
				el := time.Since(start)
				b.StopTimer()
				b.ReportMetric(float64(b.N)/el.Seconds(), "lines/s")
				b.ReportMetric(float64(dropped), "dropped")
			})
		}
	})
}

// BenchmarkLogStreamSSE: one producer logs b.N lines while N SSE clients
// stream the deployment's logs over real HTTP; each must receive every line,
// then done. lines/s is produced lines per second until the last client got
// done; deliveries/s counts lines delivered across all clients.
func BenchmarkLogStreamSSE(b *testing.B) {
	benchDBs(b, func(b *testing.B, newDB func() *bun.DB) {
		for _, n := range []int{1, 1000} {
			b.Run(fmt.Sprintf("subscribers=%d", n), func(b *testing.B) {
				bdb := newDB()
				rt, projects := deploytest.NewRuntime(), deploytest.NewProjects()
				store := deployments.NewStore(bdb)
				svc, err := deployments.New(deployments.Deps{DB: bdb, Auth: deploytest.Authn{}, Projects: projects, Runtime: rt,
					LogTokenKey: bytes.Repeat([]byte("k"), 32), NewEngine: func(ed deployments.EngineDeps) (deployments.Engine, error) {
						return local.New(local.Config{Store: ed.Store, Activities: ed.Activities})
					}})
				if err != nil {
					b.Fatal(err)
				}
				defer svc.Close(context.Background())
				logs := svc.Logs()
				mux := http.NewServeMux()
				api := humago.New(mux, platform.APIConfig("bench", "1"))
				if err := svc.Register(api); err != nil {
					b.Fatal(err)
				}
				srv := httptest.NewServer(mux)
				defer srv.Close()
				owner := platform.NewID()
				at := time.Now().UTC().Truncate(time.Microsecond)
				d := &deployments.Deployment{ID: platform.NewID(), ProjectID: platform.NewID(), OwnerID: owner, ProjectSlug: "bench",
					Status: deployments.StatusBuilding, Steps: deployments.NewSteps(), Attempt: 1, CreatedAt: at, UpdatedAt: at}
				if _, err := store.DeploymentInsert(context.Background(), d, 0); err != nil {
					b.Fatal(err)
				}
				tr := &http.Transport{MaxIdleConnsPerHost: n}
				defer tr.CloseIdleConnections()
				client := &http.Client{Transport: tr}
				var ready, wg sync.WaitGroup
				var mu sync.Mutex
				var failures []string
				delivered := 0
				for range n {
					ready.Add(1)
					wg.Add(1)
					go func() {
						defer wg.Done()
						req, _ := http.NewRequest("GET", srv.URL+"/deployments/"+d.ID+"/logs", nil)
						req.Header.Set("Authorization", "Bearer "+deploytest.Token(owner))
						res, err := client.Do(req)
						if err != nil {
							mu.Lock()
							failures = append(failures, err.Error())
							mu.Unlock()
							ready.Done()
							return
						}
						defer res.Body.Close()
						rd := bufio.NewReaderSize(res.Body, 64<<10)
						got := 0
						first := true
						for {
							line, err := rd.ReadSlice('\n')
							if err != nil {
								mu.Lock()
								failures = append(failures, "stream ended: "+err.Error())
								mu.Unlock()
								return
							}
							if bytes.HasPrefix(line, []byte(`data: {"type":"log"`)) {
								got++
							} else if bytes.HasPrefix(line, []byte(`data: {"type":"ready"`)) && first {
								first = false
								ready.Done()
							} else if bytes.HasPrefix(line, []byte(`data: {"type":"done"`)) {
								break
							}
						}
						mu.Lock()
						delivered += got
						if got != b.N {
							failures = append(failures, fmt.Sprintf("client got %d of %d lines", got, b.N))
						}
						mu.Unlock()
					}()
				}
				ready.Wait()
				sink, _ := logs.Sink(context.Background(), d.ID)
				b.ResetTimer()
				start := time.Now()
				for i := range b.N {
					sink.Log(deployments.StreamBuild, "compiling package number "+fmt.Sprint(i)+" of the app")
				}
				if err := logs.Flush(context.Background()); err != nil {
					b.Fatal(err)
				}
				d.Status = deployments.StatusLive
				if _, err := store.DeploymentUpdate(context.Background(), d, nil, "status"); err != nil {
					b.Fatal(err)
				}
				logs.End(d.ID)
				wg.Wait()
				el := time.Since(start)
				b.StopTimer()
				if len(failures) > 0 {
					b.Fatalf("%d failures, e.g. %s", len(failures), strings.Join(failures[:1], ""))
				}
				b.ReportMetric(float64(b.N)/el.Seconds(), "lines/s")
				b.ReportMetric(float64(delivered)/el.Seconds(), "deliveries/s")
			})
		}
	})
}

// BenchmarkOrchestrationOverhead: time from trigger to LIVE with a runtime
// whose build, start and route take no time, i.e. what the engine, the
// database writes and the logging add to a deployment.
func BenchmarkOrchestrationOverhead(b *testing.B) {
	benchDBs(b, func(b *testing.B, newDB func() *bun.DB) {
		rt, projects := deploytest.NewRuntime(), deploytest.NewProjects()
		bdb := newDB()
		svc, err := deployments.New(deployments.Deps{DB: bdb, Auth: deploytest.Authn{}, Projects: projects, Runtime: rt,
			LogTokenKey: bytes.Repeat([]byte("k"), 32), NewEngine: func(ed deployments.EngineDeps) (deployments.Engine, error) {
				return local.New(local.Config{Store: ed.Store, Activities: ed.Activities})
			}})
		if err != nil {
			b.Fatal(err)
		}
		if err := svc.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		defer svc.Close(context.Background())
		logs, store := svc.Logs(), deployments.NewStore(bdb)
		owner := platform.NewID()
		pid := projects.Add(deployments.DeploySpec{OwnerID: owner, Slug: "bench", RepoURL: "https://x.test/r.git", Framework: "go"})
		b.ResetTimer()
		for range b.N {
			d, err := svc.Trigger(context.Background(), deployments.TriggerParams{ProjectID: pid, OwnerID: owner})
			if err != nil {
				b.Fatal(err)
			}
			// Subscribe, then read the status: the Done event follows the LIVE
			// write, so either the read sees LIVE or an event comes.
			sub := logs.Subscribe(d.ID)
			for {
				cur, err := store.DeploymentGet(context.Background(), d.ID)
				if err != nil {
					b.Fatal(err)
				}
				if cur.Status == deployments.StatusLive {
					break
				}
				if cur.Status.Terminal() {
					b.Fatalf("ended %s: %s", cur.Status, cur.ErrorMessage)
				}
				if _, ok := <-sub.C; !ok {
					sub = logs.Subscribe(d.ID)
				}
			}
			sub.Close()
		}
	})
}

// BenchmarkLiveHosts is the query each ingress runs every second for its
// remote routes (fleet.Queries.LiveHosts), at 10,000 LIVE deployments on 10 hosts
// among 10,000 ended ones.
//
//	go test -run '^$' -bench BenchmarkLiveHosts ./deployments/
func BenchmarkLiveHosts(b *testing.B) {
	benchDBs(b, func(b *testing.B, newDB func() *bun.DB) {
		bdb := newDB()
		store := fleet.Queries{DB: bdb}
		ctx := context.Background()
		at := time.Now().UTC().Truncate(time.Microsecond)
		rows := make([]*deployments.Deployment, 0, 20000)
		for i := range 20000 {
			st := deployments.StatusLive
			if i%2 == 1 {
				st = deployments.StatusCancelled
			}
			rows = append(rows, &deployments.Deployment{ID: platform.NewID(), ProjectID: platform.NewID(), OwnerID: platform.NewID(),
				ProjectSlug: fmt.Sprintf("app-%05d", i/2), Status: st, Steps: deployments.NewSteps(), Reason: "bench",
				Region: "local", Host: fmt.Sprintf("q/worker/host-%d", i%10), Attempt: 1, CreatedAt: at, UpdatedAt: at})
		}
		for i := 0; i < len(rows); i += 500 {
			if _, err := bdb.NewInsert().Model(rowsOf(rows[i:min(i+500, len(rows))])).Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.ResetTimer()
		for b.Loop() {
			m, err := store.LiveHosts(ctx)
			if err != nil || len(m) != 10000 {
				b.Fatalf("%d routes, %v", len(m), err)
			}
		}
	})
}

func rowsOf(ds []*deployments.Deployment) *[]*deployments.Deployment { return &ds }
