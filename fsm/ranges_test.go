package fsm

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/fsm/fsmpb"
)

// rangeSpec is a range run's spec (a store is required).
func rangeSpec(total uint64) *fsmpb.RunSpec {
	return &fsmpb.RunSpec{Store: "file:///data", Total: total, MaxFailures: 2}
}

// chunk names the chunk of count lines at index in object obj.
func chunk(index, count uint64, obj string) *fsmpb.NewRange {
	return &fsmpb.NewRange{Index: index, Count: count, PayloadRef: &fsmpb.DataRef{Object: obj, Length: count * 10}}
}

func cSubmitRanges(run string, spec *fsmpb.RunSpec, chunks ...*fsmpb.NewRange) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_SubmitRanges{SubmitRanges: &fsmpb.SubmitRangesCmd{Run: run, Spec: spec, Ranges: chunks}}}
}

func cClaimIdx(worker string, max uint32, maxIndexes uint64) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_Claim{Claim: &fsmpb.ClaimCmd{Worker: worker, Max: max, MaxIndexes: maxIndexes}}}
}

// hashOf is a result hash that differs by tag.
func hashOf(tag byte) []byte { return bytes.Repeat([]byte{tag}, hashBytes) }

func cReport(run string, id []byte, worker string, attempt, lo, to uint64, tag byte, failed ...*fsmpb.FailedIndex) *fsmpb.Command {
	c := &fsmpb.ReportRangeCmd{Run: run, Id: id, Worker: worker, Attempt: attempt, Lo: lo, DoneTo: to, Failed: failed}
	if tag != 0 {
		c.ResultRef = &fsmpb.DataRef{Object: fmt.Sprintf("results/%c%d", tag, lo), Length: 100, Blake3: hashOf(tag)}
	}
	return &fsmpb.Command{Cmd: &fsmpb.Command_ReportRange{ReportRange: c}}
}

func counts(h *harness, run string) [5]uint64 {
	rs := h.run(run)
	return [5]uint64{rs.Total, rs.Pending, rs.Running, rs.Done, rs.Dead}
}

func TestRangeSubmitIsIdempotentAndRefusesOverlaps(t *testing.T) {
	h := newHarness(t)
	res := h.ok(cSubmitRanges("r", rangeSpec(300), chunk(0, 100, "in/a"), chunk(100, 200, "in/b")))
	require.Equal(t, uint64(300), res[0].Submit.Created)
	require.Equal(t, [5]uint64{300, 300, 0, 0, 0}, counts(h, "r"))
	// The same input again: counted, nothing created.
	res = h.ok(cSubmitRanges("r", rangeSpec(300), chunk(0, 100, "in/a"), chunk(100, 200, "in/b")))
	require.Equal(t, uint64(0), res[0].Submit.Created)
	require.Equal(t, uint64(300), res[0].Submit.AlreadyPending)
	for _, bad := range []*fsmpb.Command{
		cSubmitRanges("r", nil, chunk(50, 100, "in/c")),                         // overlaps a chunk's middle
		cSubmitRanges("r", nil, chunk(0, 100, "in/other")),                      // another object at a held index
		cSubmitRanges("r", nil, chunk(0, 50, "in/a")),                           // another count
		cSubmitRanges("r", nil, chunk(300, 10, "in/d"), chunk(305, 10, "in/e")), // overlap within the command
		cSubmitRanges("r", nil, chunk(300, 0, "in/d")),                          // count 0
		cSubmitRanges("n", &fsmpb.RunSpec{}, chunk(0, 1, "in/a")),               // no store
		cSubmitRanges("r", nil, &fsmpb.NewRange{Index: 300, Count: 1}),          // no payload_ref
	} {
		before := persist(t, h.l)
		err := h.applyAt(bad)[0].Err
		require.ErrorIs(t, err, ErrInvalidCommand, "%v", bad)
		require.Equal(t, before, persist(t, h.l), "a refused submit changed the ledger: %v", err)
	}
	// Items with ids cannot join a range run, nor ranges an item run.
	require.ErrorIs(t, h.one(cSubmit("r", nil, false, ni("x", 999, "p"))).Err, ErrInvalidCommand)
	h.ok(cSubmit("items", nil, false, ni("x", 0, "p")))
	require.ErrorIs(t, h.one(cSubmitRanges("items", rangeSpec(1), chunk(5, 1, "in/a"))).Err, ErrInvalidCommand)
	checkInvariants(t, h.l)
}

func TestRangeClaimCarvesByIndexBudget(t *testing.T) {
	h := newHarness(t)
	h.ok(cSubmitRanges("r", rangeSpec(250), chunk(0, 100, "in/a"), chunk(100, 150, "in/b")))
	h.ok(cRegisterAll("w1", "w2")...)
	got := h.one(cClaimIdx("w1", 10, 30)).Items
	require.Len(t, got, 1)
	require.Equal(t, uint64(0), got[0].Index)
	require.Equal(t, uint64(30), got[0].Count)
	require.Equal(t, uint64(0), got[0].Base)
	require.Equal(t, "in/a", got[0].PayloadRef.Object)
	// A budget past one range takes the rest of it and the head of the next.
	got = h.one(cClaimIdx("w2", 10, 100)).Items
	require.Len(t, got, 2)
	require.Equal(t, [2]uint64{30, 70}, [2]uint64{got[0].Index, got[0].Count})
	require.Equal(t, [3]uint64{100, 30, 100}, [3]uint64{got[1].Index, got[1].Count, got[1].Base})
	require.Equal(t, [5]uint64{250, 120, 130, 0, 0}, counts(h, "r"))
	// A worker's running count, and its conditions, count indexes.
	require.Equal(t, uint64(100), h.worker("w2").Running)
	byRun, byWorker := h.l.RunningConditions(h.now, time.Minute, nil)
	require.Equal(t, uint64(130), byRun["r"].Running)
	require.Equal(t, uint64(30), byWorker["w1"].Running)
	// Without max_indexes, max counts indexes.
	got = h.one(cClaimIdx("w1", 5, 0)).Items
	require.Equal(t, uint64(5), got[0].Count)
	checkInvariants(t, h.l)
}

func TestRangeReportProgressRetryAndCAS(t *testing.T) {
	h := newHarness(t)
	h.ok(cSubmitRanges("r", rangeSpec(100), chunk(0, 100, "in/a")))
	h.ok(cRegisterAll("w1", "w2")...)
	rg := h.one(cClaimIdx("w1", 1, 100)).Items[0]
	id := rg.ID
	require.Equal(t, uint64(1), h.run("r").Ranges, "one range before any report")
	require.NoError(t, h.one(cReport("r", id, "w1", 1, 0, 40, 'a')).Err)
	require.Equal(t, [5]uint64{100, 0, 60, 40, 0}, counts(h, "r"))
	require.Equal(t, uint64(2), h.run("r").Ranges, "the done segment and the running rest")
	// The identical retry is a duplicate; another hash is a conflict.
	res := h.one(cReport("r", id, "w1", 1, 0, 40, 'a'))
	require.NoError(t, res.Err)
	require.True(t, res.Duplicate)
	require.ErrorIs(t, h.one(cReport("r", id, "w1", 1, 0, 40, 'b')).Err, ErrConflict)
	// A report that only starts like the applied one (same lo and result,
	// a longer done_to or a failure inside) is no retry: a CAS miss that
	// changes nothing, never a duplicate that claims [40, 60) done.
	for _, c := range []*fsmpb.Command{
		cReport("r", id, "w1", 1, 0, 60, 'a'),
		cReport("r", id, "w1", 1, 0, 40, 'a', &fsmpb.FailedIndex{Index: 20}),
	} {
		before := persist(t, h.l)
		res := h.applyAt(c)[0]
		require.ErrorIs(t, res.Err, ErrCASMiss)
		require.False(t, res.Duplicate)
		require.Equal(t, before, persist(t, h.l))
	}
	// Stale attempt, another worker, a lo that is not the range's first
	// index, a done_to past its end, the very segment and bytes from
	// another ownership: CAS misses that change nothing.
	for _, c := range []*fsmpb.Command{
		cReport("r", id, "w2", 1, 0, 40, 'a'),
		cReport("r", id, "w1", 2, 0, 40, 'a'),
		cReport("r", id, "w1", 2, 40, 50, 'c'),
		cReport("r", id, "w2", 1, 40, 50, 'c'),
		cReport("r", id, "w1", 1, 45, 50, 'c'),
		cReport("r", id, "w1", 1, 40, 101, 'c'),
	} {
		before := persist(t, h.l)
		require.ErrorIs(t, h.applyAt(c)[0].Err, ErrCASMiss)
		require.Equal(t, before, persist(t, h.l))
	}
	// Malformed reports are refused as invalid.
	for _, c := range []*fsmpb.Command{
		cReport("r", id, "w1", 1, 50, 40, 'c'),                                // reversed
		cReport("r", id, "w1", 1, 40, 40, 'c'),                                // nothing
		cReport("r", id, "w1", 1, 40, 50, 0),                                  // done without a result
		cReport("r", id, "w1", 1, 40, 50, 'c', &fsmpb.FailedIndex{Index: 60}), // failure outside
		cReport("r", id, "w1", 1, 40, 50, 'c', &fsmpb.FailedIndex{Index: 45}, &fsmpb.FailedIndex{Index: 44}),
	} {
		require.ErrorIs(t, h.one(c).Err, ErrInvalidCommand)
	}
	// The rest, in full: the range is gone, all done, the run finished.
	require.NoError(t, h.one(cReport("r", id, "w1", 1, 40, 100, 'd')).Err)
	require.Equal(t, [5]uint64{100, 0, 0, 100, 0}, counts(h, "r"))
	require.False(t, h.run("r").FinishedAt.IsZero())
	// Its retry, after the range is gone, is still a duplicate.
	res = h.one(cReport("r", id, "w1", 1, 40, 100, 'd'))
	require.NoError(t, res.Err)
	require.True(t, res.Duplicate)
	require.Equal(t, uint64(100), h.worker("w1").Completed)
	checkInvariants(t, h.l)
}

func TestRangeFailedIndexesBecomeOneItemRanges(t *testing.T) {
	h := newHarness(t)
	h.ok(cSubmitRanges("r", rangeSpec(10), chunk(0, 10, "in/a")))
	h.ok(cRegister("w1"))
	rg := h.one(cClaimIdx("w1", 1, 10)).Items[0]
	res := h.one(cReport("r", rg.ID, "w1", 1, 0, 6, 'a',
		&fsmpb.FailedIndex{Index: 2, Reason: "bad row"},
		&fsmpb.FailedIndex{Index: 4, Reason: "refused", Permanent: true}))
	require.NoError(t, res.Err)
	require.Equal(t, 1, res.Repended)
	// 0,1,3,5 done; 2 pending again; 4 dead; 6..9 still running.
	require.Equal(t, [5]uint64{10, 1, 4, 4, 1}, counts(h, "r"))
	again := h.one(cClaimIdx("w1", 5, 5)).Items
	require.Len(t, again, 1)
	require.Equal(t, [2]uint64{2, 1}, [2]uint64{again[0].Index, again[0].Count})
	require.Equal(t, uint32(1), again[0].Failures)
	// It fails again: max_failures 2 makes it Dead, with its reason.
	require.NoError(t, h.one(cReport("r", again[0].ID, "w1", again[0].Attempt, 2, 3, 0, &fsmpb.FailedIndex{Index: 2, Reason: "bad row"})).Err)
	require.Equal(t, [5]uint64{10, 0, 4, 4, 2}, counts(h, "r"))
	require.NoError(t, h.one(cReport("r", rg.ID, "w1", 1, 6, 10, 'b')).Err)
	require.Equal(t, [5]uint64{10, 0, 0, 8, 2}, counts(h, "r"))
	// retry_dead re-pends the Dead indexes of the chunk.
	c := cSubmitRanges("r", nil, chunk(0, 10, "in/a"))
	c.GetSubmitRanges().RetryDead = true
	res = h.one(c)
	require.NoError(t, res.Err)
	require.Equal(t, uint64(2), res.Submit.Retried)
	require.Equal(t, uint64(8), res.Submit.AlreadyDone)
	require.Equal(t, [5]uint64{10, 2, 0, 8, 0}, counts(h, "r"))
	checkInvariants(t, h.l)
}

func TestRangeStealSplitsPastHighWater(t *testing.T) {
	h := newHarness(t)
	h.ok(cSubmitRanges("r", rangeSpec(100), chunk(0, 100, "in/a")))
	h.ok(cRegisterAll("v", "t")...)
	rg := h.one(cClaimIdx("v", 1, 100)).Items[0]
	// The victim has started up to 20: 80 unstarted, the thief gets 40.
	started := &fsmpb.ItemKey{Run: "r", Id: rg.ID, Attempt: 1, Started: 20}
	h.ok(cHeartbeat("v", 80, 1, []*fsmpb.ItemKey{started}, nil))
	res := h.one(cSteal("t", 0))
	require.NoError(t, res.Err)
	require.Equal(t, "v", res.Victim)
	require.Len(t, res.Items, 1)
	tail := res.Items[0]
	// At most half the unstarted indexes, and at most MaxStealBatch.
	k := min(40, uint64(DefaultConfig().MaxStealBatch))
	require.Equal(t, [3]uint64{100 - k, k, 2}, [3]uint64{tail.Index, tail.Count, tail.Attempt})
	require.Equal(t, "t", tail.Owner)
	// The victim's report past the cut misses and changes nothing; its
	// heartbeat tells it the new end.
	require.ErrorIs(t, h.one(cReport("r", rg.ID, "v", 1, 0, 100-k+1, 'a')).Err, ErrCASMiss)
	hb := h.one(cHeartbeat("v", 0, 1, nil, []*fsmpb.ItemKey{{Run: "r", Id: rg.ID, Attempt: 1}}))
	require.Equal(t, []RangeBound{{Run: "r", ID: rg.ID, Attempt: 1, Lo: 0, Hi: 100 - k}}, hb.Bounds)
	require.NoError(t, h.one(cReport("r", rg.ID, "v", 1, 0, 100-k, 'a')).Err)
	require.NoError(t, h.one(cReport("r", tail.ID, "t", 2, 100-k, 100, 'b')).Err)
	require.Equal(t, [5]uint64{100, 0, 0, 100, 0}, counts(h, "r"))
	checkInvariants(t, h.l)
}

func TestRangeExpiryNackAndCancel(t *testing.T) {
	h := newHarness(t)
	h.ok(cSubmitRanges("r", rangeSpec(100), chunk(0, 100, "in/a")))
	h.ok(cRegisterAll("w1", "w2")...)
	rg := h.one(cClaimIdx("w1", 1, 50)).Items[0]
	require.NoError(t, h.one(cReport("r", rg.ID, "w1", 1, 0, 10, 'a')).Err)
	// nack_rest gives [10, 50) back.
	nack := cReport("r", rg.ID, "w1", 1, 10, 20, 'b')
	nack.GetReportRange().NackRest = true
	res := h.one(nack)
	require.NoError(t, res.Err)
	require.Equal(t, 30, res.Repended)
	require.Equal(t, [5]uint64{100, 80, 0, 20, 0}, counts(h, "r"))
	// A plain Nack of a range gives all of it back, counted in indexes.
	rg3 := h.one(cClaimIdx("w1", 1, 15)).Items[0]
	res = h.one(cNack("r", string(rg3.ID), "w1", rg3.Attempt))
	require.NoError(t, res.Err)
	require.Equal(t, 15, res.Repended)
	require.Equal(t, [5]uint64{100, 80, 0, 20, 0}, counts(h, "r"))
	// A silent worker's ranges go back to Pending, attempt unchanged.
	rg2 := h.one(cClaimIdx("w2", 2, 40)).Items[0]
	h.now = h.now.Add(time.Minute)
	res = h.one(cExpire(30 * time.Second))
	require.Equal(t, []string{"w1", "w2"}, res.Expired)
	require.Equal(t, 40, res.Repended)
	require.ErrorIs(t, h.one(cReport("r", rg2.ID, "w2", rg2.Attempt, rg2.Index, rg2.Index+1, 'c')).Err, ErrCASMiss)
	// A resubmit with a stale window re-pends a silent owner's range.
	h.ok(cRegister("w3"))
	rg4 := h.one(cClaimIdx("w3", 1, 25)).Items[0]
	h.now = h.now.Add(time.Minute)
	h.ok(cRegister("w2"))
	resub := cSubmitRanges("r", nil, chunk(0, 100, "in/a"))
	resub.GetSubmitRanges().RependStaleNano = int64(30 * time.Second)
	res = h.one(resub)
	require.NoError(t, res.Err)
	require.Equal(t, uint64(25), res.Submit.RependedStale)
	require.ErrorIs(t, h.one(cReport("r", rg4.ID, "w3", rg4.Attempt, rg4.Index, rg4.Index+1, 'd')).Err, ErrCASMiss)
	res = h.one(&fsmpb.Command{Cmd: &fsmpb.Command_CancelRun{CancelRun: &fsmpb.CancelRunCmd{Run: "r"}}})
	require.NoError(t, res.Err)
	require.Equal(t, 80, res.Repended)
	checkInvariants(t, h.l)
}

// TestRangeSnapshotRoundTrip: a ledger with range runs in every state
// persists, restores to the same reads, and persists again to the same
// bytes; a v6-era ledger's items are still items.
func TestRangeSnapshotRoundTrip(t *testing.T) {
	h := newHarness(t)
	h.ok(cSubmitRanges("r", rangeSpec(100), chunk(0, 60, "in/a"), chunk(60, 40, "in/b")))
	h.ok(cSubmit("items", nil, false, ni("x", 0, "p")))
	h.ok(cRegisterAll("v", "t")...)
	rg := h.one(cClaimIdx("v", 2, 70)).Items
	h.ok(cReport("r", rg[0].ID, "v", 1, 0, 30, 'a', &fsmpb.FailedIndex{Index: 7, Reason: "x"}))
	h.ok(cHeartbeat("v", 1, 1, []*fsmpb.ItemKey{{Run: "r", Id: rg[0].ID, Attempt: 1, Started: 35}}, nil))
	h.ok(cSteal("t", 0))
	checkInvariants(t, h.l)
	b := persist(t, h.l)
	l2, err := New(DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, restore(l2, b))
	checkInvariants(t, l2)
	require.Equal(t, dumpLedger(h.l), dumpLedger(l2))
	require.Equal(t, b, persist(t, l2))
	// The restored ledger goes on exactly as the original.
	h2 := &harness{t: t, l: l2, term: h.term, now: h.now, index: h.index}
	for _, hh := range []*harness{h, h2} {
		hh.ok(cClaimIdx("t", 4, 100))
	}
	require.Equal(t, persist(t, h.l), persist(t, l2))
}

// TestRangeLedgerProperty drives random claims, reports (with failures and
// nacks), steals, heartbeats, expiries and snapshot restores through a
// range run with several workers, checking after every step the ledger's
// invariants and that no index is ever done twice; in the end every index
// is done exactly once or dead.
func TestRangeLedgerProperty(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { rangeProperty(t, seed) })
	}
}

func rangeProperty(t *testing.T, seed uint64) {
	rnd := rand.New(rand.NewPCG(seed, 7))
	h := newHarness(t)
	const total = 2000
	var chunks []*fsmpb.NewRange
	for lo := uint64(0); lo < total; {
		n := min(uint64(1+rnd.IntN(400)), total-lo)
		chunks = append(chunks, chunk(lo, n, fmt.Sprintf("in/%d", lo)))
		lo += n
	}
	h.ok(cSubmitRanges("r", &fsmpb.RunSpec{Store: "file:///d", Total: total, MaxFailures: 3}, chunks...))
	workers := []string{"w0", "w1", "w2", "w3"}
	h.ok(cRegisterAll(workers...)...)
	doneBy := make(map[uint64]string) // index -> the report that made it done
	held := map[string][]Item{}       // what each worker believes it holds
	report := func(w string, it Item) {
		// Report a random prefix of what it holds, with the odd failure.
		lo, hi := it.Index, it.Index+it.Count
		to := lo + 1 + uint64(rnd.IntN(int(hi-lo)))
		var failed []*fsmpb.FailedIndex
		for i := lo; i < to; i++ {
			if rnd.IntN(50) == 0 {
				failed = append(failed, &fsmpb.FailedIndex{Index: i, Reason: "flaky", Permanent: rnd.IntN(4) == 0})
			}
		}
		tag := byte('a' + rnd.IntN(20))
		if len(failed) == int(to-lo) {
			tag = 0
		}
		c := cReport("r", it.ID, w, it.Attempt, lo, to, tag, failed...)
		switch rnd.IntN(10) {
		case 0:
			c.GetReportRange().NackRest = true
		case 1:
			if to < hi {
				c.GetReportRange().ReleaseFrom = to + uint64(rnd.IntN(int(hi-to)))
				if c.GetReportRange().ReleaseFrom == lo {
					c.GetReportRange().ReleaseFrom++
				}
			}
		}
		res := h.one(c)
		if res.Err != nil {
			require.ErrorIs(t, res.Err, ErrCASMiss, "seed %d", seed)
			return
		}
		f := 0
		for i := lo; i < to; i++ {
			if f < len(failed) && failed[f].Index == i {
				f++
				continue
			}
			prev, twice := doneBy[i]
			require.False(t, twice, "index %d done twice (%s, then %s/%d)", i, prev, w, it.Attempt)
			doneBy[i] = fmt.Sprintf("%s/%d", w, it.Attempt)
		}
	}
	for step := 0; step < 4000; step++ {
		w := workers[rnd.IntN(len(workers))]
		switch op := rnd.IntN(100); {
		case op < 30:
			res := h.one(cClaimIdx(w, uint32(1+rnd.IntN(4)), uint64(1+rnd.IntN(300))))
			if res.Err == nil {
				held[w] = append(held[w], res.Items...)
			} else {
				h.ok(cRegister(w))
			}
		case op < 70:
			if len(held[w]) == 0 {
				continue
			}
			i := rnd.IntN(len(held[w]))
			it := held[w][i]
			held[w] = append(held[w][:i], held[w][i+1:]...)
			if it.Count == 0 {
				continue
			}
			// Learn the current bound first, as a worker would.
			hb := h.one(cHeartbeat(w, 0, 1, []*fsmpb.ItemKey{{Run: "r", Id: it.ID, Attempt: it.Attempt, Started: it.Index + uint64(rnd.IntN(int(it.Count)))}},
				[]*fsmpb.ItemKey{{Run: "r", Id: it.ID, Attempt: it.Attempt}}))
			if hb.Err != nil || len(hb.Bounds) == 0 {
				continue
			}
			it.Index, it.Count = hb.Bounds[0].Lo, hb.Bounds[0].Hi-hb.Bounds[0].Lo
			report(w, it)
			// Anything left stays held; a fresh claim of it comes back anyway.
			if res := h.one(cHeartbeat(w, 0, 1, nil, []*fsmpb.ItemKey{{Run: "r", Id: it.ID, Attempt: it.Attempt}})); len(res.Bounds) == 1 {
				it.Index, it.Count = res.Bounds[0].Lo, res.Bounds[0].Hi-res.Bounds[0].Lo
				held[w] = append(held[w], it)
			}
		case op < 80:
			res := h.one(cSteal(w, 0))
			if res.Err == nil {
				held[w] = append(held[w], res.Items...)
			}
		case op < 83:
			h.now = h.now.Add(time.Minute)
			h.ok(cRegister(w))
			h.one(cExpire(30 * time.Second))
		case op < 85:
			// A stale report from a worker that lost its range.
			for v, its := range held {
				if v != w && len(its) > 0 {
					it := its[0]
					res := h.one(cReport("r", it.ID, w, it.Attempt, it.Index, it.Index+1, 'z'))
					require.Error(t, res.Err)
					break
				}
			}
		case op < 86:
			b := persist(t, h.l)
			l2, err := New(DefaultConfig())
			require.NoError(t, err)
			require.NoError(t, restore(l2, b))
			require.Equal(t, b, persist(t, l2))
			h.l = l2
		}
		if err := invariantsErr(h.l); err != nil {
			t.Fatalf("seed %d step %d: %v", seed, step, err)
		}
	}
	// Drain: every worker leaves (its ranges go back to Pending), then one
	// claims and finishes everything left.
	for _, w := range workers {
		h.ok(cDeregister(w))
	}
	held = map[string][]Item{}
	h.ok(cRegister("w0"))
	for range 10000 {
		rs := h.run("r")
		if rs.Pending == 0 && rs.Running == 0 {
			break
		}
		h.now = h.now.Add(time.Minute)
		h.ok(cRegister("w0"))
		h.one(cExpire(30 * time.Second))
		cl := h.one(cClaimIdx("w0", 64, 1<<20))
		if cl.Err != nil {
			t.Logf("drain claim: %v", cl.Err)
		}
		for _, it := range cl.Items {
			held["w0"] = append(held["w0"], it)
		}
		for _, it := range held["w0"] {
			c := cReport("r", it.ID, "w0", it.Attempt, it.Index, it.Index+it.Count, 'q')
			if res := h.one(c); res.Err == nil {
				for i := it.Index; i < it.Index+it.Count; i++ {
					_, twice := doneBy[i]
					require.False(t, twice, "index %d done twice", i)
					doneBy[i] = "drain"
				}
			} else {
				t.Fatalf("drain report of a range just claimed: %v", res.Err)
			}
		}
		held["w0"] = nil
	}
	rs := h.run("r")
	if rs.Pending+rs.Running != 0 {
		items, _, _, _ := h.l.Results("r", 0, 0)
		for _, it := range items {
			if it.State == StatePending || it.State == StateRunning {
				t.Logf("left: %s [%d,+%d) owner %q attempt %d failures %d", it.State, it.Index, it.Count, it.Owner, it.Attempt, it.Failures)
			}
		}
	}
	require.Equal(t, uint64(total), rs.Total)
	require.Equal(t, uint64(0), rs.Pending+rs.Running, "seed %d", seed)
	require.Equal(t, rs.Done, uint64(len(doneBy)), "seed %d: the ledger's done count and the reports accepted differ", seed)
	require.Equal(t, uint64(total), rs.Done+rs.Dead)
}

// TestRangeHoldStallsAndProbeResumes: a range whose chunk is missing is
// held (the run stalls, its ranges parked); the probe claim hands out one
// range, and its progress report ends the stall.
func TestRangeHoldStallsAndProbeResumes(t *testing.T) {
	h := newHarness(t)
	h.ok(cSubmitRanges("r", rangeSpec(100), chunk(0, 50, "in/a"), chunk(50, 50, "in/b")))
	h.ok(cRegister("w1"))
	rg := h.one(cClaimIdx("w1", 1, 20)).Items[0]
	require.NoError(t, h.one(cHold("r", string(rg.ID), "w1", rg.Attempt, "in/a", "not found")).Err)
	require.NotNil(t, h.run("r").Stall)
	require.Equal(t, uint64(100), h.run("r").Stall.Parked, "parked counts indexes")
	require.Empty(t, h.one(cClaimIdx("w1", 4, 100)).Items, "a stalled run hands out nothing before its probe is due")
	h.now = h.now.Add(StallProbeMax)
	probe := h.one(cClaimIdx("w1", 4, 100)).Items
	require.Len(t, probe, 1)
	require.NoError(t, h.one(cReport("r", probe[0].ID, "w1", probe[0].Attempt, probe[0].Index, probe[0].Index+1, 'a')).Err)
	require.Nil(t, h.run("r").Stall, "the probe's report ends the stall")
	require.Equal(t, uint64(99), h.run("r").Pending+h.run("r").Running)
	checkInvariants(t, h.l)
}

// TestRangeRunEvents: a range run records run-created when its first chunks
// are submitted, item-dead for an index that dies, and run-finished (with
// its counts in items) when its last range is reported.
func TestRangeRunEvents(t *testing.T) {
	h := newHarness(t)
	h.ok(cSubmitRanges("r", rangeSpec(10), chunk(0, 10, "in/a")))
	h.ok(cRegister("w1"))
	rg := h.one(cClaimIdx("w1", 1, 10)).Items[0]
	h.ok(cReport("r", rg.ID, "w1", 1, 0, 10, 'a', &fsmpb.FailedIndex{Index: 3, Reason: "refused", Permanent: true}))
	evs, _, _ := h.l.Events(0, 100, "r")
	var got []string
	for _, e := range evs {
		got = append(got, fmt.Sprintf("%d %s %d", e.Kind, e.Detail, e.Count))
	}
	require.Len(t, got, 3)
	require.Equal(t, EventRunCreated, evs[0].Kind)
	require.Equal(t, []string{
		fmt.Sprintf("%d refused 1", EventItemDead),
		fmt.Sprintf("%d 9 done, 1 dead 10", EventRunFinished),
	}, got[1:])
}

// TestRangeReleaseFrom: a draining worker gives back the unstarted tail of
// its range while it keeps (and later reports) what it started.
func TestRangeReleaseFrom(t *testing.T) {
	h := newHarness(t)
	h.ok(cSubmitRanges("r", rangeSpec(100), chunk(0, 100, "in/a")))
	h.ok(cRegisterAll("w1", "w2")...)
	rg := h.one(cClaimIdx("w1", 1, 100)).Items[0]
	h.ok(cHeartbeat("w1", 0, 1, []*fsmpb.ItemKey{{Run: "r", Id: rg.ID, Attempt: 1, Started: 30}}, nil))
	rel := cReport("r", rg.ID, "w1", 1, 0, 10, 'a')
	rel.GetReportRange().ReleaseFrom = 30
	res := h.one(rel)
	require.NoError(t, res.Err)
	require.Equal(t, 70, res.Repended)
	require.Equal(t, [5]uint64{100, 70, 20, 10, 0}, counts(h, "r"))
	// Another worker takes the released tail at once.
	got := h.one(cClaimIdx("w2", 1, 100)).Items
	require.Len(t, got, 1)
	require.Equal(t, [2]uint64{30, 70}, [2]uint64{got[0].Index, got[0].Count})
	// The owner reports what it kept; past it is a CAS miss.
	require.ErrorIs(t, h.one(cReport("r", rg.ID, "w1", 1, 10, 31, 'b')).Err, ErrCASMiss)
	require.NoError(t, h.one(cReport("r", rg.ID, "w1", 1, 10, 30, 'b')).Err)
	for _, bad := range []func(*fsmpb.ReportRangeCmd){
		func(c *fsmpb.ReportRangeCmd) { c.ReleaseFrom = 5 },                     // below done_to
		func(c *fsmpb.ReportRangeCmd) { c.ReleaseFrom = 50; c.NackRest = true }, // both
		func(c *fsmpb.ReportRangeCmd) { c.DoneTo = c.Lo; c.ResultRef = nil; c.ReleaseFrom = c.Lo },
	} {
		c := cReport("r", got[0].ID, "w2", got[0].Attempt, 30, 40, 'c')
		bad(c.GetReportRange())
		require.ErrorIs(t, h.one(c).Err, ErrInvalidCommand)
	}
	checkInvariants(t, h.l)
}

// TestRangeCancelCutsUnstarted: cancelling a range run cancels its Pending
// ranges and the unstarted tails of its Running ones; the owners keep (and
// report) what they started, a report past the cut misses.
func TestRangeCancelCutsUnstarted(t *testing.T) {
	h := newHarness(t)
	h.ok(cSubmitRanges("r", rangeSpec(300), chunk(0, 100, "in/a"), chunk(100, 200, "in/b")))
	h.ok(cRegisterAll("w1", "w2")...)
	a := h.one(cClaimIdx("w1", 1, 100)).Items[0]
	b := h.one(cClaimIdx("w2", 1, 100)).Items[0]
	h.ok(cHeartbeat("w1", 0, 1, []*fsmpb.ItemKey{{Run: "r", Id: a.ID, Attempt: 1, Started: 40}}, nil))
	res := h.one(&fsmpb.Command{Cmd: &fsmpb.Command_CancelRun{CancelRun: &fsmpb.CancelRunCmd{Run: "r"}}})
	require.NoError(t, res.Err)
	// 100 pending + 60 unstarted of a + all 100 of b (nothing reported started).
	require.Equal(t, 260, res.Repended)
	rs := h.run("r")
	require.Equal(t, [3]uint64{40, 0, 260}, [3]uint64{rs.Running, rs.Pending, rs.Cancelled})
	require.ErrorIs(t, h.one(cReport("r", a.ID, "w1", 1, 0, 41, 'a')).Err, ErrCASMiss)
	require.ErrorIs(t, h.one(cReport("r", b.ID, "w2", 1, 100, 101, 'b')).Err, ErrCASMiss)
	hb := h.one(cHeartbeat("w1", 0, 1, nil, []*fsmpb.ItemKey{{Run: "r", Id: a.ID, Attempt: 1}}))
	require.Equal(t, uint64(40), hb.Bounds[0].Hi)
	require.NoError(t, h.one(cReport("r", a.ID, "w1", 1, 0, 40, 'a')).Err)
	rs = h.run("r")
	require.Equal(t, [3]uint64{40, 0, 260}, [3]uint64{rs.Done, rs.Running, rs.Cancelled})
	require.False(t, rs.FinishedAt.IsZero())
	// Results pages end at a record's end, never inside it.
	items, next, done, err := h.l.Results("r", 0, 1)
	require.NoError(t, err)
	require.False(t, done)
	require.Equal(t, items[0].Index+items[0].Count, next)
	checkInvariants(t, h.l)
}
