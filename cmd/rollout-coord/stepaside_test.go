package main

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/raftnode"
)

type fakeLeader struct {
	leader    atomic.Bool
	transfers atomic.Int32
	// refuse names voters that refuse to take leadership.
	refuse map[string]bool

	mu    sync.Mutex
	tried []string
	notes []string
}

func (f *fakeLeader) ID() string                  { return "c2" }
func (f *fakeLeader) ServingTerm() (uint64, bool) { return 1, f.leader.Load() }
func (f *fakeLeader) Members() ([]raftnode.Member, error) {
	return []raftnode.Member{{ID: "c3", Suffrage: "Voter"}, {ID: "c2", Suffrage: "Voter"}, {ID: "c4", Suffrage: "Nonvoter"}, {ID: "c1", Suffrage: "Voter"}}, nil
}

func (f *fakeLeader) TransferLeadershipTo(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tried = append(f.tried, id)
	if f.refuse[id] {
		return errors.New("refused")
	}
	f.transfers.Add(1)
	return nil
}

func (f *fakeLeader) NoteSteppedAside(_ context.Context, why, to string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.notes = append(f.notes, why+" -> "+to)
	return nil
}

func (f *fakeLeader) log() (tried, notes []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.tried), slices.Clone(f.notes)
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
	go stepAside(ctx, node, lis, node, 200*time.Millisecond, 5*time.Millisecond, hclog.NewNullLogger())

	lis.set(time.Now().Add(-time.Hour)) // saturated for long, but not the leader
	time.Sleep(50 * time.Millisecond)
	require.Zero(t, node.transfers.Load(), "a follower has no leadership to give")

	lis.set(time.Now()) // the leader, saturated just now
	node.leader.Store(true)
	time.Sleep(50 * time.Millisecond)
	require.Zero(t, node.transfers.Load(), "saturated for less than the threshold")

	require.Eventually(t, func() bool { return node.transfers.Load() == 1 }, 30*time.Second, 5*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	require.Equal(t, int32(1), node.transfers.Load(), "at most once per cooldown")
	tried, notes := node.log()
	require.Equal(t, []string{"c1"}, tried, "the first other voter by id")
	require.Len(t, notes, 1)
	require.Contains(t, notes[0], "refused every new connection")
	require.True(t, strings.HasSuffix(notes[0], " -> c1"), notes[0])
}

// TestHandOverTriesVotersInOrder: a voter that will not take leadership is
// passed over for the next; each try is noted first; non-voters and this
// replica are never tried.
func TestHandOverTriesVotersInOrder(t *testing.T) {
	node := &fakeLeader{refuse: map[string]bool{"c1": true}}
	node.leader.Store(true)
	handOver(context.Background(), node, node, "why", hclog.NewNullLogger())
	tried, notes := node.log()
	require.Equal(t, []string{"c1", "c3"}, tried)
	require.Equal(t, []string{"why -> c1", "why -> c3"}, notes)
	require.Equal(t, int32(1), node.transfers.Load())

	// No longer the leader: nothing is tried.
	follower := &fakeLeader{}
	handOver(context.Background(), follower, follower, "why", hclog.NewNullLogger())
	tried, notes = follower.log()
	require.Empty(t, tried)
	require.Empty(t, notes)
}
