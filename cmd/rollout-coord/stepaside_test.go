package main

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
)

type fakeLeader struct {
	leader    atomic.Bool
	transfers atomic.Int32
}

func (f *fakeLeader) ServingTerm() (uint64, bool) { return 1, f.leader.Load() }
func (f *fakeLeader) TransferLeadership(context.Context) error {
	f.transfers.Add(1)
	return nil
}

type fakeSaturation struct {
	mu    sync.Mutex
	since time.Time
}

func (f *fakeSaturation) Saturated(time.Time) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.since, !f.since.IsZero()
}

func (f *fakeSaturation) set(t time.Time) { f.mu.Lock(); f.since = t; f.mu.Unlock() }

// TestStepAside: a serving leader whose gRPC listener has been saturated
// for the threshold transfers leadership once (then not again within the
// cooldown); a follower, or a leader saturated for less, does not.
func TestStepAside(t *testing.T) {
	node, lis := &fakeLeader{}, &fakeSaturation{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go stepAside(ctx, node, lis, 200*time.Millisecond, 5*time.Millisecond, hclog.NewNullLogger())

	lis.set(time.Now().Add(-time.Hour)) // saturated for long, but not the leader
	time.Sleep(50 * time.Millisecond)
	require.Zero(t, node.transfers.Load(), "a follower has no leadership to give")

	lis.set(time.Now()) // the leader, saturated just now
	node.leader.Store(true)
	time.Sleep(50 * time.Millisecond)
	require.Zero(t, node.transfers.Load(), "saturated for less than the threshold")

	require.Eventually(t, func() bool { return node.transfers.Load() == 1 }, 5*time.Second, 5*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	require.Equal(t, int32(1), node.transfers.Load(), "at most once per cooldown")
}
