package raftnode

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

// Commands shapeFSM answers specially.
const (
	cmdRefuse = "!refuse" // its own result is errRefused; the others apply
	cmdShort  = "!short"  // the entry returns one result too few
	cmdTyped  = "!typed"  // the entry returns an int instead of results
)

var errRefused = errors.New("test fsm: command refused")

// shapeFSM is a testFSM whose results can refuse one command or break the
// apply contract.
type shapeFSM struct{ *testFSM }

func (f shapeFSM) Apply(l *raft.Log) any {
	out := f.testFSM.Apply(l)
	rs, ok := out.([]any)
	if !ok {
		return out
	}
	for i, r := range rs {
		switch r {
		case "r:" + cmdRefuse:
			rs[i] = fmt.Errorf("%w: command %d", errRefused, i)
		case "r:" + cmdShort:
			return rs[:len(rs)-1]
		case "r:" + cmdTyped:
			return 42
		}
	}
	return rs
}

// newShapeNode starts a single-node cluster over a shapeFSM.
func newShapeNode(t *testing.T, mutate func(*Config)) (*testCluster, *Node) {
	t.Helper()
	tc := newEmptyCluster(t)
	cfg := tc.config("node0")
	if mutate != nil {
		mutate(&cfg)
	}
	inner := &testFSM{}
	n, err := New(cfg, shapeFSM{inner})
	require.NoError(t, err)
	tc.nodes, tc.fsms, tc.cfgs = append(tc.nodes, n), append(tc.fsms, inner), append(tc.cfgs, cfg)
	require.NoError(t, n.Bootstrap())
	return tc, tc.nodes[tc.leader()]
}

func results(applied []Applied) []any {
	out := make([]any, len(applied))
	for i, a := range applied {
		out[i] = a.Result
	}
	return out
}

func indexes(applied []Applied) []uint64 {
	out := make([]uint64, len(applied))
	for i, a := range applied {
		out[i] = a.Index
	}
	return out
}

// TestProposeBatch: a batch's results come back in order, one per command,
// from one log entry (or, over the limits, consecutive entries in order);
// an error value for one command is that command's result, an error for the
// whole entry is the call's error; bad input changes nothing.
func TestProposeBatch(t *testing.T) {
	tc, n := newShapeNode(t, func(c *Config) { c.MaxBatchCommands = 3; c.MaxBatchBytes = 64 })
	ctx := testCtx(t)
	term, _ := n.ServingTerm()

	before := tc.fsms[0].state().Entries
	a, err := n.ProposeBatch(ctx, [][]byte{[]byte("a"), []byte("b"), []byte("c")})
	require.NoError(t, err)
	require.Equal(t, []any{"r:a", "r:b", "r:c"}, results(a))
	require.Equal(t, a[0].Index, a[2].Index, "one batch, one entry")
	require.Equal(t, term, a[0].Term)
	require.Equal(t, before+1, tc.fsms[0].state().Entries)

	// Over MaxBatchCommands: cut into consecutive entries, in order.
	a, err = n.ProposeBatch(ctx, [][]byte{[]byte("d"), []byte("e"), []byte("f"), []byte("g"), []byte("h")})
	require.NoError(t, err)
	require.Equal(t, []any{"r:d", "r:e", "r:f", "r:g", "r:h"}, results(a))
	ix := indexes(a)
	require.Equal(t, []uint64{ix[0], ix[0], ix[0], ix[0] + 1, ix[0] + 1}, ix)

	// One command refused: its own result says so, the others applied.
	a, err = n.ProposeBatch(ctx, [][]byte{[]byte("i"), []byte(cmdRefuse), []byte("j")})
	require.NoError(t, err)
	require.Equal(t, "r:i", a[0].Result)
	require.ErrorIs(t, a[1].Result.(error), errRefused)
	require.Equal(t, "r:j", a[2].Result)

	values := tc.fsms[0].values()
	for _, tt := range []struct {
		name string
		cmds [][]byte
		want error
		msg  string
	}{
		{"no commands", nil, ErrInvalidArgument, "no commands"},
		{"an empty command", [][]byte{[]byte("k"), {}}, ErrInvalidArgument, "command 1 is empty"},
		{"an oversized command", [][]byte{[]byte("k"), make([]byte, 65)}, ErrInvalidArgument, "command 1 is 65 bytes"},
		{"undecodable entry", [][]byte{[]byte("k"), []byte(cmdGarbage)}, errUndecodable, ""},
		{"encoder fails", [][]byte{[]byte("k"), []byte(cmdEncFail)}, errTestEncode, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, err := n.ProposeBatch(ctx, tt.cmds)
			require.ErrorIs(t, err, tt.want)
			require.ErrorContains(t, err, tt.msg)
			require.Nil(t, a)
			require.Equal(t, values, tc.fsms[0].values(), "nothing applied")
		})
	}
}

// TestProposeBatchContractViolation: an FSM that returns the wrong number
// of results, or no results at all, is ErrFSMContract for every caller.
func TestProposeBatchContractViolation(t *testing.T) {
	_, n := newShapeNode(t, nil)
	for _, cmd := range []string{cmdShort, cmdTyped} {
		t.Run(cmd, func(t *testing.T) {
			_, err := n.ProposeBatch(testCtx(t), [][]byte{[]byte("x" + cmd), []byte(cmd)})
			require.ErrorIs(t, err, ErrFSMContract)
		})
	}
	a, err := n.Propose(testCtx(t), []byte("fine"))
	require.NoError(t, err)
	require.Equal(t, "r:fine", a.Result)
}

// TestProposeBatchStaysWhole: batches queued behind a held entry are never
// split across entries, even when the next entry has room for part of the
// following batch, and a batch withdrawn while queued is never proposed.
func TestProposeBatchStaysWhole(t *testing.T) {
	tc := newTestCluster(t, 1, func(c *Config) { c.MaxInflightBatches = 1; c.MaxBatchCommands = 4 })
	leader := tc.nodes[0]
	gate := make(chan struct{})
	tc.fsms[0].mu.Lock()
	tc.fsms[0].gate = gate
	tc.fsms[0].mu.Unlock()
	opened := false
	defer func() {
		if !opened {
			close(gate)
		}
	}()
	s := leader.session.Load()
	require.NotNil(t, s)
	queued := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.queue)
	}

	type outcome struct {
		applied []Applied
		err     error
	}
	propose := func(ctx context.Context, cmds ...string) chan outcome {
		ch := make(chan outcome, 1)
		b := make([][]byte, len(cmds))
		for i, c := range cmds {
			b[i] = []byte(c)
		}
		go func() {
			a, err := leader.ProposeBatch(ctx, b)
			ch <- outcome{a, err}
		}()
		return ch
	}
	held := propose(testCtx(t), cmdBlock)
	require.Eventually(t, tc.fsms[0].blocked.Load, waitFor, pollEvery, "FSM never blocked")
	first := propose(testCtx(t), "a1", "a2", "a3")
	require.Eventually(t, func() bool { return queued() == 1 }, waitFor, pollEvery)
	cctx, cancel := context.WithCancel(testCtx(t))
	withdrawn := propose(cctx, "c1")
	require.Eventually(t, func() bool { return queued() == 2 }, waitFor, pollEvery)
	second := propose(testCtx(t), "b1", "b2", "b3")
	require.Eventually(t, func() bool { return queued() == 3 }, waitFor, pollEvery)
	cancel()
	w := <-withdrawn
	require.ErrorIs(t, w.err, context.Canceled)
	require.ErrorContains(t, w.err, "withdrawn")

	close(gate)
	opened = true
	require.NoError(t, (<-held).err)
	a, b := <-first, <-second
	require.NoError(t, a.err)
	require.NoError(t, b.err)
	require.Equal(t, []any{"r:a1", "r:a2", "r:a3"}, results(a.applied))
	require.Equal(t, []any{"r:b1", "r:b2", "r:b3"}, results(b.applied))
	ia, ib := indexes(a.applied), indexes(b.applied)
	require.Equal(t, []uint64{ia[0], ia[0], ia[0]}, ia, "the first batch is one entry")
	require.Equal(t, []uint64{ia[0] + 1, ia[0] + 1, ia[0] + 1}, ib, "the second batch is the next entry, whole")
	require.Equal(t, []string{cmdBlock, "a1", "a2", "a3", "b1", "b2", "b3"}, tc.fsms[0].values())
}
