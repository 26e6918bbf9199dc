package raftnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

var errTestCorrupt = errors.New("test fsm: corrupt entry")

// damagedFSM is a testFSM whose copy of the entry carrying the command bad
// is "damaged": its Apply refuses that entry whole with errTestCorrupt, as
// the work ledger refuses an entry that fails its checksum. It counts every
// Apply call it gets.
type damagedFSM struct {
	*testFSM
	bad   atomic.Pointer[string]
	calls atomic.Int64
}

func (f *damagedFSM) Apply(l *raft.Log) any {
	f.calls.Add(1)
	if bad := f.bad.Load(); bad != nil {
		if _, cmds, err := testDecodeBatch(l.Data); err == nil && slices.Contains(cmds, *bad) {
			return fmt.Errorf("%w at index %d", errTestCorrupt, l.Index)
		}
	}
	return f.testFSM.Apply(l)
}

// fatalOnCorrupt is the Config.FatalResult the tests use.
func fatalOnCorrupt(resp any) error {
	if err, ok := resp.(error); ok && errors.Is(err, errTestCorrupt) {
		return err
	}
	return nil
}

// TestFatalApplyStopsNode: when one replica's FSM refuses an entry as
// damaged, that replica stops (Fatal, naming the index and raft.db), never
// calls its FSM again, never applies the entry or any later one, and never
// serves; the others go on. Both when the damaged replica follows and when
// it leads (then the others elect a new leader).
func TestFatalApplyStopsNode(t *testing.T) {
	for _, victimLeads := range []bool{false, true} {
		t.Run(fmt.Sprintf("victim leads %v", victimLeads), func(t *testing.T) {
			tc := newEmptyCluster(t)
			dfs := make([]*damagedFSM, 3)
			for i := range dfs {
				cfg := tc.config(fmt.Sprintf("node%d", i))
				cfg.FatalResult = fatalOnCorrupt
				dfs[i] = &damagedFSM{testFSM: &testFSM{}}
				n, err := New(cfg, dfs[i])
				require.NoError(t, err)
				cfg.RaftAddr = n.Addr()
				tc.nodes = append(tc.nodes, n)
				tc.fsms = append(tc.fsms, dfs[i].testFSM)
				tc.cfgs = append(tc.cfgs, cfg)
			}
			require.NoError(t, tc.nodes[0].Bootstrap())
			tc.leader()
			tc.join(1)
			tc.join(2)
			l := tc.waitAgreed()
			victim := tc.follower()
			if victimLeads {
				victim = l
			}
			tc.propose("v1")
			tc.waitValues(victim, []string{"v1"})
			bad := "v2"
			dfs[victim].bad.Store(&bad)

			if victimLeads {
				_, err := tc.nodes[victim].Propose(testCtx(t), []byte("v2"))
				require.Error(t, err, "the damaged leader cannot apply its own entry")
			} else {
				tc.propose("v2")
			}
			n := tc.nodes[victim]
			select {
			case <-n.Fatal():
			case <-time.After(waitFor):
				t.Fatal("the damaged replica did not stop")
			}
			err := n.FatalErr()
			require.ErrorIs(t, err, ErrFatalApply)
			require.ErrorIs(t, err, errTestCorrupt)
			callsAtStop := dfs[victim].calls.Load()

			// The others go on (after electing a new leader if need be).
			others := []int{}
			for i := range tc.nodes {
				if i != victim {
					others = append(others, i)
				}
			}
			tc.propose("v3")
			tc.propose("v4")
			for _, i := range others {
				tc.waitValues(i, []string{"v1", "v2", "v3", "v4"})
			}
			v2Index := tc.fsms[others[0]].state().ValueIdx[1]
			require.Contains(t, err.Error(), fmt.Sprintf("raft.db (%s), log entry %d ", filepath.Join(tc.cfgs[victim].DataDir, "raft.db"), v2Index))

			// The damaged replica applied nothing from v2 on, and its FSM is
			// not called again.
			require.Equal(t, []string{"v1"}, tc.fsms[victim].values())
			require.Equal(t, callsAtStop, dfs[victim].calls.Load(), "the FSM was called after the fatal entry")
			require.Less(t, n.Stats().AppliedIndex, v2Index)
			require.Equal(t, "Shutdown", n.Stats().State)
			// A health probe sees it stopped (not live), naming why.
			r := n.Readiness()
			require.True(t, r.Stopped, "%+v", r)
			require.Contains(t, r.StopReason, "fatal apply")
			require.Empty(t, r.LeaderID)
			_, serving := n.ServingTerm()
			require.False(t, serving)
			_, err = n.VerifyLeader(testCtx(t))
			require.ErrorIs(t, err, ErrNotLeader)
			_, err = n.Propose(testCtx(t), []byte("v5"))
			require.Error(t, err)
			for _, i := range others {
				id, _ := tc.nodes[i].Leader()
				require.NotEqual(t, tc.cfgs[victim].ID, id)
			}
			require.NoError(t, n.Shutdown(context.Background()))
			tc.nodes[victim] = nil
		})
	}
}

// TestDataDirRemembersReplicaID: the first start records the id; another
// id on the same directory is refused, naming both ids and the directory; a
// directory from before the record existed is adopted, by the id its raft
// configuration gives this address.
func TestDataDirRemembersReplicaID(t *testing.T) {
	cfg := testConfig(t, "node-a")
	idFile := filepath.Join(cfg.DataDir, replicaIDFile)
	start := func(id string) (*Node, error) {
		c := cfg
		c.ID = id
		n, err := New(c, &testFSM{})
		if err == nil {
			cfg.RaftAddr = n.Addr()
		}
		return n, err
	}
	stop := func(n *Node) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		require.NoError(t, n.Shutdown(ctx))
	}
	n, err := start("node-a")
	require.NoError(t, err)
	require.NoError(t, n.Bootstrap())
	require.Eventually(t, func() bool { _, ok := n.ServingTerm(); return ok }, waitFor, pollEvery)
	stop(n)
	b, err := os.ReadFile(idFile)
	require.NoError(t, err)
	require.Equal(t, "node-a\n", string(b))

	refused := func() {
		t.Helper()
		_, err := start("node-b")
		require.ErrorIs(t, err, ErrReplicaIDMismatch)
		require.Contains(t, err.Error(), `"node-a"`)
		require.Contains(t, err.Error(), `"node-b"`)
		require.Contains(t, err.Error(), cfg.DataDir)
		b, rerr := os.ReadFile(idFile)
		require.NoError(t, rerr)
		require.Equal(t, "node-a\n", string(b), "a refused start changed the record")
	}
	refused()

	n, err = start("node-a")
	require.NoError(t, err)
	require.True(t, n.HasState())
	stop(n)

	// A data directory from before the record existed: adopted, unless its
	// raft configuration lists another id at this node's address.
	require.NoError(t, os.Remove(idFile))
	_, err = start("node-b")
	require.ErrorIs(t, err, ErrReplicaIDMismatch)
	require.Contains(t, err.Error(), `lists "node-a" at `+cfg.RaftAddr)
	require.NoFileExists(t, idFile)
	n, err = start("node-a")
	require.NoError(t, err)
	require.True(t, n.HasState())
	stop(n)
	b, err = os.ReadFile(idFile)
	require.NoError(t, err)
	require.Equal(t, "node-a\n", string(b))
	refused()

	// A damaged record is refused, not rewritten.
	require.NoError(t, os.WriteFile(idFile, nil, 0o600))
	_, err = start("node-a")
	require.ErrorIs(t, err, ErrReplicaIDMismatch)
	require.Contains(t, err.Error(), idFile)
}

// TestMissingSnapshotDirIsAnError: a snapshot directory deleted, emptied or
// replaced by a file is a clear error naming the path, at start and at
// snapshot time; never a panic (hashicorp/raft panics at start when the log
// was compacted and the snapshot is gone).
func TestMissingSnapshotDirIsAnError(t *testing.T) {
	snapDir := func(c Config) string { return filepath.Join(c.DataDir, snapshotDir) }
	replaceWithFile := func(t *testing.T, c Config) {
		require.NoError(t, os.RemoveAll(snapDir(c)))
		require.NoError(t, os.WriteFile(snapDir(c), []byte("not a directory"), 0o600))
	}
	atStart := []struct {
		name    string
		compact bool // snapshot and compact the log before stopping
		damage  func(t *testing.T, c Config)
		want    string
	}{
		{name: "deleted, log compacted", compact: true, want: "does not exist but",
			damage: func(t *testing.T, c Config) { require.NoError(t, os.RemoveAll(snapDir(c))) }},
		{name: "deleted, log whole", want: "does not exist but",
			damage: func(t *testing.T, c Config) { require.NoError(t, os.RemoveAll(snapDir(c))) }},
		{name: "emptied, log compacted", compact: true, want: "there is none",
			damage: func(t *testing.T, c Config) {
				require.NoError(t, os.RemoveAll(snapDir(c)))
				require.NoError(t, os.Mkdir(snapDir(c), 0o700))
			}},
		{name: "a file in its place", want: "is not a directory", damage: replaceWithFile},
	}
	for _, tc := range atStart {
		t.Run("at start: "+tc.name, func(t *testing.T) {
			c := newTestCluster(t, 1, func(c *Config) { c.TrailingLogs = 1 })
			for i := range 4 {
				c.propose(fmt.Sprintf("v%d", i))
			}
			if tc.compact {
				require.NoError(t, c.nodes[0].Snapshot())
				c.propose("after-snapshot")
			}
			c.stop(0, true)
			tc.damage(t, c.cfgs[0])
			_, err := New(c.cfgs[0], &testFSM{})
			require.ErrorIs(t, err, ErrSnapshotStore)
			require.Contains(t, err.Error(), snapDir(c.cfgs[0]))
			require.Contains(t, err.Error(), tc.want)
		})
	}

	t.Run("at start: unreadable", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("environment: running as root, which reads a mode-000 directory anyway; a file in its place covers an unusable directory")
		}
		c := newTestCluster(t, 1, nil)
		c.propose("v")
		c.stop(0, true)
		require.NoError(t, os.Chmod(snapDir(c.cfgs[0]), 0))
		t.Cleanup(func() { _ = os.Chmod(snapDir(c.cfgs[0]), 0o700) })
		_, err := New(c.cfgs[0], &testFSM{})
		require.ErrorIs(t, err, ErrSnapshotStore)
		require.Contains(t, err.Error(), snapDir(c.cfgs[0]))
	})

	t.Run("while running: deleted", func(t *testing.T) {
		c := newTestCluster(t, 1, func(c *Config) { c.TrailingLogs = 1 })
		c.propose("v1")
		require.NoError(t, c.nodes[0].Snapshot())
		require.NoError(t, os.RemoveAll(snapDir(c.cfgs[0])))
		c.propose("v2")
		// The next snapshot recreates the directory and covers the whole
		// state, so the replica restarts from it.
		require.NoError(t, c.nodes[0].Snapshot())
		c.propose("v3")
		c.stop(0, true)
		c.restart(0)
		c.leader()
		c.waitValues(0, []string{"v1", "v2", "v3"})
	})

	t.Run("while running: a file in its place", func(t *testing.T) {
		c := newTestCluster(t, 1, func(c *Config) { c.TrailingLogs = 1 })
		c.propose("v1")
		replaceWithFile(t, c.cfgs[0])
		c.propose("v2")
		err := c.nodes[0].Snapshot()
		require.Error(t, err)
		require.Contains(t, err.Error(), snapDir(c.cfgs[0])+" is not a directory")
		// The replica keeps running, its log uncompacted.
		c.propose("v3")
		c.waitValues(0, []string{"v1", "v2", "v3"})
		require.NoError(t, os.Remove(snapDir(c.cfgs[0])))
		require.NoError(t, c.nodes[0].Snapshot())
	})
}
