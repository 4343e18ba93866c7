package mailer

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Queue runs mail jobs (look up the account, store a token, send) off the
// request path, so a request does the same work whether or not an account
// exists and never waits for the mail server. It holds at most size jobs;
// workers goroutines run them between Start and Close.
type Queue struct {
	log     *slog.Logger
	jobs    chan mailJob
	workers int
	timeout time.Duration

	mu      sync.Mutex
	started bool
	closed  bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	pending atomic.Int64 // jobs queued or running
}

type mailJob struct {
	name string
	run  func(ctx context.Context) error
}

// NewQueue holds at most size jobs, run by workers goroutines between Start
// and Close, each for at most timeout.
func NewQueue(log *slog.Logger, size, workers int, timeout time.Duration) *Queue {
	return &Queue{log: log, jobs: make(chan mailJob, size), workers: workers, timeout: timeout}
}

// ErrQueueFull answers Enqueue on a full or closed queue.
var ErrQueueFull = errors.New("mail queue full")

// Enqueue adds a job without waiting. A full or closed queue answers
// ErrQueueFull (the caller answers 503 whatever the account: that reveals
// nothing either).
func (q *Queue) Enqueue(name string, run func(ctx context.Context) error) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return ErrQueueFull
	}
	select {
	case q.jobs <- mailJob{name: name, run: run}:
		q.pending.Add(1)
		return nil
	default:
		return ErrQueueFull
	}
}

// Start launches the workers. Jobs queued before start wait for it.
func (q *Queue) Start() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.started || q.closed {
		return
	}
	q.started = true
	ctx, cancel := context.WithCancel(context.Background())
	q.cancel = cancel
	for range q.workers {
		q.wg.Add(1)
		go func() {
			defer q.wg.Done()
			for j := range q.jobs {
				q.run(ctx, j)
			}
		}()
	}
}

func (q *Queue) run(ctx context.Context, j mailJob) {
	defer q.pending.Add(-1)
	if ctx.Err() != nil {
		q.log.Warn("mail job dropped: shutting down", "job", j.name)
		return
	}
	jctx, cancel := context.WithTimeout(ctx, q.timeout)
	defer cancel()
	if err := j.run(jctx); err != nil {
		// Errors come from the store or the mail server and never hold a token.
		q.log.Error("mail job failed", "job", j.name, "err", err)
	}
}

// Close stops taking jobs, lets the workers finish what is queued until ctx
// ends, then cancels the rest and waits for every worker to return.
func (q *Queue) Close(ctx context.Context) error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil
	}
	q.closed = true
	close(q.jobs)
	started := q.started
	q.mu.Unlock()
	if !started {
		n := 0
		for range q.jobs {
			n++
			q.pending.Add(-1)
		}
		if n > 0 {
			q.log.Warn("mail queue closed before it started; mails dropped", "count", n)
		}
		return nil
	}
	done := make(chan struct{})
	go func() { q.wg.Wait(); close(done) }()
	select {
	case <-done:
		q.cancel()
		return nil
	case <-ctx.Done():
		q.cancel() // running sends end; the rest are cancelled at once
		<-done
		return errors.New("auth: mail queue closed before every mail was sent")
	}
}

// Pending is how many jobs are queued or running.
func (q *Queue) Pending() int64 { return q.pending.Load() }
