package logstream

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"

	"github.com/keelson-dev/keelson/platform"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// memStore keeps one process's log lines in memory.
type memStore struct {
	mu    sync.Mutex
	lines map[string][]Line
}

func newMemStore() *memStore { return &memStore{lines: map[string][]Line{}} }

func (m *memStore) LogInsert(_ context.Context, lines []Line) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, ln := range lines {
		have := m.lines[ln.DeploymentID]
		if len(have) > 0 && have[len(have)-1].Seq >= ln.Seq {
			return platform.ErrConflict
		}
		m.lines[ln.DeploymentID] = append(have, ln)
	}
	return nil
}

func (m *memStore) LogList(_ context.Context, p ListParams) ([]Line, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Line
	for _, ln := range m.lines[p.DeploymentID] {
		if ln.Seq > p.AfterSeq && len(out) < p.Limit {
			out = append(out, ln)
		}
	}
	return out, nil
}

func (m *memStore) LogMaxSeq(_ context.Context, id string) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if have := m.lines[id]; len(have) > 0 {
		return have[len(have)-1].Seq, nil
	}
	return 0, nil
}

func (m *memStore) LogTrimApp(context.Context, string, int) error { return nil }
func (m *memStore) DeploymentsEnded(_ context.Context, ids []string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, id := range ids {
		out[id] = false
	}
	return out, nil
}
func (m *memStore) LogOwnersOf(context.Context, []string) ([]string, error) { return nil, nil }
func (m *memStore) LogPruneOwner(context.Context, string, int64, string) ([]string, error) {
	return nil, nil
}

// received drains sub's channel and answers the sequence numbers of the
// lines it got, in order, and how many events carried them.
func received(sub *Subscription) (seqs []int64, events int) {
	for {
		select {
		case ev, ok := <-sub.C:
			if !ok {
				return seqs, events
			}
			events++
			for _, ln := range ev.Lines {
				seqs = append(seqs, ln.Seq)
			}
		default:
			return seqs, events
		}
	}
}

func seqsTo(n int64) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(i) + 1
	}
	return out
}

// TestPassTakesInLinesStoredMeanwhile: lines queued while a fan-out to many
// subscribers runs are stored and go out in the same fan-out, to the
// subscribers it had not reached yet in the same event; every subscriber
// gets every line once, in order.
func TestPassTakesInLinesStoredMeanwhile(t *testing.T) {
	// The writer's side, driven by hand: no writer goroutine.
	l := &Hub{store: newMemStore(), log: slog.New(slog.DiscardHandler),
		cfg: Config{BatchSize: 500, SubscriberBuffer: 8, AccountBudget: -1, Metrics: noMetrics{}, Clock: platform.SystemClock{},
			MaxBuildLines: DefaultMaxBuildLines, MaxBuildBytes: DefaultMaxBuildBytes},
		queue: make(chan logItem, 64), subs: map[string]map[*Subscription]struct{}{}, published: map[string]int64{}}
	const subscribers = 20000
	subs := make([]*Subscription, subscribers)
	for i := range subs {
		subs[i] = l.Subscribe("d")
	}
	sink := &Sink{logs: l, id: "d"}
	first := l.storeBatch([]logItem{{sink: sink, line: &Line{DeploymentID: "d", Message: "first"}}})
	for i := range 5 {
		sink.Log("build", fmt.Sprintf("line %d", i)) // queued before the fan-out starts
	}
	l.publishItems(first)
	l.afterFanOut()

	assert.Equal(t, int64(6), l.published["d"], "the queued lines were published with the first")
	whole := 0
	for i, sub := range subs {
		seqs, events := received(sub)
		require.Equal(t, seqsTo(6), seqs, "subscriber %d: every line once, in order", i)
		if events == 1 {
			whole++
		}
	}
	// How many depends on when the writer ran; the first runs of
	// subscribers are written before the queued lines are stored.
	assert.Positive(t, whole, "subscribers the fan-out had not reached got the lines stored meanwhile in the same event as the first")
}

// TestPassesKeepOrderUnderLoad: many subscribers, lines logged as fast as
// the writer takes them (with a Flush now and then, which a fan-out must
// not overtake): every subscriber gets every line once, in order.
func TestPassesKeepOrderUnderLoad(t *testing.T) {
	l := New(newMemStore(), Config{SubscriberBuffer: 4096, AccountBudget: -1})
	defer l.Close()
	const subscribers, lines = 600, 3000
	subs := make([]*Subscription, subscribers)
	for i := range subs {
		subs[i] = l.Subscribe("d")
	}
	sink, err := l.Sink(context.Background(), "d")
	require.NoError(t, err)
	for i := range lines {
		sink.Log("build", fmt.Sprintf("line %d", i))
		if i%500 == 0 {
			require.NoError(t, l.Flush(context.Background()))
		}
	}
	require.NoError(t, l.Flush(context.Background()))
	for i, sub := range subs {
		seqs, _ := received(sub)
		require.Equal(t, seqsTo(lines), seqs, "subscriber %d", i)
	}
}
