package raftnode

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// countingObserver records what a Node tells its Observer.
type countingObserver struct {
	mu                           sync.Mutex
	applies, batches, commands   int
	bytes, commits, commitErrors int
	lastApplied                  uint64
}

func (o *countingObserver) ObserveApply(index uint64, took time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.applies++
	o.lastApplied = max(o.lastApplied, index)
}

func (o *countingObserver) ObserveBatch(commands, size int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.batches++
	o.commands += commands
	o.bytes += size
}

func (o *countingObserver) ObserveCommit(took time.Duration, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.commits++
	if err != nil {
		o.commitErrors++
	}
}

func (o *countingObserver) snapshot() countingObserver {
	o.mu.Lock()
	defer o.mu.Unlock()
	return countingObserver{applies: o.applies, batches: o.batches, commands: o.commands, bytes: o.bytes,
		commits: o.commits, commitErrors: o.commitErrors, lastApplied: o.lastApplied}
}

// TestObserverSeesBatchesAppliesAndLeaderChanges checks the Observer hooks
// and Stats.LeaderChanges: every proposed command is in exactly one
// observed batch, every batch's commit is observed, every replica observes
// applies (one per entry) up to its applied index, and a failover counts as a leader
// change on the survivors.
func TestObserverSeesBatchesAppliesAndLeaderChanges(t *testing.T) {
	obs := make(map[string]*countingObserver)
	tc := newTestCluster(t, 3, func(c *Config) {
		o := &countingObserver{}
		obs[c.ID] = o
		c.Observer = o
	})
	old := tc.waitAgreed()
	seen := make([]uint64, len(tc.nodes))
	for i := range tc.nodes {
		require.Eventually(t, func() bool { seen[i] = tc.nodes[i].Stats().LeaderChanges; return seen[i] >= 1 },
			10*time.Second, 5*time.Millisecond, "node %d saw no leader", i)
	}

	const n = 40
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { tc.propose(fmt.Sprintf("v%02d", i)) })
	}
	wg.Wait()
	lo := obs[tc.cfgs[old].ID].snapshot()
	require.Equal(t, n, lo.commands, "commands in observed batches")
	require.Equal(t, n*len("v00"), lo.bytes, "bytes in observed batches")
	require.Equal(t, lo.batches, lo.commits, "a commit per batch")
	require.Zero(t, lo.commitErrors)
	require.LessOrEqual(t, lo.batches, n)
	for i := range tc.nodes {
		o := obs[tc.cfgs[i].ID]
		// A follower applies the batches after the leader committed them:
		// wait until it has (an applied index read once may still lag).
		require.Eventually(t, func() bool {
			s := o.snapshot()
			return s.applies >= lo.batches && s.lastApplied >= tc.nodes[i].Stats().AppliedIndex
		}, 10*time.Second, 5*time.Millisecond, "node %d applies an entry per batch (%d batches)", i, lo.batches)
	}

	tc.stop(old, true)
	l := tc.leader()
	require.Eventually(t, func() bool { return tc.nodes[l].Stats().LeaderChanges > seen[l] }, 10*time.Second, 5*time.Millisecond,
		"the new leader counted no leader change")
}
