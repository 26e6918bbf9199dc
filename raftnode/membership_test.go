package raftnode

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestValidateServerIDAndAddr(t *testing.T) {
	for _, id := range []string{"c1", "replica-7.eu", "ü", strings.Repeat("x", MaxServerIDBytes)} {
		require.NoError(t, ValidateServerID(id), "%q", id)
	}
	for _, id := range []string{"", "c1\n", "c 1", "c1\t", "c\x00", "c\xff", strings.Repeat("x", MaxServerIDBytes+1), "\u200b"} {
		require.ErrorIs(t, ValidateServerID(id), ErrInvalidArgument, "%q", id)
	}
	for _, a := range []string{"127.0.0.1:7000", "host.example:1", "[::1]:9"} {
		require.NoError(t, ValidateServerAddr("raft_addr", a), "%q", a)
	}
	for _, a := range []string{"", "host", "0.0.0.0:1", "[::]:1", ":1", "h:0", "h:99999", "h:1\n", "h :1", strings.Repeat("h", 300) + ":1"} {
		err := ValidateServerAddr("raft_addr", a)
		require.ErrorIs(t, err, ErrInvalidArgument, "%q", a)
		require.ErrorContains(t, err, "raft_addr")
	}
}

// TestNonvoterThenPromote adds a fresh node as a non-voter: it receives the
// log without voting, and PromoteNonvoter makes it a voter. Adding a voter
// as a non-voter is refused; promoting or removing an unknown id is
// ErrNotMember; removing the last voter is refused.
func TestNonvoterThenPromote(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	ctx := testCtx(t)
	tc.propose("a")
	l := tc.leader()
	leader := tc.nodes[l]

	require.ErrorIs(t, leader.RemoveServer(ctx, tc.cfgs[l].ID), ErrUnsafeChange, "the last voter")
	require.ErrorIs(t, leader.AddNonvoter(ctx, "n 1", "127.0.0.1:1"), ErrInvalidArgument)
	require.ErrorIs(t, leader.AddNonvoter(ctx, "n1", "0.0.0.0:1"), ErrInvalidArgument)
	require.ErrorIs(t, leader.AddNonvoter(ctx, tc.cfgs[l].ID, "127.0.0.1:1"), ErrUnsafeChange)
	require.ErrorIs(t, leader.AddNonvoter(ctx, "n1", leader.Addr()), ErrInvalidArgument)
	require.ErrorIs(t, leader.PromoteNonvoter(ctx, "n1"), ErrNotMember)
	require.ErrorIs(t, leader.RemoveServer(ctx, "n1"), ErrNotMember)

	i := tc.start(tc.config("n1"))
	require.NoError(t, leader.AddNonvoter(ctx, "n1", tc.nodes[i].Addr()))
	require.NoError(t, leader.AddNonvoter(ctx, "n1", tc.nodes[i].Addr()), "again: a no-op")
	members, err := leader.Members()
	require.NoError(t, err)
	require.Contains(t, members, Member{ID: "n1", Address: tc.nodes[i].Addr(), Suffrage: "Nonvoter"})
	tc.propose("b")
	tc.waitValues(i, []string{"a", "b"})

	require.NoError(t, leader.PromoteNonvoter(ctx, "n1"))
	require.NoError(t, leader.PromoteNonvoter(ctx, "n1"), "again: a no-op")
	members, err = leader.Members()
	require.NoError(t, err)
	require.Contains(t, members, Member{ID: "n1", Address: tc.nodes[i].Addr(), Suffrage: "Voter"})
	tc.propose("c")
	tc.waitValues(i, []string{"a", "b", "c"})
}

// TestRecoverSurvivor loses two of three nodes for good: the survivor
// cannot elect. Recover rewrites its configuration to itself alone; started
// again, it leads alone with every value it held, and accepts writes.
func TestRecoverSurvivor(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	for i := range 5 {
		tc.propose(fmt.Sprintf("v%d", i))
	}
	s := tc.follower()
	want := []string{"v0", "v1", "v2", "v3", "v4"}
	tc.waitValues(s, want)
	for i := range tc.nodes {
		if i != s {
			tc.stop(i, true)
		}
	}
	tc.stop(s, true)

	peers := []Peer{{ID: tc.cfgs[s].ID, RaftAddr: tc.cfgs[s].RaftAddr}}
	bad := []Peer{{ID: "other", RaftAddr: "127.0.0.1:1"}}
	require.ErrorIs(t, Recover(tc.cfgs[s], &testFSM{}, bad), ErrInvalidArgument, "own id missing")
	stranger := tc.cfgs[s]
	stranger.ID = "stranger"
	err := Recover(stranger, &testFSM{}, []Peer{{ID: "stranger", RaftAddr: "127.0.0.1:1"}})
	require.ErrorIs(t, err, ErrReplicaIDMismatch, "the data directory records another id")

	// A damaged entry stops the recovery before anything is written.
	damaged := &damagedFSM{testFSM: &testFSM{}}
	damaged.bad.Store(ptr("v3"))
	cfg := tc.cfgs[s]
	cfg.FatalResult = fatalOnCorrupt
	err = Recover(cfg, damaged, peers)
	require.ErrorIs(t, err, ErrFatalApply)
	require.ErrorContains(t, err, "nothing was changed")

	require.NoError(t, Recover(cfg, &testFSM{}, peers))

	tc.restart(s)
	require.Eventually(t, func() bool { _, ok := tc.nodes[s].ServingTerm(); return ok }, waitFor, pollEvery)
	members, err := tc.nodes[s].Members()
	require.NoError(t, err)
	require.Equal(t, []Member{{ID: tc.cfgs[s].ID, Address: tc.nodes[s].Addr(), Suffrage: "Voter"}}, members)
	require.Equal(t, want, tc.fsms[s].values())
	a := tc.propose("after")
	require.Equal(t, "r:after", a.Result)
}

func ptr[T any](v T) *T { return &v }

// TestRecoverRefusals: a running node's data dir is locked, an empty dir
// has no state, and a bad peer list names the entry; nothing is written.
func TestRecoverRefusals(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	tc.propose("a")
	cfg := tc.cfgs[0]
	peers := []Peer{{ID: cfg.ID, RaftAddr: cfg.RaftAddr}}
	err := Recover(cfg, &testFSM{}, peers)
	require.ErrorContains(t, err, "locked by another process")
	require.ErrorContains(t, err, "stop the replica")

	empty := testConfig(t, cfg.ID)
	require.ErrorContains(t, Recover(empty, &testFSM{}, peers), "not a replica's data directory")
	require.NoError(t, os.MkdirAll(empty.DataDir, 0o700))
	_, err = os.Stat(filepath.Join(empty.DataDir, dbFile))
	require.True(t, os.IsNotExist(err), "nothing created")

	dup := []Peer{{ID: cfg.ID, RaftAddr: "127.0.0.1:1"}, {ID: cfg.ID, RaftAddr: "127.0.0.1:2"}}
	err = Recover(cfg, &testFSM{}, dup)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorContains(t, err, "entry 1")
}

func TestParsePeers(t *testing.T) {
	got, err := ParsePeers([]byte(`[{"id":"c1","raft_addr":"10.0.0.1:7001"}, {"id":"c2","raft_addr":"10.0.0.2:7001"}]`))
	require.NoError(t, err)
	require.Equal(t, []Peer{{ID: "c1", RaftAddr: "10.0.0.1:7001"}, {ID: "c2", RaftAddr: "10.0.0.2:7001"}}, got)
	for _, tc := range []struct{ name, in, want string }{
		{"not json", `{`, "not a JSON array"},
		{"object", `{"id":"c1"}`, "not a JSON array"},
		{"unknown field", `[{"id":"c1","raft_addr":"h:1","non_voter":true}]`, "unknown field"},
		{"trailing", `[{"id":"c1","raft_addr":"h:1"}] []`, "trailing data"},
		{"empty", `[]`, "no peers"},
		{"null", `null`, "no peers"},
		{"bad id", `[{"id":"c1","raft_addr":"h:1"},{"id":"c 2","raft_addr":"h:2"}]`, "entry 1"},
		{"missing addr", `[{"id":"c1"}]`, `entry 0 (id "c1"): raftnode: invalid argument: raft_addr`},
		{"bad addr", `[{"id":"c1","raft_addr":"0.0.0.0:1"}]`, "entry 0"},
		{"dup id", `[{"id":"c1","raft_addr":"h:1"},{"id":"c1","raft_addr":"h:2"}]`, `entry 1: id "c1" is also entry 0`},
		{"dup addr", `[{"id":"c1","raft_addr":"h:1"},{"id":"c2","raft_addr":"h:1"}]`, "also entry 0's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParsePeers([]byte(tc.in))
			require.ErrorIs(t, err, ErrInvalidArgument)
			require.ErrorContains(t, err, tc.want)
		})
	}
	path := filepath.Join(t.TempDir(), "peers.json")
	require.NoError(t, os.WriteFile(path, []byte(`[{"id":"c1","raft_addr":"h:0"}]`), 0o600))
	_, err = ReadPeersFile(path)
	require.ErrorContains(t, err, "peers file "+path+": entry 0")
	_, err = ReadPeersFile(filepath.Join(t.TempDir(), "missing.json"))
	require.ErrorContains(t, err, "missing.json")
}
