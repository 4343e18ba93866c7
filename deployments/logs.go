package deployments

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/keelson-dev/keelson/platform"
)

// LogsConfig tunes Logs. Zero values take the defaults.
type LogsConfig struct {
	Logger *slog.Logger
	// Clock stamps every line. Default platform.SystemClock.
	Clock platform.Clock
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
}

// Defaults of the log caps (operator settings, not plan quotas).
const (
	DefaultMaxBuildLines       = 100_000
	DefaultMaxBuildBytes int64 = 50 << 20
	DefaultMaxAppLines         = 10_000
)

// MaxLineBytes is the longest message stored; longer lines are cut.
const MaxLineBytes = 16 << 10

// Logs stores deployment log lines and fans them out to live streams.
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
type Logs struct {
	store *Store
	log   *slog.Logger
	cfg   LogsConfig

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
}

type logItem struct {
	trim  int // delete all but this many newest app lines of sink's deployment
	line  *LogLine
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

// NewLogs starts the log writer. Call Close when done.
func NewLogs(store *Store, cfg LogsConfig) *Logs {
	cfg.SubscriberBuffer = cmp.Or(cfg.SubscriberBuffer, 32)
	cfg.EndCheckEvery = cmp.Or(cfg.EndCheckEvery, 15*time.Second)
	cfg.QueueSize = cmp.Or(cfg.QueueSize, 8192)
	cfg.BatchSize = cmp.Or(cfg.BatchSize, 500)
	cfg.MaxBuildLines = cmp.Or(cfg.MaxBuildLines, DefaultMaxBuildLines)
	cfg.MaxBuildBytes = cmp.Or(cfg.MaxBuildBytes, DefaultMaxBuildBytes)
	cfg.MaxAppLines = cmp.Or(cfg.MaxAppLines, DefaultMaxAppLines)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = platform.SystemClock{}
	}
	l := &Logs{
		store: store, log: cfg.Logger, cfg: cfg,
		queue:     make(chan logItem, cfg.QueueSize),
		wake:      make(chan struct{}, 1),
		done:      make(chan struct{}),
		sinks:     map[string]*Sink{},
		subs:      map[string]map[*Subscription]struct{}{},
		published: map[string]int64{},
		remote:    map[string]remoteWork{},
	}
	go l.run()
	return l
}

func (l *Logs) now() time.Time { return l.cfg.Clock.Now().UTC().Truncate(time.Microsecond) }

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
	clear(l.published)
	clear(l.remote)
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
	s = &Sink{logs: l, id: deploymentID, stored: seq}
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
	batch := make([]logItem, 0, l.cfg.BatchSize)
	check := time.NewTicker(l.cfg.EndCheckEvery)
	defer check.Stop()
	handle := func(it logItem) {
		if it.line != nil {
			batch = append(batch, it)
			return
		}
		// A marker: everything before it is stored and published first.
		batch = l.write(batch)
		l.mark(it)
	}
	for {
		select {
		case it, ok := <-l.queue:
			if !ok {
				return
			}
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
		case <-l.wake:
			l.catchUpRemote()
		case <-check.C:
			l.checkEnded()
			l.catchUpRemote()
		}
	}
}

// endCheckPage is how many deployment ids one end check reads per query.
const endCheckPage = 500

// checkEnded marks, for catchUpRemote, the deployments with subscribers here
// that are terminal (their streams get the stored lines, then Done) or gone.
func (l *Logs) checkEnded() {
	l.mu.Lock()
	ids := make([]string, 0, len(l.subs))
	for id := range l.subs {
		ids = append(ids, id)
	}
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for len(ids) > 0 {
		page := ids[:min(len(ids), endCheckPage)]
		ids = ids[len(page):]
		st, err := l.store.DeploymentStatuses(ctx, page)
		if err != nil {
			l.log.Warn("check which deployments ended", "err", err)
			return
		}
		l.mu.Lock()
		for _, id := range page {
			status, ok := st[id]
			if ok && !status.Terminal() {
				continue
			}
			w := l.remote[id]
			w.end, w.gone = true, !ok
			l.remote[id] = w
		}
		l.mu.Unlock()
	}
}

func (l *Logs) mark(it logItem) {
	if it.trim > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := l.store.LogTrimApp(ctx, it.sink.id, it.trim); err != nil {
			l.log.Warn("delete old app log lines", "deployment", it.sink.id, "err", err)
		}
		cancel()
	}
	if it.flush != nil {
		close(it.flush)
	}
	if it.end != "" {
		l.publish(it.end, LogEvent{Done: true})
	}
}

// write numbers and stores lines, then publishes them, and returns an empty
// batch to fill next (subscribers keep the published lines). A batch that
// collides with lines another process stored for the same deployment is
// numbered again after them. A batch the database refuses otherwise is
// retried line by line so one bad line cannot lose its neighbours; a line
// that cannot be stored is logged and skipped (its number is reused).
func (l *Logs) write(batch []logItem) []logItem {
	if len(batch) == 0 {
		return batch
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := make(map[*Sink]int64, 1)
	for _, it := range batch {
		if _, ok := base[it.sink]; !ok {
			base[it.sink] = it.sink.stored
		}
	}
	number := func() []LogLine {
		rows := make([]LogLine, len(batch))
		for i, it := range batch {
			it.sink.stored++
			it.line.Seq = it.sink.stored
			rows[i] = *it.line
		}
		return rows
	}
	stored := batch
	err := l.store.LogInsert(ctx, number())
	// Another process stored lines of one of these deployments: number on
	// after them. Each lost race means the other writer stored its lines, so
	// this ends; the context bounds it all the same.
	for err != nil && errors.Is(err, platform.ErrConflict) && ctx.Err() == nil {
		if rerr := l.renumberFrom(ctx, base); rerr != nil {
			break
		}
		err = l.store.LogInsert(ctx, number())
	}
	if err != nil {
		stored = l.writeEach(ctx, batch, base)
	}
	for _, it := range stored {
		it.line.frame = appendLogFrame(nil, it.line)
	}
	// One event per deployment per batch: a channel send per subscriber per
	// batch, not per line, is what lets one producer feed a thousand streams.
	start := 0
	for i := 1; i <= len(stored); i++ {
		if i == len(stored) || stored[i].line.DeploymentID != stored[start].line.DeploymentID {
			group := make([]*LogLine, i-start)
			for j := range group {
				group[j] = stored[start+j].line
			}
			l.publishStored(ctx, group)
			start = i
		}
	}
	return make([]logItem, 0, l.cfg.BatchSize)
}

// renumberFrom sets each sink's counter to its deployment's highest stored
// seq (at least base), so the next numbering follows what others stored.
func (l *Logs) renumberFrom(ctx context.Context, base map[*Sink]int64) error {
	for s, b := range base {
		m, err := l.store.LogMaxSeq(ctx, s.id)
		if err != nil {
			l.log.Error("read deployment log sequence", "deployment", s.id, "err", err)
			return err
		}
		s.stored = max(m, b)
		base[s] = s.stored
	}
	return nil
}

// writeEach stores lines one at a time and returns those stored.
func (l *Logs) writeEach(ctx context.Context, batch []logItem, base map[*Sink]int64) []logItem {
	for s, b := range base {
		s.stored = b
	}
	stored := batch[:0:0]
	for _, it := range batch {
		var err error
		for {
			it.line.Seq = it.sink.stored + 1
			err = l.store.LogInsert(ctx, []LogLine{*it.line})
			if !errors.Is(err, platform.ErrConflict) || ctx.Err() != nil {
				break
			}
			m, rerr := l.store.LogMaxSeq(ctx, it.sink.id)
			if rerr != nil {
				break
			}
			it.sink.stored = max(m, it.sink.stored)
		}
		if err != nil {
			l.log.Error("store deployment log line", "deployment", it.line.DeploymentID, "seq", it.line.Seq, "err", err)
			continue
		}
		it.sink.stored = it.line.Seq
		stored = append(stored, it)
	}
	return stored
}

// publishStored publishes lines this process stored (one deployment, in
// sequence order). Lines another process stored before them and that were not
// published yet are read and published first, so subscribers see no gap.
func (l *Logs) publishStored(ctx context.Context, lines []*LogLine) {
	id := lines[0].DeploymentID
	l.mu.Lock()
	p, known := l.published[id]
	has := len(l.subs[id]) > 0
	l.mu.Unlock()
	if !has {
		return
	}
	if known && lines[0].Seq > p+1 {
		l.fill(ctx, id, p, lines[0].Seq-1)
	}
	l.publishLines(id, lines)
}

// fill reads the deployment's stored lines after seq after (up to upTo when
// upTo > 0) and publishes them.
func (l *Logs) fill(ctx context.Context, id string, after, upTo int64) {
	for {
		rows, err := l.store.LogList(ctx, LogListParams{DeploymentID: id, AfterSeq: after, Limit: l.cfg.BatchSize})
		if err != nil {
			// The streams refill from the database themselves on the next gap or at the end.
			l.log.Warn("read deployment log lines stored elsewhere", "deployment", id, "err", err)
			return
		}
		lines := make([]*LogLine, 0, len(rows))
		for i := range rows {
			if upTo > 0 && rows[i].Seq > upTo {
				break
			}
			rows[i].frame = appendLogFrame(nil, &rows[i])
			lines = append(lines, &rows[i])
		}
		if len(lines) > 0 {
			if !l.publishLines(id, lines) {
				return
			}
			after = lines[len(lines)-1].Seq
		}
		if len(lines) < len(rows) || len(rows) < l.cfg.BatchSize {
			return
		}
	}
}

// publishLines publishes the lines after the deployment's published mark and
// raises the mark. It reports whether the deployment still has subscribers.
func (l *Logs) publishLines(id string, lines []*LogLine) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.subs[id]) == 0 {
		return false
	}
	if p, known := l.published[id]; known {
		for len(lines) > 0 && lines[0].Seq <= p {
			lines = lines[1:]
		}
	}
	if len(lines) == 0 {
		return true
	}
	l.publishLocked(id, LogEvent{Lines: slices.Clip(lines)})
	if len(l.subs[id]) == 0 {
		return false
	}
	l.published[id] = lines[len(lines)-1].Seq
	return true
}

// LinesStored tells l that lines of the deployment up to seq are stored,
// possibly by another process (a Postgres NOTIFY). If the deployment has
// subscribers here, the writer reads the lines after the last one it
// published and publishes them in order. It never blocks.
func (l *Logs) LinesStored(deploymentID string, seq int64) {
	l.mu.Lock()
	if len(l.subs[deploymentID]) == 0 {
		l.mu.Unlock()
		return
	}
	if p, known := l.published[deploymentID]; known && seq <= p {
		l.mu.Unlock()
		return // already published (e.g. this process stored them)
	}
	w := l.remote[deploymentID]
	w.upTo = max(w.upTo, seq)
	l.remote[deploymentID] = w
	l.mu.Unlock()
	l.poke()
}

// DeploymentEnded tells l that the deployment reached a terminal status,
// possibly in another process: its subscribers here get the lines stored so
// far, then Done. It never blocks.
func (l *Logs) DeploymentEnded(deploymentID string) {
	l.mu.Lock()
	if len(l.subs[deploymentID]) == 0 {
		l.mu.Unlock()
		return
	}
	w := l.remote[deploymentID]
	w.end = true
	l.remote[deploymentID] = w
	l.mu.Unlock()
	l.poke()
}

// Resync makes the writer re-read the stored lines of every deployment that
// has subscribers here (for notifications lost while a listener reconnected).
// It never blocks.
func (l *Logs) Resync() {
	l.mu.Lock()
	if len(l.subs) == 0 {
		l.mu.Unlock()
		return
	}
	for id := range l.subs {
		w := l.remote[id]
		w.resync = true
		l.remote[id] = w
	}
	l.mu.Unlock()
	l.poke()
}

func (l *Logs) poke() {
	select {
	case l.wake <- struct{}{}:
	default: // already poked; the writer takes all remote work at once
	}
}

// catchUpRemote does the work LinesStored, DeploymentEnded and Resync queued.
func (l *Logs) catchUpRemote() {
	l.mu.Lock()
	work := l.remote
	l.remote = map[string]remoteWork{}
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for id, w := range work {
		l.catchUp(ctx, id, w)
	}
}

func (l *Logs) catchUp(ctx context.Context, id string, w remoteWork) {
	l.mu.Lock()
	p, known := l.published[id]
	has := len(l.subs[id]) > 0
	l.mu.Unlock()
	if !has {
		return
	}
	switch {
	case known:
		l.fill(ctx, id, p, 0)
	case w.upTo > 0 || w.resync:
		// Nothing published here yet: each stream replayed the table when it
		// subscribed. Publishing the newest line is enough: a stream that
		// finds a gap before it fills it from the table (stream.live), and
		// later lines follow on from this one.
		upTo := w.upTo
		if upTo == 0 {
			m, err := l.store.LogMaxSeq(ctx, id)
			if err != nil {
				l.log.Warn("read deployment log sequence", "deployment", id, "err", err)
				break
			}
			upTo = m
		}
		if upTo > 0 {
			l.fill(ctx, id, upTo-1, 0)
		}
	}
	if w.end {
		l.publish(id, LogEvent{Done: true, Gone: w.gone})
	}
}

func (l *Logs) publish(deploymentID string, ev LogEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.publishLocked(deploymentID, ev)
}

func (l *Logs) publishLocked(deploymentID string, ev LogEvent) {
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
		delete(l.published, deploymentID)
	}
}

// LogEvent is what a Subscription receives: stored lines in sequence order,
// or Done when the deployment reached a terminal status.
type LogEvent struct {
	Lines []*LogLine // read-only, shared between subscribers
	Done  bool
	Gone  bool // with Done: the deployment was deleted
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
			delete(l.published, s.id)
		}
		close(s.ch)
	}
}

// Sink is one deployment's LogSink: it masks secret values, strips bytes a
// database cannot store and queues each line for numbering, storage and
// fan-out. Safe for concurrent use.
type Sink struct {
	logs *Logs
	id   string
	// stored is the last sequence number the writer gave this deployment's
	// lines (or found stored). Only the writer goroutine touches it.
	stored int64

	mu sync.Mutex
	// Output caps: build output counted against MaxBuildLines/Bytes, app
	// lines since the last trim.
	buildLines   int
	buildBytes   int64
	buildDropped bool
	appLines     int
	appTrimmed   bool
	secrets      []string
	masker       *Masker
	tail         []string // last lines of build/app output of the current step
}

var _ LogSink = (*Sink)(nil)

// tailLines is how many output lines a failure message quotes.
const tailLines = 15

// AddSecrets masks each value in every later line (see Masker: values
// shorter than MinSecretLen are not masked).
func (s *Sink) AddSecrets(values ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := false
	for _, v := range values {
		if !slices.Contains(s.secrets, v) {
			s.secrets = append(s.secrets, v)
			changed = true
		}
	}
	if changed {
		s.masker = NewMasker(s.secrets...)
	}
}

// Mask returns text with the sink's secret values replaced by ***.
func (s *Sink) Mask(text string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.masker.Mask(text)
}

// Log stores and streams one line. It waits only when the storage queue is full.
func (s *Sink) Log(stream, line string) {
	s.mu.Lock()
	cfg := &s.logs.cfg
	if stream == StreamBuild && s.buildDropped {
		s.mu.Unlock()
		return // past the cap: dropped before any work
	}
	// Mask before cleaning cuts the line, and again after: removing a NUL
	// or an invalid byte could join the halves of a secret.
	line = cutLine(s.masker.Mask(clean(s.masker.Mask(line))))
	switch stream {
	case StreamBuild:
		if s.buildLines+1 > cfg.MaxBuildLines || s.buildBytes+int64(len(line)) > cfg.MaxBuildBytes {
			s.buildDropped = true
			s.logs.enqueue(logItem{sink: s, line: &LogLine{DeploymentID: s.id, Time: s.logs.now(), Stream: StreamSystem, Message: fmt.Sprintf(
				"build output reached the log cap (%d lines or %d MB per deployment): later build output is not stored", cfg.MaxBuildLines, cfg.MaxBuildBytes>>20)}})
			s.mu.Unlock()
			return
		}
		s.buildLines++
		s.buildBytes += int64(len(line))
	case StreamApp:
		// Trim in steps of a tenth of the cap, not at every line.
		if s.appLines++; s.appLines > cfg.MaxAppLines+max(cfg.MaxAppLines/10, 1) {
			if !s.appTrimmed {
				s.appTrimmed = true
				s.logs.enqueue(logItem{sink: s, line: &LogLine{DeploymentID: s.id, Time: s.logs.now(), Stream: StreamSystem, Message: fmt.Sprintf(
					"app output is over the log cap (the newest %d lines are kept): older app lines are deleted", cfg.MaxAppLines)}})
			}
			s.logs.enqueue(logItem{sink: s, trim: cfg.MaxAppLines})
			s.appLines = cfg.MaxAppLines
		}
	}
	ln := &LogLine{DeploymentID: s.id, Time: s.logs.now(), Stream: stream, Message: line}
	if stream != StreamSystem {
		if len(s.tail) == tailLines {
			s.tail = append(s.tail[:0], s.tail[1:]...)
		}
		s.tail = append(s.tail, line)
	}
	// Enqueue under mu so lines reach the queue (and are numbered) in order.
	s.logs.enqueue(logItem{line: ln, sink: s})
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
// trailing newline (cutLine bounds its length).
func clean(line string) string {
	line = strings.TrimRight(line, "\r\n")
	if !utf8.ValidString(line) {
		line = strings.ToValidUTF8(line, "\uFFFD")
	}
	if strings.IndexByte(line, 0) >= 0 {
		line = strings.ReplaceAll(line, "\x00", "")
	}
	return line
}

// cutLine cuts a line longer than MaxLineBytes (after masking: a cut must
// never leave half a secret).
func cutLine(line string) string {
	if len(line) > MaxLineBytes {
		cut := MaxLineBytes
		for cut > 0 && !utf8.RuneStart(line[cut]) {
			cut--
		}
		line = line[:cut] + " …[line truncated]"
	}
	return line
}
