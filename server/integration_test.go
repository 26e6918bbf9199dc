package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/worker"
	"github.com/rollout/rollout/worker/mock"
)

func mockBackend(t *testing.T, latency time.Duration) *mock.Backend {
	t.Helper()
	b, err := mock.New(mock.Config{Latency: latency})
	require.NoError(t, err)
	return b
}

// TestInProcessClusterLeaderLossExactlyOnce runs a batch through three
// in-process replicas and two workers, stops the leader abruptly mid-run,
// and checks that every item ends Done exactly once with the mock result,
// that a new leader with a higher term took over, and that the surviving
// replicas' ledgers agree.
func TestInProcessClusterLeaderLossExactlyOnce(t *testing.T) {
	const n = 400
	c := newTestCluster(t, 3, clusterOpts{})
	c.submit("it", n)
	// Resubmitting is a no-op per item.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.client().SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "it", Items: []*rolloutv1.SubmitItem{
		{Id: testID("it-00000"), Index: 0, Payload: []byte(`{"prompt":"p0"}`)}}})
	require.NoError(t, err)
	require.Zero(t, resp.GetCreated())
	require.EqualValues(t, 1, resp.GetAlreadyPending())
	rc, err := c.runStatus("it")
	require.NoError(t, err)
	require.Equal(t, uint64(n), rc.GetTotal())

	w1 := c.startWorker("w1", mockBackend(t, 10*time.Millisecond), nil)
	w2 := c.startWorker("w2", mockBackend(t, 10*time.Millisecond), nil)

	old, oldTerm := c.waitLeader()
	require.Eventually(t, func() bool {
		r, err := old.ledger.Run("it")
		return err == nil && r.Done >= n/4
	}, time.Minute, 5*time.Millisecond)
	old.stop()

	newLeader, newTerm := c.waitLeader()
	require.NotEqual(t, old.id, newLeader.id)
	require.Greater(t, newTerm, oldTerm)
	c.waitFinished("it", n, 90*time.Second)
	w1.stop()
	w2.stop()
	checkExactlyOnce(t, newLeader.ledger, "it", n, w1, w2)

	// Both survivors converge on the same ledger.
	for _, r := range c.replicas() {
		if r == old || r == newLeader {
			continue
		}
		require.Eventually(t, func() bool {
			return r.node.Stats().AppliedIndex >= newLeader.node.Stats().CommitIndex
		}, 10*time.Second, 20*time.Millisecond)
		a, _, _, err := r.ledger.Results("it", 0, n+10)
		require.NoError(t, err)
		b, _, _, err := newLeader.ledger.Results("it", 0, n+10)
		require.NoError(t, err)
		require.Equal(t, b, a)
	}
}

// failingBackend fails every item with a multi-line error carrying a NUL and
// an invalid byte, as a crashing model server might.
type failingBackend struct{}

func (failingBackend) Run(context.Context, worker.Item) ([]byte, error) {
	return nil, errors.New("Traceback (most recent call last):\n  File \"serve.py\"\n\tValueError: bad\x00\xff")
}

// TestMultiLineFailureReasonsFailItems checks that a backend's multi-line,
// binary error fails its item (Dead after max_failures, the reason kept in a
// form the ledger accepts) instead of the report being refused and the item
// left Running forever.
func TestMultiLineFailureReasonsFailItems(t *testing.T) {
	const n = 5
	c := newTestCluster(t, 3, clusterOpts{})
	c.submit("fail", n)
	w := c.startWorker("w1", failingBackend{}, nil)
	rc := c.waitFinished("fail", n, 60*time.Second)
	w.stop()
	require.Equal(t, uint64(n), rc.GetDead())
	l, _ := c.waitLeader()
	items, _, _, err := l.ledger.Results("fail", 0, n)
	require.NoError(t, err)
	for _, it := range items {
		require.Equal(t, fsm.StateDead, it.State)
		require.Equal(t, `Traceback (most recent call last): File "serve.py" ValueError: bad`+"\uFFFD\uFFFD", it.Reason)
	}
}
