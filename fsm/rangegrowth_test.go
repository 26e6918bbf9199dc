package fsm

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/fsm/fsmpb"
)

// growthRun runs one range run through the ledger: chunks input chunks of
// width indexes each, claimed whole by one worker and reported in reports
// reports per range (each with its own result object); it returns the
// ledger's record count and estimated bytes (Usage), the snapshot's size
// and the live heap the run added.
func growthRun(t *testing.T, chunks, width, reports uint64) (records, usage uint64, snap, heap int) {
	t.Helper()
	h := newHarness(t)
	h.ok(cEpoch("c1", "g1"))
	h.ok(cRegisterAll("worker-1")...)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	spec := &fsmpb.RunSpec{Total: chunks * width, Store: "s3://bucket?region=us-east-1", MaxFailures: 2}
	var batch []*fsmpb.NewRange
	for c := range chunks {
		batch = append(batch, &fsmpb.NewRange{Index: c * width, Count: width,
			PayloadRef: &fsmpb.DataRef{Object: fmt.Sprintf("clusters/c1/runs/growth/1/inputs/%016x", c), Length: width * 32}})
		if len(batch) == 100 || c == chunks-1 {
			h.ok(cSubmitRanges("growth", spec, batch...))
			batch, spec = nil, nil
		}
	}
	step := width / reports
	for n := 0; ; n++ {
		got := h.ok(cClaimIdx("worker-1", 1, width))[0].Items
		if len(got) == 0 {
			break
		}
		it := got[0]
		if it.Count != width {
			t.Fatalf("claim %d took %d indexes, want a whole range of %d", n, it.Count, width)
		}
		for lo := it.Index; lo < it.Index+it.Count; lo += step {
			c := cReport("growth", it.ID, "worker-1", it.Attempt, lo, lo+step, 'a')
			c.GetReportRange().ResultRef.Object = fmt.Sprintf("clusters/c1/runs/growth/1/results/%016x", lo)
			h.ok(c)
		}
	}
	if rs := h.run("growth"); rs.Done != chunks*width {
		t.Fatalf("the run ended with %+v, want %d done", rs, chunks*width)
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	records, usage = h.l.Usage()
	snap = len(persist(t, h.l))
	heap = int(after.HeapAlloc) - int(before.HeapAlloc)
	runtime.KeepAlive(h)
	return records, usage, snap, heap
}

// TestRangeLedgerGrowsWithRecordsNotIndexes: the ledger's state grows with
// its records (one Done segment per report), never with the indexes they
// stand for. The same 200 ranges, reported in the same 4 reports each,
// cost the same records, the same accounted bytes and nearly the same
// snapshot and heap whether a range is 100 indexes wide or 100,000: a
// per-index field, list or map entry coming back would make the wide run
// cost ~1000x more. The live heap per record is also held under a budget
// (what 100M items in ranges of 1000 can afford on a leader of 256 MiB,
// with the GC's headroom).
func TestRangeLedgerGrowsWithRecordsNotIndexes(t *testing.T) {
	const (
		chunks  = 200
		reports = 4
		// maxHeapPerRecord: ~100,000 records at 100M items must stay far
		// under 256 MiB of RSS with the GC's doubling; today a Done segment
		// costs ~500 B (the record, its id and map and index entries, its
		// result key in the run's object table).
		maxHeapPerRecord = 1024
	)
	nRec, nUse, nSnap, nHeap := growthRun(t, chunks, 100, reports)
	wRec, wUse, wSnap, wHeap := growthRun(t, chunks, 100_000, reports)
	t.Logf("narrow (2e4 indexes): %d records, usage %d B, snapshot %d B, heap %d B", nRec, nUse, nSnap, nHeap)
	t.Logf("wide (2e7 indexes): %d records, usage %d B, snapshot %d B, heap %d B", wRec, wUse, wSnap, wHeap)
	if want := uint64(chunks * reports); nRec != want || wRec != want {
		t.Fatalf("records: narrow %d, wide %d; want %d each (one Done segment per report)", nRec, wRec, want)
	}
	if nUse != wUse {
		t.Fatalf("accounted bytes: narrow %d, wide %d; they must not depend on the indexes", nUse, wUse)
	}
	// The snapshot encodes indexes as varints: a few bytes more per
	// record, never per index.
	if wSnap > nSnap+int(wRec)*16 {
		t.Fatalf("snapshot: narrow %d B, wide %d B: %d B more for %d records", nSnap, wSnap, wSnap-nSnap, wRec)
	}
	if wHeap > int(wRec)*maxHeapPerRecord {
		t.Fatalf("live heap after the wide run is %d B for %d records (%d B each), budget %d B a record", wHeap, wRec, wHeap/int(wRec), maxHeapPerRecord)
	}
	if wHeap > 2*nHeap+256<<10 {
		t.Fatalf("live heap: narrow %d B, wide %d B: the wide run's indexes cost memory", nHeap, wHeap)
	}
}

// TestSnapshotSharesDoneSegments: a snapshot holds a range run's Done
// segments by pointer, not as copies (what it allocates grows by a pointer
// and an index a segment), and stays a point-in-time copy all the same:
// persisted while later commands report, fail, cancel and delete the run's
// records (concurrently, as raft persists while the FSM applies; run it
// with -race), it writes the same bytes as a snapshot persisted at once.
func TestSnapshotSharesDoneSegments(t *testing.T) {
	const chunks, width = 400, 1000
	h := newHarness(t)
	h.ok(cEpoch("c1", "g1"))
	h.ok(cRegisterAll("worker-1", "worker-2")...)
	var batch []*fsmpb.NewRange
	for c := range uint64(chunks) {
		batch = append(batch, chunk(c*width, width, fmt.Sprintf("in/%d", c)))
	}
	h.ok(cSubmitRanges("share", rangeSpec(chunks*width), batch...))
	// Three quarters of the ranges done in two reports each, one failed
	// index among them; the rest stay Pending or Running.
	for n := 0; n < chunks*3/4; n++ {
		it := h.ok(cClaimIdx("worker-1", 1, width))[0].Items[0]
		mid := it.Index + width/2
		h.ok(cReport("share", it.ID, "worker-1", it.Attempt, it.Index, mid, 'a'))
		var failed []*fsmpb.FailedIndex
		if n%50 == 0 {
			failed = []*fsmpb.FailedIndex{{Index: mid + 1, Reason: "backend answered 500"}}
		}
		h.ok(cReport("share", it.ID, "worker-1", it.Attempt, mid, it.Index+width, 'b', failed...))
	}
	running := h.ok(cClaimIdx("worker-2", 8, 8*width))[0].Items

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	s1, err := h.l.Snapshot()
	require.NoError(t, err)
	runtime.ReadMemStats(&after)
	snap := s1.(*snapshot)
	records, _ := h.l.Usage()
	if len(snap.recs) != int(records) {
		t.Fatalf("the snapshot holds %d records, the ledger %d", len(snap.recs), records)
	}
	if max := int(records) - chunks*3/4*2; len(snap.copies) > max {
		t.Fatalf("the snapshot copied %d records; at most the %d that are not Done segments may be copied", len(snap.copies), max)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > uint64(records)*64+64<<10 {
		t.Fatalf("Snapshot allocated %d B for %d records (%d B each): it copies the Done segments", alloc, records, alloc/records)
	}
	want := persist(t, h.l)

	// Persist s1 while the ledger moves on.
	got := make(chan []byte)
	go func() {
		var buf bytes.Buffer
		if err := snap.writeTo(&buf); err != nil {
			t.Error(err)
		}
		got <- buf.Bytes()
	}()
	for _, it := range running {
		h.ok(cReport("share", it.ID, "worker-2", it.Attempt, it.Index, it.Index+it.Count, 'c'))
	}
	h.ok(cCancel("share"))
	h.ok(cDelete("share", 0))
	b := <-got
	s1.Release()
	if !bytes.Equal(b, want) {
		t.Fatalf("the snapshot persisted while the ledger changed differs from one persisted at once (%d and %d bytes)", len(b), len(want))
	}
	h2 := newHarness(t)
	require.NoError(t, restore(h2.l, b))
	if rs := h2.run("share"); rs.Done != chunks*3/4*width-chunks*3/4/50 {
		t.Fatalf("the restored run has %+v", rs)
	}
}
