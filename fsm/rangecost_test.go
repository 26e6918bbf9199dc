package fsm

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/rollout/rollout/fsm/fsmpb"
)

// BenchmarkRangeCost measures what a range run costs the ledger per item
// over its whole life, as a realistic batch run does it: 10,000,000
// indexes in input chunks of 4,000 lines (8 MiB of 2 KB prompts each),
// submitted 100 chunks a command; 4 workers claim ranges of 2,000 indexes
// and report progress every 500 with one result object each; one index in
// 10,000 fails once and is retried as a one-index range. It reports, per
// item: the encoded log entries of every command (B/item-log: what each
// replica fsyncs), the snapshot stream mid-run and at the end
// (B/item-snap-mid, B/item-snapshot), the live heap at the end and mid-run
// (B/item-heap, B/item-heap-mid), and the apply CPU (ns/item). The issue's
// budgets: log <= 2, snapshot <= 1 byte per item.
func BenchmarkRangeCost(b *testing.B) {
	const (
		n        = 10_000_000
		perChunk = 4_000
		claimN   = 2_000
		reportN  = 500
	)
	for range b.N {
		h := newHarness(b)
		h.ok(cEpoch("c1", "g1"))
		workers := []string{"worker-1", "worker-2", "worker-3", "worker-4"}
		h.ok(cRegisterAll(workers...)...)
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		logBytes := 0
		apply := func(cmds ...*fsmpb.Command) []Result {
			logBytes += len(h.entry(h.term, cmds...))
			return h.ok(cmds...)
		}
		start := time.Now()
		spec := &fsmpb.RunSpec{Total: n, Store: "s3://bucket?region=us-east-1"}
		var chunks []*fsmpb.NewRange
		for lo := uint64(0); lo < n; lo += perChunk {
			chunks = append(chunks, &fsmpb.NewRange{Index: lo, Count: perChunk,
				PayloadRef: &fsmpb.DataRef{Object: fmt.Sprintf("runs/scale/inputs/%064x", lo/perChunk), Length: perChunk * 2048}})
			if len(chunks) == 100 || lo+perChunk >= n {
				apply(cSubmitRanges("scale", spec, chunks...))
				chunks, spec = nil, nil
			}
		}
		var midSnap, midHeap int
		reports := 0
		for done := false; !done; {
			done = true
			for _, w := range workers {
				got := apply(cClaimIdx(w, 4, claimN))[0].Items
				for _, it := range got {
					done = false
					for lo := it.Index; lo < it.Index+it.Count; lo += reportN {
						to := min(lo+reportN, it.Index+it.Count)
						reports++
						var failed []*fsmpb.FailedIndex
						if it.Count > 1 && lo%10_000 == 0 {
							failed = []*fsmpb.FailedIndex{{Index: lo, Reason: "backend answered 500"}}
						}
						tag := byte('a' + reports%26)
						c := cReport("scale", it.ID, w, it.Attempt, lo, to, tag, failed...)
						c.GetReportRange().ResultRef.Object = fmt.Sprintf("runs/scale/results/%064x", reports)
						if len(failed) == int(to-lo) {
							c.GetReportRange().ResultRef = nil
						}
						apply(c)
					}
				}
			}
			if midSnap == 0 && h.run("scale").Done >= n/2 {
				midSnap = len(persist(b, h.l))
				runtime.GC()
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				midHeap = int(m.HeapAlloc) - int(before.HeapAlloc)
			}
		}
		elapsed := time.Since(start)
		rs := h.run("scale")
		if rs.Done+rs.Dead != n || rs.Pending+rs.Running != 0 {
			b.Fatalf("run ended with %+v", rs)
		}
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		snap := persist(b, h.l)
		b.ReportMetric(float64(logBytes)/n, "B/item-log")
		b.ReportMetric(float64(midSnap)/n, "B/item-snap-mid")
		b.ReportMetric(float64(len(snap))/n, "B/item-snapshot")
		b.ReportMetric(float64(int(after.HeapAlloc)-int(before.HeapAlloc))/n, "B/item-heap")
		b.ReportMetric(float64(midHeap)/n, "B/item-heap-mid")
		b.ReportMetric(float64(elapsed.Nanoseconds())/n, "ns/item")
		b.ReportMetric(float64(reports), "reports")
		runtime.KeepAlive(h)
	}
}
