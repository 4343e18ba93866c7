package logstream

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/keelson-dev/keelson/platform"
)

// Config tunes a Hub. Zero values take the defaults.
type Config struct {
	Logger *slog.Logger
	// Clock stamps every line. Default platform.SystemClock.
	Clock platform.Clock
	// Metrics is told how many lines are stored. Optional.
	Metrics Metrics
	// SubscriberBuffer is how many events (each up to BatchSize lines) a live
	// stream may fall behind before it is dropped from the fan-out (it then
	// refills from the database). Default 32 (an event carries up to
	// BatchSize lines; a smaller buffer keeps an idle stream light).
	SubscriberBuffer int
	// EndCheckEvery is how often the writer asks the database, in one query
	// for all of them, which deployments with streams here ended or were
	// deleted without this process being told (an engine elsewhere, a lost
	// notification), and ends those streams. Default 15s. Streams themselves
	// never query on their heartbeat.
	EndCheckEvery time.Duration
	// QueueSize bounds lines waiting to be stored; producers wait when it is
	// full (the database is the only thing that can slow a build). Default 8192.
	QueueSize int
	// BatchSize is the most lines stored in one INSERT. Default 500.
	BatchSize int
	// MaxBuildLines and MaxBuildBytes cap the build output stored per
	// deployment (each step's output counts; system lines do not); past
	// either, one system line says so and later build output is dropped.
	// Defaults DefaultMaxBuildLines, DefaultMaxBuildBytes.
	MaxBuildLines int
	MaxBuildBytes int64
	// MaxAppLines is how many of a deployment's newest app output lines are
	// kept: older ones are deleted as new ones arrive (a system line says so
	// once). Default DefaultMaxAppLines.
	MaxAppLines int
	// AccountBudget is how many bytes of log messages one account's
	// deployments may keep together; past it the logs of the account's
	// oldest ended deployments are deleted (see budget.go: never those
	// of a LIVE deployment or of one still in its workflow). Default
	// DefaultAccountLogBudget; negative: no budget.
	AccountBudget int64
	// BudgetCheckEvery is how often at most the accounts whose deployments
	// stored lines are checked against AccountBudget. Default 10s.
	BudgetCheckEvery time.Duration
}

// Defaults of the log caps (operator settings, not plan quotas).
const (
	DefaultMaxBuildLines       = 100_000
	DefaultMaxBuildBytes int64 = 50 << 20
	DefaultMaxAppLines         = 10_000
)

// MaxLineBytes is the longest message stored; longer lines are cut.
const MaxLineBytes = 16 << 10

// Hub stores deployment log lines and fans them out to live streams.
//
// Sinks (one per deployment) mask secrets and queue lines; one writer
// goroutine numbers queued lines, stores them in batches and only then
// publishes them to subscribers, so a line a client saw can always be found
// again after a reconnect. Publishing never blocks: a subscriber whose buffer
// is full is dropped (Subscription.Lagged) and its stream refills from the
// database.
//
// Several processes may write and read the same deployment's lines (API
// replicas and workers on one Postgres database). Numbering stays unique: a
// batch that collides with lines another process stored is numbered again
// after them. Lines stored elsewhere reach this process's subscribers through
// LinesStored (a Postgres NOTIFY, see deployments/pgnotify): the writer reads
// them from the table and publishes them in sequence order, filling any gap
// before a local line, so each deployment's subscribers see increasing,
// gap-free sequence numbers (stored holes aside) without repeats.
type Hub struct {
	store Store
	log   *slog.Logger
	cfg   Config

	qmu    sync.RWMutex // guards closed and sends on queue
	closed bool
	queue  chan logItem
	wake   chan struct{} // buffered 1: remote work is waiting (LinesStored, DeploymentEnded, Resync)
	done   chan struct{}

	mu    sync.Mutex
	sinks map[string]*Sink
	subs  map[string]map[*Subscription]struct{}
	// published is, per deployment that has subscribers, the highest
	// sequence number published to them. Only the writer raises it.
	published map[string]int64
	remote    map[string]remoteWork // what other processes reported, for the writer
	scratch   []*Subscription       // fanOut's list, reused
	// passID is the deployment a pass is writing to without l.mu ("" none,
	// pass.go); the channels of its subscriptions closed meanwhile are
	// closed once the pass is done (closeAfterPass).
	passID         string
	closeAfterPass []*Subscription

	// The writer goroutine's own (pass.go): lines that joined a pass late,
	// lines stored during a fan-out and published after it, a marker taken
	// meanwhile, the queue closed.
	owed      *owedLines
	stash     []logItem
	held      *logItem
	queueDone bool

	// The account log budget (logs_budget.go): deployments whose lines were
	// stored since the last check, and the goroutine checking their accounts.
	bmu        sync.Mutex
	grown      map[string]struct{}
	budgetWake chan struct{} // buffered 1
	budgetStop context.CancelFunc
	budgetDone chan struct{}
}

type logItem struct {
	trim  int // delete all but this many newest app lines of sink's deployment
	line  *Line
	sink  *Sink         // the line's sink (numbers it)
	flush chan struct{} // closed once every earlier line is stored and published
	end   string        // publish Done to this deployment's subscribers
}

// remoteWork is what the writer owes a deployment's subscribers on behalf of
// other processes.
type remoteWork struct {
	upTo   int64 // lines up to this seq are stored
	end    bool  // the deployment reached a terminal status
	gone   bool  // the deployment no longer exists
	resync bool  // re-read whatever is stored (a notification may have been lost)
}

// and returns w with o's work added to it.
func (w remoteWork) and(o remoteWork) remoteWork {
	return remoteWork{upTo: max(w.upTo, o.upTo), end: w.end || o.end, gone: w.gone || o.gone, resync: w.resync || o.resync}
}

// New starts the log writer. Call Close when done.
func New(store Store, cfg Config) *Hub {
	cfg.SubscriberBuffer = cmp.Or(cfg.SubscriberBuffer, 32)
	cfg.EndCheckEvery = cmp.Or(cfg.EndCheckEvery, 15*time.Second)
	cfg.QueueSize = cmp.Or(cfg.QueueSize, 8192)
	cfg.BatchSize = cmp.Or(cfg.BatchSize, 500)
	cfg.MaxBuildLines = cmp.Or(cfg.MaxBuildLines, DefaultMaxBuildLines)
	cfg.MaxBuildBytes = cmp.Or(cfg.MaxBuildBytes, DefaultMaxBuildBytes)
	cfg.MaxAppLines = cmp.Or(cfg.MaxAppLines, DefaultMaxAppLines)
	cfg.AccountBudget = cmp.Or(cfg.AccountBudget, DefaultAccountLogBudget)
	cfg.BudgetCheckEvery = cmp.Or(cfg.BudgetCheckEvery, 10*time.Second)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = platform.SystemClock{}
	}
	if cfg.Metrics == nil {
		cfg.Metrics = noMetrics{}
	}
	l := &Hub{
		store: store, log: cfg.Logger, cfg: cfg,
		queue:      make(chan logItem, cfg.QueueSize),
		wake:       make(chan struct{}, 1),
		done:       make(chan struct{}),
		sinks:      map[string]*Sink{},
		subs:       map[string]map[*Subscription]struct{}{},
		published:  map[string]int64{},
		remote:     map[string]remoteWork{},
		grown:      map[string]struct{}{},
		budgetWake: make(chan struct{}, 1),
		budgetDone: make(chan struct{}),
	}
	go l.run()
	ctx, stop := context.WithCancel(context.Background())
	l.budgetStop = stop
	if cfg.AccountBudget >= 0 {
		go l.runBudget(ctx)
	} else {
		close(l.budgetDone)
	}
	return l
}

func (l *Hub) now() time.Time { return l.cfg.Clock.Now().UTC().Truncate(time.Microsecond) }

// Close stores what is queued, ends every subscription and stops the writer
// and the budget checks. Lines logged after Close are dropped.
func (l *Hub) Close() {
	l.qmu.Lock()
	if l.closed {
		l.qmu.Unlock()
		<-l.done
		<-l.budgetDone
		return
	}
	l.closed = true
	close(l.queue)
	l.qmu.Unlock()
	<-l.done
	l.budgetStop()
	<-l.budgetDone
	l.mu.Lock()
	for id, subs := range l.subs {
		for s := range subs {
			close(s.ch)
		}
		delete(l.subs, id)
	}
	clear(l.published)
	clear(l.remote)
	l.mu.Unlock()
}

// enqueue hands item to the writer; false once closed.
func (l *Hub) enqueue(it logItem) bool {
	l.qmu.RLock()
	defer l.qmu.RUnlock()
	if l.closed {
		return false
	}
	l.queue <- it
	return true
}

// Sink returns the deployment's sink, creating it (numbering on from the last
// stored line) on first use.
func (l *Hub) Sink(ctx context.Context, deploymentID string) (*Sink, error) {
	l.mu.Lock()
	s := l.sinks[deploymentID]
	l.mu.Unlock()
	if s != nil {
		return s, nil
	}
	seq, err := l.store.LogMaxSeq(ctx, deploymentID)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := l.sinks[deploymentID]; s != nil {
		return s, nil
	}
	s = &Sink{logs: l, id: deploymentID, stored: seq}
	l.sinks[deploymentID] = s
	return s, nil
}

// Forget drops the deployment's sink (after its logs were deleted).
func (l *Hub) Forget(deploymentID string) {
	l.mu.Lock()
	delete(l.sinks, deploymentID)
	l.mu.Unlock()
}

// Flush returns once every line queued before the call is stored and published.
func (l *Hub) Flush(ctx context.Context) error {
	ch := make(chan struct{})
	if !l.enqueue(logItem{flush: ch}) {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// End tells the deployment's live streams, after every line queued so far,
// that the deployment reached a terminal status.
func (l *Hub) End(deploymentID string) { l.enqueue(logItem{end: deploymentID}) }
