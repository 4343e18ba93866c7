package events_test

import (
	"context"
	"errors"
	"testing"

	"github.com/keelson-dev/keelson/platform/events"
	"github.com/stretchr/testify/require"
)

type deleted struct{ ID string }

func TestPublishInOrderStopsAtFirstError(t *testing.T) {
	t.Parallel()
	var topic events.Topic[deleted]
	var got []string
	boom := errors.New("boom")
	topic.Subscribe(func(_ context.Context, e deleted) error { got = append(got, "a:"+e.ID); return nil })
	topic.Subscribe(func(_ context.Context, e deleted) error { got = append(got, "b:"+e.ID); return boom })
	topic.Subscribe(events.Notify(func(e deleted) { got = append(got, "c:"+e.ID) }))

	err := topic.Publish(context.Background(), deleted{ID: "p1"})
	require.ErrorIs(t, err, boom)
	require.Equal(t, []string{"a:p1", "b:p1"}, got, "delivered in order, stopped at the error")
}

func TestPublishWithoutSubscribers(t *testing.T) {
	t.Parallel()
	var topic events.Topic[deleted]
	require.NoError(t, topic.Publish(context.Background(), deleted{ID: "x"}))
	var none *events.Topic[deleted]
	require.NoError(t, none.Publish(context.Background(), deleted{ID: "x"}), "a nil topic has no subscribers")
}

func TestNotifyDeliversEvery(t *testing.T) {
	t.Parallel()
	var topic events.Topic[int]
	sum := 0
	topic.Subscribe(events.Notify(func(n int) { sum += n }))
	for i := 1; i <= 3; i++ {
		require.NoError(t, topic.Publish(context.Background(), i))
	}
	require.Equal(t, 6, sum)
}
