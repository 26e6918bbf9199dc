package fsm

import (
	"crypto/rand"
	"fmt"
	"runtime"
	"testing"

	"github.com/rollout/rollout/fsm/fsmpb"
)

// BenchmarkItemCost measures what one item of a run with a store costs the
// ledger over its whole life (submitted with a payload reference, claimed,
// completed with a result reference), as a realistic run does it: 32-byte
// ids, input chunks of 8 MiB holding ~4000 items, result objects of 64
// items. It reports, per item, the live heap (B/item-heap), the encoded
// log entries of its submit and complete (B/item-log: what every replica
// fsyncs) and the snapshot stream (B/item-snapshot). The budgets of the
// data-plane issue: log <= 200, snapshot <= 120. B/item-snapcopy is what a
// snapshot's point-in-time copy holds while it is persisted.
func BenchmarkItemCost(b *testing.B) {
	const n = 200_000
	for range b.N {
		h := newHarness(b)
		h.ok(cEpoch("c1", "g1"))
		h.ok(cRegisterAll("worker-1")...)
		ids := make([][]byte, n)
		for i := range ids {
			ids[i] = make([]byte, 32)
			_, _ = rand.Read(ids[i])
		}
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		logBytes := 0
		const chunk = 1000
		spec := &fsmpb.RunSpec{Total: n, Store: "s3://bucket?region=us-east-1"}
		for start := 0; start < n; start += chunk {
			items := make([]*fsmpb.NewItem, 0, chunk)
			var objects []string
			for i := start; i < start+chunk; i++ {
				obj := fmt.Sprintf("runs/scale/inputs/%064x", i/4000)
				if len(objects) == 0 || objects[len(objects)-1] != obj {
					objects = append(objects, obj)
				}
				items = append(items, &fsmpb.NewItem{Id: ids[i], Index: uint64(i), PayloadObj: uint32(len(objects)),
					PayloadRef: &fsmpb.DataRef{Offset: uint64(i%4000) * 2048, Length: 2000}})
			}
			c := cSubmit("scale", spec, false, items...)
			c.GetSubmit().Objects = objects
			logBytes += len(h.entry(h.term, c))
			h.ok(c)
			spec = nil
		}
		sum := make([]byte, 32)
		for start := 0; start < n; start += 64 {
			claimed := h.ok(cClaim("worker-1", 64))[0].Items
			obj := fmt.Sprintf("runs/scale/results/%064x", start)
			cm := &fsmpb.CompleteManyCmd{Run: "scale", Worker: "worker-1", Object: obj}
			for k, it := range claimed {
				_, _ = rand.Read(sum)
				cm.Ids = append(cm.Ids, it.ID)
				cm.Attempts = append(cm.Attempts, it.Attempt)
				cm.Offsets = append(cm.Offsets, uint64(k)*2048)
				cm.Lengths = append(cm.Lengths, 2000)
				cm.Hashes = append(cm.Hashes, sum...)
			}
			c := &fsmpb.Command{Cmd: &fsmpb.Command_CompleteMany{CompleteMany: cm}}
			logBytes += len(h.entry(h.term, cClaim("worker-1", 64)))
			logBytes += len(h.entry(h.term, c))
			for _, r := range h.ok(c)[0].Each {
				if r.Err != nil {
					b.Fatal(r.Err)
				}
			}
		}
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		// What a snapshot holds while Raft persists it (a point-in-time
		// copy of every item's fixed fields): transient, but on top of the
		// ledger, so it shows in a replica's peak memory.
		runtime.GC()
		var pre runtime.MemStats
		runtime.ReadMemStats(&pre)
		held, err := h.l.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		var post runtime.MemStats
		runtime.ReadMemStats(&post)
		b.ReportMetric(float64(post.HeapAlloc-pre.HeapAlloc)/n, "B/item-snapcopy")
		held.Release()
		runtime.KeepAlive(held)
		snap := persist(b, h.l)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/item-heap")
		b.ReportMetric(float64(logBytes)/n, "B/item-log")
		b.ReportMetric(float64(len(snap))/n, "B/item-snapshot")
		runtime.KeepAlive(ids)
	}
}
