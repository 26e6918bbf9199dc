package raftnode

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

// waitFor is the margin tests give any cluster event (election, replication,
// failover). Generous so a loaded 2-core machine does not flake.
const waitFor = 10 * time.Second

// pollEvery is how often require.Eventually re-checks a condition.
const pollEvery = 5 * time.Millisecond

// Commands the test FSM and encoder treat specially.
const (
	epochPrefix = "\x00epoch:"
	cmdGarbage  = "!garbage" // the encoder emits undecodable entry data
	cmdEncFail  = "!encfail" // the encoder fails
	cmdBlock    = "!block"   // the FSM's Apply waits for its gate to open
)

var errTestEncode = errors.New("test encoder: refused")

// testEncodeBatch is the entry encoder the tests use: 'B', term, now, count,
// then length-prefixed commands.
func testEncodeBatch(now time.Time, term uint64, cmds [][]byte) ([]byte, error) {
	buf := make([]byte, 0, 21+len(cmds)*16)
	buf = append(buf, 'B')
	buf = binary.BigEndian.AppendUint64(buf, term)
	buf = binary.BigEndian.AppendUint64(buf, uint64(now.UnixNano()))
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(cmds)))
	for _, c := range cmds {
		switch string(c) {
		case cmdEncFail:
			return nil, errTestEncode
		case cmdGarbage:
			return []byte("garbage"), nil
		}
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(c)))
		buf = append(buf, c...)
	}
	return buf, nil
}

var errUndecodable = errors.New("test fsm: undecodable entry")

func testDecodeBatch(data []byte) (term uint64, cmds []string, err error) {
	if len(data) < 21 || data[0] != 'B' {
		return 0, nil, errUndecodable
	}
	term = binary.BigEndian.Uint64(data[1:])
	n := int(binary.BigEndian.Uint32(data[17:]))
	rest := data[21:]
	for i := 0; i < n; i++ {
		if len(rest) < 4 {
			return 0, nil, errUndecodable
		}
		l := int(binary.BigEndian.Uint32(rest))
		rest = rest[4:]
		if len(rest) < l {
			return 0, nil, errUndecodable
		}
		cmds = append(cmds, string(rest[:l]))
		rest = rest[l:]
	}
	if len(rest) != 0 {
		return 0, nil, errUndecodable
	}
	return term, cmds, nil
}

func testEpochCommand(term uint64) ([]byte, error) {
	return []byte(epochPrefix + strconv.FormatUint(term, 10)), nil
}

// epochRec records an applied epoch command.
type epochRec struct {
	Term      uint64 // the term the command names
	EntryTerm uint64 // raft.Log.Term of its entry
	Index     uint64 // raft.Log.Index of its entry
}

// testState is the test FSM's replicated state (also its snapshot format).
type testState struct {
	Entries  int        // command entries applied
	Values   []string   // ordinary commands, in apply order
	ValueIdx []uint64   // log index of each value
	Epochs   []epochRec // epoch commands, in apply order
}

// testFSM follows the package's FSM contract: one result per command, an
// error value for undecodable data, epoch commands recorded.
type testFSM struct {
	mu       sync.Mutex
	st       testState
	seen     map[string]bool // values already applied
	restores int
	gate     chan struct{} // when set, cmdBlock waits for it to close
	blocked  atomic.Bool   // true while Apply waits on gate
}

var _ raft.FSM = (*testFSM)(nil)

func (f *testFSM) Apply(l *raft.Log) any {
	_, cmds, err := testDecodeBatch(l.Data)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.st.Entries++
	out := make([]any, len(cmds))
	for i, c := range cmds {
		if t, ok := strings.CutPrefix(c, epochPrefix); ok {
			term, _ := strconv.ParseUint(t, 10, 64)
			f.st.Epochs = append(f.st.Epochs, epochRec{Term: term, EntryTerm: l.Term, Index: l.Index})
			out[i] = "epoch"
			continue
		}
		if c == cmdBlock && f.gate != nil {
			gate := f.gate
			f.blocked.Store(true)
			f.mu.Unlock()
			<-gate
			f.mu.Lock()
			f.blocked.Store(false)
		}
		out[i] = "r:" + c
		if f.seen[c] {
			continue // idempotent, like the real ledger
		}
		if f.seen == nil {
			f.seen = make(map[string]bool)
		}
		f.seen[c] = true
		f.st.Values = append(f.st.Values, c)
		f.st.ValueIdx = append(f.st.ValueIdx, l.Index)
	}
	return out
}

func (f *testFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	data, err := json.Marshal(f.st)
	if err != nil {
		return nil, err
	}
	return testSnapshot(data), nil
}

func (f *testFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var st testState
	if err := json.NewDecoder(rc).Decode(&st); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.st = st
	f.seen = make(map[string]bool, len(st.Values))
	for _, v := range st.Values {
		f.seen[v] = true
	}
	f.restores++
	return nil
}

// state returns a copy of the FSM state.
func (f *testFSM) state() testState {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.st
	st.Values = append([]string(nil), st.Values...)
	st.ValueIdx = append([]uint64(nil), st.ValueIdx...)
	st.Epochs = append([]epochRec(nil), st.Epochs...)
	return st
}

func (f *testFSM) values() []string { return f.state().Values }

func (f *testFSM) restoreCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.restores
}

// epochFor returns the epoch record for term, if applied.
func (f *testFSM) epochFor(term uint64) (epochRec, bool) {
	for _, e := range f.state().Epochs {
		if e.Term == term {
			return e, true
		}
	}
	return epochRec{}, false
}

type testSnapshot []byte

func (s testSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s testSnapshot) Release() {}

// testLogger logs at Warn to stderr (shown only when a test fails, in
// package-list mode); RAFTNODE_TEST_LOG=debug|info raises it.
func testLogger(name string) hclog.Logger {
	level := hclog.Warn
	if v := os.Getenv("RAFTNODE_TEST_LOG"); v != "" {
		level = hclog.LevelFromString(v)
	}
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: level, Output: os.Stderr})
}

// testConfig is a valid Config with fast timeouts on an ephemeral
// 127.0.0.1 port and its own temp DataDir.
func testConfig(t testing.TB, id string) Config {
	return testConfigIn(t.TempDir(), id)
}

// testConfigIn is testConfig with DataDir under dir.
func testConfigIn(dir, id string) Config {
	c := DefaultConfig()
	c.ID = id
	c.DataDir = filepath.Join(dir, id)
	c.RaftAddr = "127.0.0.1:0"
	c.HeartbeatTimeout = 300 * time.Millisecond
	c.ElectionTimeout = 300 * time.Millisecond
	c.LeaderLeaseTimeout = 250 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
	c.SnapshotInterval = time.Hour
	c.SnapshotThreshold = 1 << 40
	c.ApplyTimeout = waitFor
	c.Logger = testLogger(id)
	c.EncodeBatch = testEncodeBatch
	c.EpochCommand = testEpochCommand
	return c
}

// testCtx is a context bounded by waitFor.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	t.Cleanup(cancel)
	return ctx
}

// testCluster is an in-process cluster on 127.0.0.1, like hashicorp raft's
// testing.go: node 0 bootstraps, the others join through AddVoter.
type testCluster struct {
	t     testing.TB
	dir   string  // parent of the nodes' DataDirs
	nodes []*Node // nil once shut down
	fsms  []*testFSM
	cfgs  []Config
}

// newEmptyCluster returns a cluster with no nodes whose cleanup shuts every
// node down before the data directories are removed.
func newEmptyCluster(t testing.TB) *testCluster {
	tc := &testCluster{t: t, dir: t.TempDir()} // TempDir first: removed last
	t.Cleanup(tc.shutdownAll)
	return tc
}

// config is a test config for node id with its DataDir in the cluster's dir.
func (tc *testCluster) config(id string) Config { return testConfigIn(tc.dir, id) }

// newTestCluster starts n nodes, bootstraps node 0, adds the others as
// voters and waits for a serving leader that every node knows.
func newTestCluster(t testing.TB, n int, mutate func(*Config)) *testCluster {
	t.Helper()
	tc := newEmptyCluster(t)
	for i := 0; i < n; i++ {
		cfg := tc.config(fmt.Sprintf("node%d", i))
		if mutate != nil {
			mutate(&cfg)
		}
		tc.start(cfg)
	}
	require.NoError(t, tc.nodes[0].Bootstrap())
	tc.leader()
	for i := 1; i < n; i++ {
		tc.join(i)
	}
	tc.waitAgreed()
	return tc
}

// start runs a node from cfg (fresh FSM) and records it; cfg.RaftAddr is
// pinned to the bound address so a restart reuses it. Returns its index.
func (tc *testCluster) start(cfg Config) int {
	tc.t.Helper()
	fsm := &testFSM{}
	n, err := New(cfg, fsm)
	require.NoError(tc.t, err)
	cfg.RaftAddr = n.Addr()
	tc.nodes = append(tc.nodes, n)
	tc.fsms = append(tc.fsms, fsm)
	tc.cfgs = append(tc.cfgs, cfg)
	return len(tc.nodes) - 1
}

// restart starts node i again from its config and DataDir, with a fresh FSM.
func (tc *testCluster) restart(i int) {
	tc.t.Helper()
	require.Nil(tc.t, tc.nodes[i], "node %d still running", i)
	fsm := &testFSM{}
	n, err := New(tc.cfgs[i], fsm)
	require.NoError(tc.t, err)
	tc.nodes[i], tc.fsms[i] = n, fsm
}

// join adds node i as a voter through the current leader.
func (tc *testCluster) join(i int) {
	tc.t.Helper()
	require.Eventually(tc.t, func() bool {
		l := tc.servingLeader()
		return l >= 0 && tc.nodes[l].AddVoter(testCtx(tc.t), tc.cfgs[i].ID, tc.nodes[i].Addr()) == nil
	}, waitFor, pollEvery)
	// The new configuration commits with a majority, so one running node may
	// not hold it yet. Wait until every running node does: hashicorp/raft
	// refuses a (pre-)vote from a server missing from its latest
	// configuration, so a leader lost inside that window leaves the cluster
	// unable to elect, which is not what the tests built on join examine.
	require.Eventually(tc.t, func() bool {
		l := tc.servingLeader()
		if l < 0 {
			return false
		}
		config, err := tc.nodes[l].Members()
		if err != nil {
			return false
		}
		for _, n := range tc.nodes {
			if n == nil || !slices.ContainsFunc(config, func(m Member) bool { return m.ID == n.ID() }) {
				continue // not running, or not a member yet
			}
			members, err := n.Members()
			if err != nil || !slices.ContainsFunc(members, func(m Member) bool {
				return m.ID == tc.cfgs[i].ID && m.Suffrage == "Voter"
			}) {
				return false
			}
		}
		return true
	}, waitFor, pollEvery, "not every node holds the configuration with %s", tc.cfgs[i].ID)
}

// stop shuts node i down; abrupt skips the leadership transfer.
func (tc *testCluster) stop(i int, abrupt bool) {
	tc.t.Helper()
	ctx := testCtx(tc.t)
	if abrupt {
		c, cancel := context.WithCancel(ctx)
		cancel()
		ctx = c
	}
	require.NoError(tc.t, tc.nodes[i].Shutdown(ctx))
	tc.nodes[i] = nil
}

func (tc *testCluster) shutdownAll() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no leadership transfers during cleanup
	for i, n := range tc.nodes {
		if n != nil {
			_ = n.Shutdown(ctx)
			tc.nodes[i] = nil
		}
	}
}

// servingLeader returns the index of the single running node that is the
// serving leader, or -1 if there is none (or more than one).
func (tc *testCluster) servingLeader() int {
	idx := -1
	for i, n := range tc.nodes {
		if n == nil {
			continue
		}
		if _, ok := n.ServingTerm(); ok {
			if idx >= 0 {
				return -1
			}
			idx = i
		}
	}
	return idx
}

// leader waits for exactly one running node to be the serving leader and
// returns its index.
func (tc *testCluster) leader() int {
	tc.t.Helper()
	idx := -1
	require.Eventually(tc.t, func() bool {
		idx = tc.servingLeader()
		return idx >= 0
	}, waitFor, pollEvery, "no single serving leader")
	return idx
}

// waitAgreed waits until every running node names the serving leader.
func (tc *testCluster) waitAgreed() int {
	tc.t.Helper()
	var l int
	require.Eventually(tc.t, func() bool {
		if l = tc.servingLeader(); l < 0 {
			return false
		}
		for _, n := range tc.nodes {
			if n == nil {
				continue
			}
			if id, addr := n.Leader(); id != tc.cfgs[l].ID || addr != tc.nodes[l].Addr() {
				return false
			}
		}
		return true
	}, waitFor, pollEvery, "nodes do not agree on the leader")
	return l
}

// follower returns the index of a running node that is not the leader.
func (tc *testCluster) follower() int {
	tc.t.Helper()
	l := tc.waitAgreed()
	for i, n := range tc.nodes {
		if n != nil && i != l {
			return i
		}
	}
	tc.t.Fatal("no follower")
	return -1
}

// propose proposes cmd at the serving leader, retrying across leader
// changes (an election on a loaded machine must not fail a test whose
// subject is something else). The test FSM ignores a command it has already
// applied, so a retry after an unknown outcome is harmless.
func (tc *testCluster) propose(cmd string) Applied {
	tc.t.Helper()
	var (
		a   Applied
		err error
	)
	require.Eventually(tc.t, func() bool {
		l := tc.servingLeader()
		if l < 0 {
			return false
		}
		a, err = tc.nodes[l].Propose(testCtx(tc.t), []byte(cmd))
		return !errors.Is(err, ErrNotLeader)
	}, waitFor, pollEvery)
	require.NoError(tc.t, err)
	return a
}

// waitValues waits until node i's FSM holds exactly want.
func (tc *testCluster) waitValues(i int, want []string) {
	tc.t.Helper()
	require.Eventually(tc.t, func() bool {
		return equalStrings(tc.fsms[i].values(), want)
	}, waitFor, pollEvery, "node %d did not converge", i)
	require.Equal(tc.t, want, tc.fsms[i].values())
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
