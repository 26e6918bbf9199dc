package fsm

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/rollout/rollout/fsm/fsmpb"
)

// benchLedger returns a ledger holding n pending items of run "r", submitted
// in chunks the way the API does, with the benchmarks' workers registered.
func benchLedger(b *testing.B, n int) *harness {
	b.Helper()
	h := newHarness(b)
	h.ok(cEpoch("c1", "g1"))
	// The benchmarks' workers: w, w1, w2, w00..w99 and w000..w099.
	ids := []string{"w", "w1", "w2"}
	for i := range 100 {
		ids = append(ids, fmt.Sprintf("w%02d", i), fmt.Sprintf("w%03d", i))
	}
	h.ok(cRegisterAll(ids...)...)
	const chunk = 5000
	payload := "0123456789abcdef"
	for start := 0; start < n; start += chunk {
		items := make([]*fsmpb.NewItem, 0, chunk)
		for i := start; i < min(n, start+chunk); i++ {
			items = append(items, ni(fmt.Sprintf("item-%08d", i), uint64(i), payload))
		}
		h.ok(cSubmit("r", &fsmpb.RunSpec{Total: uint64(n)}, false, items...))
	}
	return h
}

func mustResults(b *testing.B, out interface{}) []Result {
	res, ok := out.(Results)
	if !ok {
		b.Fatalf("apply returned %T: %v", out, out)
	}
	for i, r := range res {
		if r.Err != nil {
			b.Fatalf("command %d: %v", i, r.Err)
		}
	}
	return res
}

// BenchmarkApplyClaimComplete applies entries of 100 commands as a busy
// coordinator would: 20 workers each claim 4 items and complete the 80
// items claimed by the previous entry. One op is one entry.
func BenchmarkApplyClaimComplete(b *testing.B) {
	const (
		workers  = 20
		perClaim = 4
		block    = workers * perClaim // items claimed (and completed) per entry
		perLed   = 500                // entries before a fresh ledger
	)
	result := "a result of a typical size, sixty-four bytes long............."
	var h *harness
	var entries [][]byte
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := i % perLed
		if k == 0 {
			b.StopTimer()
			h = benchLedger(b, (perLed+1)*block)
			entries = entries[:0]
			first := make([]*fsmpb.Command, 0, workers)
			for w := range workers {
				first = append(first, cClaim(fmt.Sprintf("w%02d", w), perClaim))
			}
			h.ok(first...)
			for e := range perLed {
				cmds := make([]*fsmpb.Command, 0, workers+block)
				for w := range workers {
					cmds = append(cmds, cClaim(fmt.Sprintf("w%02d", w), perClaim))
				}
				for j := range block {
					id := fmt.Sprintf("item-%08d", e*block+j)
					cmds = append(cmds, cComplete("r", id, fmt.Sprintf("w%02d", j/perClaim), 1, result))
				}
				entries = append(entries, h.entry(1, cmds...))
			}
			b.StartTimer()
		}
		h.index++
		res := mustResults(b, h.l.Apply(&raft.Log{Index: h.index, Term: 1, Type: raft.LogCommand, Data: entries[k]}))
		if len(res) != workers+block || len(res[0].Items) != perClaim {
			b.Fatalf("entry %d: %d results, first claim got %d items", k, len(res), len(res[0].Items))
		}
	}
	b.ReportMetric(float64(b.N)*(workers+block)/b.Elapsed().Seconds(), "cmds/s")
}

// BenchmarkApplyOneVsHundred applies the same 100 heartbeats as one entry
// and as 100 one-command entries, and reports the throughput of each and
// their ratio (x: how much faster the batched form applies).
func BenchmarkApplyOneVsHundred(b *testing.B) {
	h := benchLedger(b, 1000)
	var cmds []*fsmpb.Command
	var singles [][]byte
	for w := range 100 {
		c := cHeartbeat(fmt.Sprintf("w%03d", w), 1, 12.5, nil, nil)
		cmds = append(cmds, c)
		singles = append(singles, h.entry(1, c))
	}
	batch := h.entry(1, cmds...)
	var t1, t100 time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		for _, e := range singles {
			h.index++
			h.l.Apply(&raft.Log{Index: h.index, Term: 1, Type: raft.LogCommand, Data: e})
		}
		mid := time.Now()
		h.index++
		h.l.Apply(&raft.Log{Index: h.index, Term: 1, Type: raft.LogCommand, Data: batch})
		t1 += mid.Sub(start)
		t100 += time.Since(mid)
	}
	n := float64(b.N) * 100
	b.ReportMetric(n/t1.Seconds(), "cmds/s-1per")
	b.ReportMetric(n/t100.Seconds(), "cmds/s-100per")
	b.ReportMetric(t1.Seconds()/t100.Seconds(), "x")
}

// BenchmarkClaimFlat shows that claiming costs O(batch), not O(items): it
// claims 32 items (and nacks them back) on a ledger of 10,000 pending items
// and on one of 1,000,000, and reports the cost per claimed item of each and
// the ratio (x: 1M over 10k; about 1 means flat).
func BenchmarkClaimFlat(b *testing.B) {
	small := benchLedger(b, 10_000)
	large := benchLedger(b, 1_000_000)
	b.Run("10k_vs_1M", func(b *testing.B) {
		var cost [2]time.Duration
		for i := 0; i < b.N; i++ {
			for k, h := range []*harness{small, large} {
				claim := h.entry(1, cClaim("w", 32))
				start := time.Now()
				h.index++
				res := mustResults(b, h.l.Apply(&raft.Log{Index: h.index, Term: 1, Type: raft.LogCommand, Data: claim}))
				cost[k] += time.Since(start)
				nacks := make([]*fsmpb.Command, 0, 32)
				for _, it := range res[0].Items {
					nacks = append(nacks, cNack("r", string(it.ID), "w", it.Attempt))
				}
				if len(nacks) != 32 {
					b.Fatalf("claimed %d items", len(nacks))
				}
				h.index++
				mustResults(b, h.l.Apply(&raft.Log{Index: h.index, Term: 1, Type: raft.LogCommand, Data: h.entry(1, nacks...)}))
			}
		}
		per := float64(b.N) * 32
		b.ReportMetric(float64(cost[0].Nanoseconds())/per, "ns/item-10k")
		b.ReportMetric(float64(cost[1].Nanoseconds())/per, "ns/item-1M")
		b.ReportMetric(cost[1].Seconds()/cost[0].Seconds(), "x")
	})
}

// BenchmarkSnapshot measures Snapshot (the pause Apply sees) and Persist of
// a ledger of 100,000 items, and reports Snapshot's share of the total.
func BenchmarkSnapshot(b *testing.B) {
	h := benchLedger(b, 100_000)
	h.ok(cClaim("w1", 1000), cClaim("w2", 1000))
	var snapT, persistT time.Duration
	var size int
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		s, err := h.l.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		mid := time.Now()
		w := &countWriter{}
		if err := s.(*snapshot).writeTo(w); err != nil {
			b.Fatal(err)
		}
		snapT += mid.Sub(start)
		persistT += time.Since(mid)
		size = w.n
	}
	b.ReportMetric(float64(snapT.Nanoseconds())/float64(b.N), "ns/snapshot")
	b.ReportMetric(float64(persistT.Nanoseconds())/float64(b.N), "ns/persist")
	b.ReportMetric(snapT.Seconds()/(snapT+persistT).Seconds(), "snapshot-share")
	b.ReportMetric(float64(size), "bytes")
}

type countWriter struct{ n int }

func (w *countWriter) Write(p []byte) (int, error) { w.n += len(p); return len(p), nil }

// BenchmarkClaimWithBlocked claims and completes one item at a time from a
// ledger that also holds blocked items (each waiting on an item nobody
// claims): the cost per op must not grow with the number blocked, since
// blocked items sit in no queue.
func BenchmarkClaimWithBlocked(b *testing.B) {
	for _, blocked := range []int{0, 100_000} {
		b.Run(fmt.Sprintf("blocked=%d", blocked), func(b *testing.B) {
			h := benchLedger(b, 0)
			h.ok(cSubmit("gate", nil, true, &fsmpb.NewItem{Id: []byte("gate"), DeadReason: "never runs"}))
			for start := 0; start < blocked; start += 5000 {
				items := make([]*fsmpb.NewItem, 0, 5000)
				for i := start; i < min(blocked, start+5000); i++ {
					items = append(items, nd(fmt.Sprintf("b-%08d", i), uint64(i+1), "gate"))
				}
				h.ok(cSubmit("gate", nil, false, items...))
			}
			items := make([]*fsmpb.NewItem, b.N)
			for i := range items {
				items[i] = ni(fmt.Sprintf("item-%08d", i), uint64(i), "p")
			}
			for start := 0; start < b.N; start += 5000 {
				h.ok(cSubmit("r", nil, false, items[start:min(b.N, start+5000)]...))
			}
			claim := h.entry(1, cClaim("w", 1))
			b.ResetTimer()
			for range b.N {
				h.index++
				res := mustResults(b, h.l.Apply(&raft.Log{Index: h.index, Term: 1, Type: raft.LogCommand, Data: claim}))
				h.index++
				mustResults(b, h.l.Apply(&raft.Log{Index: h.index, Term: 1, Type: raft.LogCommand,
					Data: h.entry(1, cComplete("r", string(res[0].Items[0].ID), "w", 1, "x"))}))
			}
		})
	}
}

// benchEntryCommands returns the commands of a typical busy entry: 32
// claims of 4 items and 32 completions with 64-byte results, as encoded
// commands.
func benchEntryCommands(b *testing.B) [][]byte {
	b.Helper()
	result := "a result of a typical size, sixty-four bytes long............."
	var raw [][]byte
	for i := range 32 {
		for _, c := range []*fsmpb.Command{
			cClaim(fmt.Sprintf("w%02d", i), 4),
			cComplete("r", fmt.Sprintf("item-%08d", i), fmt.Sprintf("w%02d", i), uint64(i+1), result),
		} {
			data, err := EncodeCommand(c)
			if err != nil {
				b.Fatal(err)
			}
			raw = append(raw, data)
		}
	}
	return raw
}

// BenchmarkEncodeEntry measures the leader's encoding of one log entry of
// 64 commands (EncodeCommand of each, then EncodeEntry with its checksum);
// one op is one entry, ns/cmd the cost per command.
func BenchmarkEncodeEntry(b *testing.B) {
	result := "a result of a typical size, sixty-four bytes long............."
	cmds := make([]*fsmpb.Command, 0, 64)
	for i := range 32 {
		cmds = append(cmds, cClaim(fmt.Sprintf("w%02d", i), 4),
			cComplete("r", fmt.Sprintf("item-%08d", i), fmt.Sprintf("w%02d", i), uint64(i+1), result))
	}
	now := time.Unix(1_700_000_000, 0)
	raw := make([][]byte, len(cmds))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k, c := range cmds {
			data, err := EncodeCommand(c)
			if err != nil {
				b.Fatal(err)
			}
			raw[k] = data
		}
		if _, err := EncodeEntry(now, 3, raw); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(cmds)), "ns/cmd")
}

// BenchmarkDecodeEntry measures what every replica does before it applies
// an entry of 64 commands: decode the entry, verify its checksum and decode
// each command. One op is one entry.
func BenchmarkDecodeEntry(b *testing.B) {
	raw := benchEntryCommands(b)
	data, err := EncodeEntry(time.Unix(1_700_000_000, 0), 3, raw)
	if err != nil {
		b.Fatal(err)
	}
	lg := &raft.Log{Index: 1, Term: 3, Type: raft.LogCommand, Data: data}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e, err := decodeEntry(lg)
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range e.GetCommands() {
			var cmd fsmpb.Command
			if err := proto.Unmarshal(c, &cmd); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(raw)), "ns/cmd")
}

// BenchmarkStealSelection measures one Steal entry on a ledger where 103
// workers are registered and one victim owns 100,000 items: the choice of
// the victim (a scan of the workers) and of the items to move (MaxStealBatch
// from the back of its list). Idle thieves take turns; one op is one steal.
func BenchmarkStealSelection(b *testing.B) {
	const perLed = 500 // steals before a fresh ledger (the victim stays the busiest)
	var h *harness
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%perLed == 0 {
			b.StopTimer()
			h = benchLedger(b, 100_000)
			for range 100_000 / MaxClaimBatch {
				h.ok(cClaim("w", MaxClaimBatch))
			}
			h.ok(cClaim("w", MaxClaimBatch))
			b.StartTimer()
		}
		// A thief that has stolen before is idle again: it reports no
		// backlog, and the victim is still the busiest.
		thief := fmt.Sprintf("w%03d", i%100)
		h.index++
		res := mustResults(b, h.l.Apply(&raft.Log{Index: h.index, Term: 1, Type: raft.LogCommand, Data: h.entry(1, cSteal(thief, 0))}))
		if len(res[0].Items) == 0 {
			b.Fatalf("steal %d by %s moved nothing", i, thief)
		}
	}
}
