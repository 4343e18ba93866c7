package deployments

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// LogsConfig tunes Logs. Zero values take the defaults.
type LogsConfig struct {
	Logger *slog.Logger
	// SubscriberBuffer is how many events (each up to BatchSize lines) a live
	// stream may fall behind before it is dropped from the fan-out (it then
	// refills from the database). Default 256.
	SubscriberBuffer int
	// QueueSize bounds lines waiting to be stored; producers wait when it is
	// full (the database is the only thing that can slow a build). Default 8192.
	QueueSize int
	// BatchSize is the most lines stored in one INSERT. Default 500.
	BatchSize int
}

// MaxLineBytes is the longest message stored; longer lines are cut.
const MaxLineBytes = 16 << 10

// Logs stores deployment log lines and fans them out to live streams.
//
// Sinks (one per deployment) mask secrets, number lines and queue them; one
// writer goroutine stores queued lines in batches and only then publishes them
// to subscribers, so a line a client saw can always be found again after a
// reconnect. Publishing never blocks: a subscriber whose buffer is full is
// dropped (Subscription.Lagged) and its stream refills from the database.
type Logs struct {
	store *Store
	log   *slog.Logger
	cfg   LogsConfig

	qmu    sync.RWMutex // guards closed and sends on queue
	closed bool
	queue  chan logItem
	done   chan struct{}

	mu    sync.Mutex
	sinks map[string]*Sink
	subs  map[string]map[*Subscription]struct{}
}

type logItem struct {
	line  *LogLine
	flush chan struct{} // closed once every earlier line is stored and published
	end   string        // publish Done to this deployment's subscribers
}

// NewLogs starts the log writer. Call Close when done.
func NewLogs(store *Store, cfg LogsConfig) *Logs {
	cfg.SubscriberBuffer = cmp.Or(cfg.SubscriberBuffer, 256)
	cfg.QueueSize = cmp.Or(cfg.QueueSize, 8192)
	cfg.BatchSize = cmp.Or(cfg.BatchSize, 500)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	l := &Logs{
		store: store, log: cfg.Logger, cfg: cfg,
		queue: make(chan logItem, cfg.QueueSize),
		done:  make(chan struct{}),
		sinks: map[string]*Sink{},
		subs:  map[string]map[*Subscription]struct{}{},
	}
	go l.run()
	return l
}

// Close stores what is queued, ends every subscription and stops the writer.
// Lines logged after Close are dropped.
func (l *Logs) Close() {
	l.qmu.Lock()
	if l.closed {
		l.qmu.Unlock()
		<-l.done
		return
	}
	l.closed = true
	close(l.queue)
	l.qmu.Unlock()
	<-l.done
	l.mu.Lock()
	for id, subs := range l.subs {
		for s := range subs {
			close(s.ch)
		}
		delete(l.subs, id)
	}
	l.mu.Unlock()
}

// enqueue hands item to the writer; false once closed.
func (l *Logs) enqueue(it logItem) bool {
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
func (l *Logs) Sink(ctx context.Context, deploymentID string) (*Sink, error) {
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
	s = &Sink{logs: l, id: deploymentID, seq: seq, secrets: map[string]bool{}}
	l.sinks[deploymentID] = s
	return s, nil
}

// Forget drops the deployment's sink (after its logs were deleted).
func (l *Logs) Forget(deploymentID string) {
	l.mu.Lock()
	delete(l.sinks, deploymentID)
	l.mu.Unlock()
}

// Flush returns once every line queued before the call is stored and published.
func (l *Logs) Flush(ctx context.Context) error {
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
func (l *Logs) End(deploymentID string) { l.enqueue(logItem{end: deploymentID}) }

func (l *Logs) run() {
	defer close(l.done)
	batch := make([]*LogLine, 0, l.cfg.BatchSize)
	handle := func(it logItem) {
		if it.line != nil {
			batch = append(batch, it.line)
			return
		}
		// A marker: everything before it is stored and published first.
		batch = l.write(batch)
		l.mark(it)
	}
	for it := range l.queue {
		handle(it)
	drain: // take what is already waiting, up to a batch
		for len(batch) < l.cfg.BatchSize {
			select {
			case it, ok := <-l.queue:
				if !ok {
					break drain
				}
				handle(it)
			default:
				break drain
			}
		}
		batch = l.write(batch)
	}
}

func (l *Logs) mark(it logItem) {
	if it.flush != nil {
		close(it.flush)
	}
	if it.end != "" {
		l.publish(it.end, LogEvent{Done: true})
	}
}

// write stores lines, then publishes them, and returns an empty batch to fill
// next (subscribers keep the published one). A batch the database refuses is
// retried line by line so one bad line cannot lose its neighbours.
func (l *Logs) write(lines []*LogLine) []*LogLine {
	if len(lines) == 0 {
		return lines
	}
	rows := make([]LogLine, len(lines))
	for i, ln := range lines {
		rows[i] = *ln
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := l.store.LogInsert(ctx, rows); err != nil {
		for _, r := range rows {
			if err := l.store.LogInsert(ctx, []LogLine{r}); err != nil {
				l.log.Error("store deployment log line", "deployment", r.DeploymentID, "seq", r.Seq, "err", err)
			}
		}
	}
	for _, ln := range lines {
		ln.frame = appendLogFrame(nil, ln)
	}
	// One event per deployment per batch: a channel send per subscriber per
	// batch, not per line, is what lets one producer feed a thousand streams.
	start := 0
	for i := 1; i <= len(lines); i++ {
		if i == len(lines) || lines[i].DeploymentID != lines[start].DeploymentID {
			l.publish(lines[start].DeploymentID, LogEvent{Lines: slices.Clip(lines[start:i])})
			start = i
		}
	}
	return make([]*LogLine, 0, l.cfg.BatchSize)
}

func (l *Logs) publish(deploymentID string, ev LogEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for s := range l.subs[deploymentID] {
		select {
		case s.ch <- ev:
		default:
			// Never block the producer: drop the slow stream; it refills from the database.
			s.lagged = true
			delete(l.subs[deploymentID], s)
			close(s.ch)
		}
	}
	if len(l.subs[deploymentID]) == 0 {
		delete(l.subs, deploymentID)
	}
}

// LogEvent is what a Subscription receives: stored lines in sequence order,
// or Done when the deployment reached a terminal status.
type LogEvent struct {
	Lines []*LogLine // read-only, shared between subscribers
	Done  bool
}

// Subscription receives a deployment's lines as they are stored. C is closed
// when the subscription is dropped for lagging (Lagged), closed, or Logs closes.
type Subscription struct {
	C      <-chan LogEvent
	ch     chan LogEvent
	logs   *Logs
	id     string
	lagged bool // guarded by logs.mu
}

// Subscribe starts receiving the deployment's new lines.
func (l *Logs) Subscribe(deploymentID string) *Subscription {
	ch := make(chan LogEvent, l.cfg.SubscriberBuffer)
	s := &Subscription{C: ch, ch: ch, logs: l, id: deploymentID}
	l.qmu.RLock()
	closed := l.closed
	l.qmu.RUnlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if closed {
		close(ch)
		return s
	}
	if l.subs[deploymentID] == nil {
		l.subs[deploymentID] = map[*Subscription]struct{}{}
	}
	l.subs[deploymentID][s] = struct{}{}
	return s
}

// Lagged reports whether the subscription was dropped because it fell behind.
func (s *Subscription) Lagged() bool {
	s.logs.mu.Lock()
	defer s.logs.mu.Unlock()
	return s.lagged
}

// Close stops the subscription. Idempotent.
func (s *Subscription) Close() {
	l := s.logs
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.subs[s.id][s]; ok {
		delete(l.subs[s.id], s)
		if len(l.subs[s.id]) == 0 {
			delete(l.subs, s.id)
		}
		close(s.ch)
	}
}

// Sink is one deployment's LogSink: it masks secret values, strips bytes a
// database cannot store, numbers each line and queues it for storage and
// fan-out. Safe for concurrent use.
type Sink struct {
	logs *Logs
	id   string

	mu      sync.Mutex
	seq     int64
	secrets map[string]bool
	masker  *strings.Replacer
	tail    []string // last lines of build/app output of the current step
}

var _ LogSink = (*Sink)(nil)

// tailLines is how many output lines a failure message quotes.
const tailLines = 15

// minSecretLen: shorter secret values are not masked (masking "1" everywhere
// would make logs unreadable while hiding nothing).
const minSecretLen = 3

// AddSecrets masks each value (of at least 3 bytes) in every later line.
func (s *Sink) AddSecrets(values ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := false
	for _, v := range values {
		if len(v) >= minSecretLen && !s.secrets[v] {
			s.secrets[v] = true
			changed = true
		}
	}
	if !changed {
		return
	}
	keys := make([]string, 0, len(s.secrets))
	for k := range s.secrets {
		keys = append(keys, k)
	}
	// Longest first, so a secret containing another is masked whole.
	slices.SortFunc(keys, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	pairs := make([]string, 0, 2*len(keys))
	for _, k := range keys {
		pairs = append(pairs, k, "***")
	}
	s.masker = strings.NewReplacer(pairs...)
}

// Mask returns text with the sink's secret values replaced by ***.
func (s *Sink) Mask(text string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maskLocked(text)
}

func (s *Sink) maskLocked(text string) string {
	if s.masker != nil {
		text = s.masker.Replace(text)
	}
	return text
}

// Log stores and streams one line. It waits only when the storage queue is full.
func (s *Sink) Log(stream, line string) {
	line = clean(line)
	s.mu.Lock()
	line = s.maskLocked(line)
	s.seq++
	ln := &LogLine{DeploymentID: s.id, Seq: s.seq, Time: now(), Stream: stream, Message: line}
	if stream != StreamSystem {
		if len(s.tail) == tailLines {
			s.tail = append(s.tail[:0], s.tail[1:]...)
		}
		s.tail = append(s.tail, line)
	}
	// Enqueue under mu so lines reach the queue in sequence order.
	if !s.logs.enqueue(logItem{line: ln}) {
		s.seq--
	}
	s.mu.Unlock()
}

// Systemf logs a line of the system stream.
func (s *Sink) Systemf(format string, a ...any) { s.Log(StreamSystem, fmt.Sprintf(format, a...)) }

// ResetTail forgets the output lines kept for failure messages (a step begins).
func (s *Sink) ResetTail() {
	s.mu.Lock()
	s.tail = s.tail[:0]
	s.mu.Unlock()
}

// Tail returns the last output lines since ResetTail (already masked).
func (s *Sink) Tail() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.tail)
}

// clean makes line storable on both databases: valid UTF-8, no NUL, no
// trailing newline, at most MaxLineBytes.
func clean(line string) string {
	line = strings.TrimRight(line, "\r\n")
	if !utf8.ValidString(line) {
		line = strings.ToValidUTF8(line, "\uFFFD")
	}
	if strings.IndexByte(line, 0) >= 0 {
		line = strings.ReplaceAll(line, "\x00", "")
	}
	if len(line) > MaxLineBytes {
		cut := MaxLineBytes
		for cut > 0 && !utf8.RuneStart(line[cut]) {
			cut--
		}
		line = line[:cut] + " …[line truncated]"
	}
	return line
}
