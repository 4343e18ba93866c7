package auth

import (
	"context"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/danielgtaylor/huma/v2/humatest"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/keelson-dev/keelson/platform/secret"
)

var unlimited = Limit{Max: -1}

// quietTB keeps humatest from logging every request (which would dominate the
// measurement).
type quietTB struct{}

func (quietTB) Helper()             {}
func (quietTB) Log(...any)          {}
func (quietTB) Logf(string, ...any) {}

func benchAPI(b *testing.B) (humatest.TestAPI, *Service) {
	b.Helper()
	bdb := dbtest.SQLite(b, sets...)
	sealer, _ := secret.New("bench-seal-key-0123456789abcdef")
	_, api := humatest.New(quietTB{}, platform.APIConfig("bench", "1"))
	svc, err := New(Deps{
		DB: bdb, Sealer: sealer, JWTSecret: testSecret, Logger: slog.New(slog.DiscardHandler), Mailer: &captureMailer{},
		Limits: Limits{LoginPerAccount: unlimited, LoginPerIP: unlimited},
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := svc.Register(api); err != nil {
		b.Fatal(err)
	}
	if _, err := svc.CreateUser(context.Background(), CreateUserParams{Email: "ada@example.com", Password: testPassword}); err != nil {
		b.Fatal(err)
	}
	return api, svc
}

var benchLoginBody = map[string]any{"email": "ada@example.com", "password": testPassword}

// BenchmarkLogin measures password logins per second through the HTTP
// handler (argon2id verify, token issue, refresh-token insert on SQLite),
// with as many clients as PasswordHashConcurrency allows to hash at once.
func BenchmarkLogin(b *testing.B) {
	api, _ := benchAPI(b)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if r := api.Do("POST", "/auth/login", benchLoginBody); r.Code != 200 {
				b.Errorf("login: %d %s", r.Code, r.Body)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "logins/s")
}

// BenchmarkLoginBurst100 fires 100 concurrent logins per iteration and reports
// the peak heap above the idle baseline while they run: the hashing
// semaphore should keep it near PasswordHashConcurrency x 19 MiB, not 100 x.
func BenchmarkLoginBurst100(b *testing.B) {
	api, svc := benchAPI(b)
	b.ReportAllocs()
	var peakAbove uint64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		base := ms.HeapInuse
		stop := make(chan struct{})
		sampled := make(chan uint64)
		go func() { // sample the heap until the burst is over
			var peak uint64
			t := time.NewTicker(2 * time.Millisecond)
			defer t.Stop()
			for {
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				peak = max(peak, m.HeapInuse)
				select {
				case <-stop:
					sampled <- peak
					return
				case <-t.C:
				}
			}
		}()
		b.StartTimer()
		var wg sync.WaitGroup
		for j := 0; j < 100; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if r := api.Do("POST", "/auth/login", benchLoginBody); r.Code != 200 {
					b.Errorf("login: %d %s", r.Code, r.Body)
				}
			}()
		}
		wg.Wait()
		b.StopTimer()
		close(stop)
		if p := <-sampled; p > base {
			peakAbove = max(peakAbove, p-base)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "logins/s")
	b.ReportMetric(float64(peakAbove)/(1<<20), "peak-heap-MiB")
	b.ReportMetric(float64(svc.hasher.Concurrency()), "hash-concurrency")
}

// BenchmarkAuthenticate measures the bearer check every protected request
// runs: JWT verify plus one indexed query for the user and its session (not
// revoked), on SQLite.
func BenchmarkAuthenticate(b *testing.B) {
	_, svc := benchAPI(b)
	u, err := svc.UserByEmail(context.Background(), "ada@example.com")
	if err != nil {
		b.Fatal(err)
	}
	tp, err := svc.IssueTokens(context.Background(), u.ID)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := svc.Authenticate(context.Background(), tp.AccessToken); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoginWithLimits is BenchmarkLogin with the default limits on
// (per-address bucket, known-address check, per-account bucket: the table
// upserts every replica shares), one address per goroutine.
func BenchmarkLoginWithLimits(b *testing.B) {
	bdb := dbtest.SQLite(b, sets...)
	sealer, _ := secret.New("bench-seal-key-0123456789abcdef")
	svc, err := New(Deps{DB: bdb, Sealer: sealer, JWTSecret: testSecret, Logger: slog.New(slog.DiscardHandler), Mailer: &captureMailer{},
		Limits: Limits{LoginPerAccount: Limit{Max: 1 << 30, Per: time.Hour}, LoginPerIP: Limit{Max: 1 << 30, Per: time.Hour}}})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := svc.CreateUser(context.Background(), CreateUserParams{Email: "ada@example.com", Password: testPassword}); err != nil {
		b.Fatal(err)
	}
	var n sync.Mutex
	next := 0
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		n.Lock()
		next++
		ip := "192.0.2." + string(rune('0'+next%10))
		n.Unlock()
		for pb.Next() {
			if _, err := svc.Login(context.Background(), LoginParams{Email: "ada@example.com", Password: testPassword, IP: ip}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "logins/s")
}
