package worker_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/store"
	"github.com/rollout/rollout/worker"
)

// chunkInput is a range run's input submitted as chunks whose objects a
// test can damage: each chunk's key and bytes, in index order.
type chunkInput struct {
	*rangeInput
	keys  []string
	bytes [][]byte
	first []uint64
}

// submitChunks is submitRanges that also returns each chunk's key and
// bytes.
func submitChunks(t *testing.T, rr *rangeReplica, e *storeEnv, run string, sizes ...int) *chunkInput {
	t.Helper()
	in := submitRanges(t, rr, e, run, 3, sizes...)
	out := &chunkInput{rangeInput: in}
	idx := uint64(0)
	for _, n := range sizes {
		var c store.RangeChunk
		out.first = append(out.first, idx)
		for range n {
			c.Add(in.lines[idx])
			idx++
		}
		b := c.Bytes()
		sum := store.Hash(b)
		out.keys = append(out.keys, store.InputPrefix(run)+fmt.Sprintf("%x", sum))
		out.bytes = append(out.bytes, b)
	}
	return out
}

// put replaces the object key of e's file store with b (an operator's
// mishap: the store is written behind the ledger's back).
func (e *storeEnv) put(t *testing.T, key string, b []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(e.dir, filepath.FromSlash(key)), b, 0o644))
}

func (e *storeEnv) remove(t *testing.T, key string) {
	t.Helper()
	require.NoError(t, os.Remove(filepath.Join(e.dir, filepath.FromSlash(key))))
}

// rangeStatus reads run's counters with its stall.
func (rr *rangeReplica) rangeStatus(t *testing.T, run string) *rolloutv1.RunCounters {
	t.Helper()
	return rr.counters(t, run)
}

// TestRangeChunkDamaged: the input chunk of a range run disappears, or its
// bytes change (same length, other lines; another length), after submit.
// The worker reports no result and no failure for the chunk's indexes and
// does not give the range back in a loop: it reports the range held, the
// run stalls naming the chunk and why (the whole run waits, as an item
// run does), and a probe now and then reads it again. Once the chunk is
// put back the run finishes, every result matching its own line.
func TestRangeChunkDamaged(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(b []byte) []byte // nil: the object is deleted
		reason string
	}{
		{"missing", nil, "not found"},
		{"same length, other lines", func(b []byte) []byte {
			b = bytes.Clone(b)
			i := bytes.Index(b, []byte("prompt 1 "))
			b[i+len("prompt ")] = '7'
			return b
		}, "not the chunk recorded"},
		{"truncated", func(b []byte) []byte { return b[:len(b)-5] }, "shorter"},
		{"longer lines", func(b []byte) []byte { return append([]byte(`{"x":1}`+"\n"), b...) }, "chunk"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rr := startRangeReplica(t)
			e := newStoreEnv(t)
			in := submitChunks(t, rr, e, "rc", 40, 30)
			bad := in.keys[0]
			if tc.damage == nil {
				e.remove(t, bad)
			} else {
				e.put(t, bad, tc.damage(in.bytes[0]))
			}
			cfg := rangeConfig("w1")
			cfg.OpenStore = e.rangeOpener()
			w1 := start(t, cfg, &rangeBackend{t: t}, rr.addr)

			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				c := rr.rangeStatus(t, "rc")
				if c.GetStall() != nil {
					break
				}
				require.True(t, time.Now().Before(deadline), "the run stalls on the damaged chunk: %v, worker %+v", c, w1.w.Stats())
			}
			eventually(t, func() bool { return w1.w.Stats().InputsHeld > 0 }, "the worker counts its applied hold")
			held := w1.w.Stats().InputsHeld
			time.Sleep(2500 * time.Millisecond) // a probe or two
			c := rr.rangeStatus(t, "rc")
			require.Zero(t, c.GetDead())
			require.Zero(t, c.GetFailures(), "a damaged chunk counts no failure")
			require.Equal(t, bad, c.GetStall().GetObject(), "the stall names the chunk")
			require.Contains(t, c.GetStall().GetReason(), tc.reason)
			require.Contains(t, c.GetStall().GetReason(), bad)
			// The records the worker held when the stall began are held
			// one by one, then only probes (1 s, then 2 s apart) come back:
			// a handful, where a nack loop gave back hundreds.
			require.LessOrEqual(t, w1.w.Stats().InputsHeld-held, uint64(10), "probes back off: the range is not held in a loop")
			require.Zero(t, w1.w.Stats().Nacked)
			for _, a := range rr.reports() {
				r := a.rep
				require.False(t, r.GetNackRest() && r.GetLo() < 40, "the damaged chunk's range is held, never nacked: %v", r)
				require.True(t, r.GetLo() >= 40 || r.GetDoneTo() == r.GetLo(), "no progress on the damaged chunk: %v", r)
			}

			e.put(t, bad, in.bytes[0])
			c = rr.waitRun(t, "rc", in.total, 60*time.Second)
			require.EqualValues(t, in.total, c.GetDone())
			require.Nil(t, c.GetStall(), "the probe read the chunk: the stall ended")
			done, failed := checkRangeResults(t, rr, e, in.rangeInput)
			require.Len(t, done, int(in.total))
			require.Empty(t, failed)
		})
	}
}

// TestRangeChunkWrongLength: a hostile or broken client submits a chunk
// whose reference names another length than the chunk's lines (the
// coordinator never reads the store, so it takes it). The worker runs no
// line of it and reports no result: the range is held, the run stalls
// naming the chunk.
func TestRangeChunkWrongLength(t *testing.T) {
	for _, delta := range []int64{-1, 8, 1 << 20} {
		t.Run(fmt.Sprint(delta), func(t *testing.T) {
			rr := startRangeReplica(t)
			e := newStoreEnv(t)
			var c store.RangeChunk
			for i := range 20 {
				c.Add(fmt.Appendf(nil, `{"prompt":"prompt %d"}`, i))
			}
			key, _, _, err := e.st.PutContent(context.Background(), store.InputPrefix("rw"), c.Bytes())
			require.NoError(t, err)
			spec := storeSpec(e)
			spec.Total, spec.MaxFailures = 20, 3
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err = rr.client(t).SubmitRanges(ctx, &rolloutv1.SubmitRangesRequest{Run: "rw", Spec: spec, Ranges: []*rolloutv1.InputRange{{Index: 0, Count: 20,
				PayloadRef: &rolloutv1.DataRef{Object: key, Length: uint64(int64(c.DataLen()) + delta)}}}})
			require.NoError(t, err, "the coordinator takes a reference it cannot read")
			cfg := rangeConfig("w1")
			cfg.OpenStore = e.rangeOpener()
			w1 := start(t, cfg, &rangeBackend{t: t}, rr.addr)
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				st := rr.rangeStatus(t, "rw")
				if st.GetStall() != nil {
					require.Equal(t, key, st.GetStall().GetObject())
					require.Contains(t, st.GetStall().GetReason(), key)
					break
				}
				require.True(t, time.Now().Before(deadline), "the run stalls on the chunk: %v, worker %+v", st, w1.w.Stats())
			}
			st := rr.rangeStatus(t, "rw")
			require.Zero(t, st.GetDone())
			require.Zero(t, st.GetFailures())
			require.Empty(t, rr.reports(), "no range report applied")
		})
	}
}

// TestRangeStoreUnreachable: a range run whose store answers no read (503
// after the store's retries) against a real ledger and two workers: the
// workers hold its ranges with store_unavailable at once, the ledger
// isolates the run (its stall says the store is unreachable), no index
// fails; once reads work, a probe resumes the run and it finishes, every
// result matching its own line.
func TestRangeStoreUnreachable(t *testing.T) {
	rr := startRangeReplica(t)
	e := newStoreEnv(t)
	in := submitChunks(t, rr, e, "rs", 40, 30)
	flaky := &flakyReads{countingStore: e.counting, failing: true}
	opener := func(context.Context, string) (worker.ObjectStore, error) { return flaky, nil }
	var ws []*running
	for _, id := range []string{"w1", "w2"} {
		cfg := rangeConfig(id)
		cfg.OpenStore = opener
		ws = append(ws, start(t, cfg, &rangeBackend{t: t}, rr.addr))
	}
	eventually(t, func() bool { return rr.rangeStatus(t, "rs").GetStall().GetStoreUnreachable() }, "the run is isolated")
	c := rr.rangeStatus(t, "rs")
	require.Contains(t, c.GetStall().GetReason(), "503 Slow Down")
	require.Zero(t, c.GetFailures(), "an unreachable store counts no failure")
	require.Zero(t, c.GetDead())
	require.Zero(t, c.GetDone())
	eventually(t, func() bool { return ws[0].w.Stats().StoreHeld+ws[1].w.Stats().StoreHeld > 0 }, "the workers count their store holds")
	require.Zero(t, ws[0].w.Stats().InputsHeld+ws[1].w.Stats().InputsHeld, "nothing is held as a missing input")

	flaky.set(false)
	c = rr.waitRun(t, "rs", in.total, 60*time.Second)
	require.EqualValues(t, in.total, c.GetDone())
	require.Zero(t, c.GetFailures())
	require.Nil(t, c.GetStall(), "a probe read the chunk: the run resumed")
	done, failed := checkRangeResults(t, rr, e, in.rangeInput)
	require.Len(t, done, int(in.total))
	require.Empty(t, failed)
}
