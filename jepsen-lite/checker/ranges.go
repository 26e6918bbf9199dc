package checker

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/rollout/rollout/jepsen-lite/history"
	"github.com/rollout/rollout/store"
)

// The range ledger (fsm/ranges.go) checked per index. A range run's records
// stand for runs of consecutive indexes and move them together; the checks
// look at each index on its own:
//
//   - range-indexes: the final ledger's records of a range run partition
//     the indexes of the acknowledged chunks (every index in exactly one
//     record: none lost, none twice, none never submitted), each Done or
//     Dead;
//   - range-results: every Done index's result, read back from the result
//     object its segment names, is there exactly once, under the sample id
//     its input line gives and with the bytes the backend makes of that
//     line, in an object whose blake3 is the one the ledger recorded;
//   - duplicate-results: no index has Done reports accepted from two
//     ownerships (worker, range id, attempt), and the final ledger holds
//     the accepted one;
//   - linearizable: each index's operations (the chunk's submit, the
//     claims, steals, adoptions and heartbeat bounds that hand it out, the
//     range reports that finish or fail it, the reads) against the per-item
//     model (model.go), its fencing token being (range seq, attempt).
//
// The fencing token: a range's id is "R" and its record seq (8 bytes big
// endian), and an index only ever moves to a newer record (a claim's
// carved head, a steal's or release's tail, a Done segment or a failed
// index's record are all new records) or stays in its record while the
// attempt grows. So (seq, attempt), compared in that order, grows with
// every hand-out of an index, as an item's attempt does, and the item
// model applies unchanged: a report by (worker, token) is applied only to
// an index Running(worker, token). The one difference: a Done segment or a
// failed index is a new record, so a read of a Done or Dead index compares
// the attempt only, not the seq (minput.Range).
//
// What the range history cannot say per index is left to the model's
// unseen transitions: nack_rest and release_from give back indexes past
// the report's done_to up to the range's end, which the report does not
// name (Running may become Pending unseen), and a CAS miss, conflict, not
// found or invalid answer changed nothing.

// Checker names of the range ledger.
const (
	RangeIndexes = "range-indexes"
	RangeResults = "range-results"
)

// RangeRun is one range run as read back at the end, for range-results.
type RangeRun struct {
	Run string
	// Want is, per index (Want[i] for index i), what a correct worker
	// records: the sample id of the index's line and the backend's result
	// for it.
	Want []RangeWant
	// Records are the final ledger's records of the run.
	Records []RangeRecord
	// Objects are the result objects the Done records name, as read back
	// from the run's store.
	Objects map[string]RangeObject
	// Err is set when the run could not be read back at all.
	Err string
}

// RangeWant is one index's expected record in a result object.
type RangeWant struct {
	SampleID [32]byte
	Result   []byte
}

// RangeRecord is one record of a range run in the final ledger: the
// indexes [Index, Index+Count) in State; a Done segment names its result
// object (Object) and the blake3 the ledger recorded for it.
type RangeRecord struct {
	Index, Count uint64
	State        string
	Object       string
	Blake3       []byte
}

// RangeObject is a result object read back: its bytes, or why not.
type RangeObject struct {
	Data []byte
	Err  string
}

// tokenBits is how many low bits of a range fencing token are the attempt.
const tokenBits = 32

// rangeToken is the fencing token of range id (hex, as histories write it)
// at attempt: (seq, attempt) as one number. An id that is no range id
// gives the attempt alone.
func rangeToken(id string, attempt uint64) uint64 {
	b, err := hex.DecodeString(id)
	a := min(attempt, 1<<tokenBits-1)
	if err != nil || len(b) != 9 || b[0] != 'R' {
		return a
	}
	seq := binary.BigEndian.Uint64(b[1:])
	return min(seq, 1<<(64-tokenBits)-1)<<tokenBits | a
}

// rangeName names range id (hex) as "R" and its record seq.
func rangeName(id string) string {
	if seq := rangeToken(id, 0) >> tokenBits; seq > 0 {
		return "R" + strconv.FormatUint(seq, 10)
	}
	return short(id)
}

// attemptOf is the attempt part of a fencing token.
func attemptOf(token uint64) uint64 { return token & (1<<tokenBits - 1) }

// describeToken prints a token: "seq.attempt" for a range's, the attempt
// for an item's.
func describeToken(token uint64) string {
	if seq := token >> tokenBits; seq > 0 {
		return fmt.Sprintf("%d.%d", seq, attemptOf(token))
	}
	return strconv.FormatUint(token, 10)
}

// indexKey is the key of one index of a range run in the per-key maps of
// the checkers (history.Key with an ID no item has).
func indexKey(run string, idx uint64) history.Key {
	return history.Key{Run: run, ID: "#" + strconv.FormatUint(idx, 10)}
}

// isRangeKey reports whether k is an indexKey.
func isRangeKey(k history.Key) bool { return strings.HasPrefix(k.ID, "#") }

// rangeIndexName names an indexKey as "run/#index".
func rangeIndexName(k history.Key) string { return k.Run + "/" + k.ID }

// maxRangeIndexes bounds the indexes one range item may expand to in the
// checks (a record wider than this is checked by its bounds only).
const maxRangeIndexes = 1 << 20

// span returns the indexes [lo, lo+n) capped at maxRangeIndexes.
func span(lo, n uint64) (uint64, uint64) {
	return lo, lo + min(n, maxRangeIndexes)
}

// rangeIndexOps turns the paired operations on range runs into porcupine
// operations per index (see the comment at the top). add is itemOps's.
func rangeIndexOps(ops []*Op, add func(op *Op, k history.Key, in minput, out moutput, ret int64)) {
	for _, op := range ops {
		if op.Type == history.TypeFail {
			continue
		}
		unknown := op.Type != history.TypeOK
		switch op.Name {
		case "SubmitRanges":
			for _, it := range op.In {
				lo, hi := span(it.Index, it.Count)
				for idx := lo; idx < hi; idx++ {
					add(op, indexKey(it.Run, idx), minput{Kind: kSubmit, Range: true}, moutput{Unknown: unknown}, op.Return)
				}
			}
		case "Claim", "Steal", "OwnedItems", "Heartbeat":
			if unknown {
				continue
			}
			for _, it := range op.Out {
				if !it.IsRange() {
					continue
				}
				in := minput{Kind: kObserve, Worker: op.Worker, Attempt: rangeToken(it.ID, it.Attempt), Range: true}
				lo, hi := span(it.Index, it.Count)
				for idx := lo; idx < hi; idx++ {
					add(op, indexKey(it.Run, idx), in, moutput{}, op.Return)
				}
			}
		case "ReportRange":
			for i, rep := range op.In {
				var ans *history.Item
				if !unknown && i < len(op.Out) && op.Out[i].Status != "" {
					ans = &op.Out[i]
				}
				rangeReportOps(op, rep, ans, add)
			}
		case "Results":
			if unknown {
				continue
			}
			for _, it := range op.Out {
				if !it.IsRange() {
					continue
				}
				out := moutput{St: stateByte(it.State), Owner: it.Owner, Attempt: rangeToken(it.ID, it.Attempt), Result: it.Result}
				lo, hi := span(it.Index, it.Count)
				for idx := lo; idx < hi; idx++ {
					add(op, indexKey(it.Run, idx), minput{Kind: kRead, Range: true}, out, op.Return)
				}
			}
		}
	}
}

// rangeReportOps adds the per-index operations of one RangeReport rep of
// op, answered by ans (nil: no answer, the outcome is unknown). The done
// indexes are Done reports of the result object, the failed ones FAILED
// reports; an answer other than APPLIED changed nothing, and a duplicate's
// failed indexes say nothing (they may have moved on since).
func rangeReportOps(op *Op, rep history.Item, ans *history.Item, add func(op *Op, k history.Key, in minput, out moutput, ret int64)) {
	if rep.DoneTo <= rep.Index {
		return // a release or a whole nack: nothing per index to check
	}
	if ans != nil && ans.Status != "APPLIED" {
		return
	}
	token := rangeToken(rep.ID, rep.Attempt)
	lo, hi := span(rep.Index, rep.DoneTo-rep.Index)
	for idx := lo; idx < hi; idx++ {
		in := minput{Kind: kReport, Worker: op.Worker, Attempt: token, Outcome: "DONE", Result: rep.Result, Range: true}
		if slices.Contains(rep.Failed, idx) {
			if ans != nil && ans.Dup {
				continue
			}
			in.Outcome, in.Result = "FAILED", ""
		}
		k := indexKey(rep.Run, idx)
		if ans == nil {
			add(op, k, in, moutput{Unknown: true}, Open)
			continue
		}
		add(op, k, in, moutput{Status: "APPLIED"}, op.Return)
	}
}

// rangeRuns returns the chunks every SubmitRanges invocation named and
// those an acknowledged one named, per run.
func rangeRuns(ops []*Op) (all, acked map[string][]history.Item) {
	all, acked = map[string][]history.Item{}, map[string][]history.Item{}
	for _, op := range ops {
		if op.Name != "SubmitRanges" {
			continue
		}
		for _, it := range op.In {
			all[it.Run] = append(all[it.Run], it)
			if op.Type == history.TypeOK {
				acked[it.Run] = append(acked[it.Run], it)
			}
		}
	}
	return all, acked
}

// covers reports whether one of chunks holds index idx.
func covers(chunks []history.Item, idx uint64) bool {
	return slices.ContainsFunc(chunks, func(c history.Item) bool { return idx >= c.Index && idx-c.Index < c.Count })
}

// rangeIndexes checks the final ledger's records of every range run
// against the chunks submitted (RangeIndexes). It reports false when no
// range run was submitted.
func rangeIndexes(in Input, ops []*Op) (Verdict, bool) {
	all, acked := rangeRuns(ops)
	if len(all) == 0 {
		return Verdict{}, false
	}
	if in.FinalErr != "" {
		msg := "the final ledger could not be read: " + in.FinalErr
		return Verdict{Name: RangeIndexes, Count: 1, Detail: msg, Examples: []string{msg}}, true
	}
	byRun := map[string][]history.Item{}
	for _, it := range in.Final {
		if it.IsRange() {
			byRun[it.Run] = append(byRun[it.Run], it)
		}
	}
	var bad []string
	indexes, records := 0, 0
	for _, run := range sortedNames(all) {
		recs := byRun[run]
		records += len(recs)
		slices.SortFunc(recs, func(a, b history.Item) int { return cmp.Compare(a.Index, b.Index) })
		seen := map[uint64]bool{}
		for _, r := range recs {
			if r.State != "DONE" && r.State != "DEAD" {
				bad = append(bad, fmt.Sprintf("%s/#%d..%d: %s (owner %q, attempt %d) at the end", run, r.Index, r.Index+r.Count-1, r.State, r.Owner, r.Attempt))
			}
			lo, hi := span(r.Index, r.Count)
			for idx := lo; idx < hi; idx++ {
				switch {
				case seen[idx]:
					bad = append(bad, fmt.Sprintf("%s/#%d: in two records of the final ledger", run, idx))
				case !covers(all[run], idx):
					bad = append(bad, fmt.Sprintf("%s/#%d: in the ledger (%s), in no submitted chunk", run, idx, r.State))
				}
				seen[idx] = true
			}
		}
		for _, c := range acked[run] {
			lo, hi := span(c.Index, c.Count)
			for idx := lo; idx < hi; idx++ {
				if !seen[idx] {
					bad = append(bad, fmt.Sprintf("%s/#%d: its chunk [%d, %d) was acknowledged by SubmitRanges, the index is in no record of the final ledger",
						run, idx, c.Index, c.Index+c.Count))
					seen[idx] = true // once
				}
			}
		}
		indexes += len(seen)
	}
	detail := fmt.Sprintf("range runs %s: %d indexes in %d records of the final ledger, each in exactly one record of an acknowledged chunk, Done or Dead",
		strings.Join(sortedNames(all), ", "), indexes, records)
	return verdict(RangeIndexes, detail, bad), true
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// rangeResults checks every Done index of in.Ranges against its result
// object (RangeResults). It reports false when there is no range run.
func rangeResults(in Input) (Verdict, bool) {
	if len(in.Ranges) == 0 {
		return Verdict{}, false
	}
	var bad []string
	var runs []string
	done, objects := 0, 0
	for _, rr := range in.Ranges {
		runs = append(runs, rr.Run)
		if rr.Err != "" {
			bad = append(bad, fmt.Sprintf("%s: the results could not be read back: %s", rr.Run, rr.Err))
			continue
		}
		decoded := map[string][]store.RangeResult{}
		for _, rec := range rr.Records {
			if rec.State != "DONE" {
				continue
			}
			name := fmt.Sprintf("%s/#%d..%d", rr.Run, rec.Index, rec.Index+rec.Count-1)
			entries, err := rangeObject(rr, rec, decoded)
			if err != "" {
				bad = append(bad, name+": "+err)
				continue
			}
			lo, hi := span(rec.Index, rec.Count)
			for idx := lo; idx < hi; idx++ {
				done++
				if msg := checkRangeEntry(rr, entries, idx); msg != "" {
					bad = append(bad, fmt.Sprintf("%s/#%d: %s (object %s)", rr.Run, idx, msg, rec.Object))
				}
			}
		}
		objects += len(decoded)
	}
	detail := fmt.Sprintf("range runs %s: %d Done indexes read back from %d result objects, each recorded once under its line's sample id with the backend's result for it",
		strings.Join(runs, ", "), done, objects)
	return verdict(RangeResults, detail, bad), true
}

// rangeObject returns the decoded entries of Done record rec's result
// object (decoding each object once, into decoded), or why they cannot be
// trusted.
func rangeObject(rr RangeRun, rec RangeRecord, decoded map[string][]store.RangeResult) ([]store.RangeResult, string) {
	if rec.Object == "" {
		return nil, "Done without a result object"
	}
	if es, ok := decoded[rec.Object]; ok {
		return es, ""
	}
	obj, ok := rr.Objects[rec.Object]
	switch {
	case !ok:
		return nil, fmt.Sprintf("its result object %s was not read back", rec.Object)
	case obj.Err != "":
		return nil, fmt.Sprintf("its result object %s: %s", rec.Object, obj.Err)
	}
	if sum := store.Hash(obj.Data); !bytes.Equal(sum[:], rec.Blake3) {
		return nil, fmt.Sprintf("its result object %s does not match the blake3 the ledger recorded", rec.Object)
	}
	es, err := store.DecodeRangeResults(obj.Data)
	if err != nil {
		return nil, fmt.Sprintf("its result object %s: %v", rec.Object, err)
	}
	decoded[rec.Object] = es
	return es, ""
}

// checkRangeEntry says what is wrong with index idx's entry among entries
// ("" when it is the one expected).
func checkRangeEntry(rr RangeRun, entries []store.RangeResult, idx uint64) string {
	i, found := slices.BinarySearchFunc(entries, idx, func(e store.RangeResult, t uint64) int { return cmp.Compare(e.Index, t) })
	switch {
	case !found:
		return "no result for the index in its segment's object"
	case idx >= uint64(len(rr.Want)):
		return "an index past the run's total"
	}
	e, want := entries[i], rr.Want[idx]
	if e.SampleID != want.SampleID {
		return fmt.Sprintf("sample id %x, its line's is %x", e.SampleID[:8], want.SampleID[:8])
	}
	if !bytes.Equal(e.Result, want.Result) {
		return fmt.Sprintf("result %q, the backend makes %q of its line", clip(e.Result), clip(want.Result))
	}
	return ""
}

func clip(b []byte) string {
	if len(b) > 60 {
		return string(b[:60]) + "..."
	}
	return string(b)
}

// rangeAccepted is one ownership's Done report of an index that the
// ledger applied.
type rangeAccepted struct {
	worker, id string
	attempt    uint64
	result, by string
}

// rangeDuplicates finds indexes of range runs with Done reports applied
// for two ownerships, or whose final record is not the applied one. It
// returns the Done reports applied (per index) and the indexes with one.
func rangeDuplicates(ops []*Op, final []history.Item) (applied, indexes int, bad []string) {
	acc := map[history.Key][]rangeAccepted{}
	for _, op := range ops {
		if op.Name != "ReportRange" || op.Type != history.TypeOK {
			continue
		}
		for i, rep := range op.In {
			if i >= len(op.Out) || op.Out[i].Status != "APPLIED" || rep.DoneTo <= rep.Index {
				continue
			}
			a := rangeAccepted{worker: op.Worker, id: rep.ID, attempt: rep.Attempt, result: rep.Result, by: op.Process}
			lo, hi := span(rep.Index, rep.DoneTo-rep.Index)
			for idx := lo; idx < hi; idx++ {
				if slices.Contains(rep.Failed, idx) {
					continue
				}
				applied++
				k := indexKey(rep.Run, idx)
				if !slices.ContainsFunc(acc[k], func(b rangeAccepted) bool {
					return b.worker == a.worker && b.id == a.id && b.attempt == a.attempt && b.result == a.result
				}) {
					acc[k] = append(acc[k], a)
				}
			}
		}
	}
	finalAt := finalRangeRecords(final)
	for _, k := range sortedKeys(acc) {
		as := acc[k]
		if len(as) > 1 {
			var desc []string
			for _, a := range as {
				desc = append(desc, fmt.Sprintf("%s range %s attempt %d result %s (%s)", a.worker, rangeName(a.id), a.attempt, a.result, a.by))
			}
			bad = append(bad, fmt.Sprintf("%s: %d accepted results: %s", rangeIndexName(k), len(as), strings.Join(desc, "; ")))
			continue
		}
		a := as[0]
		if f, ok := finalAt(k); ok && f.State == "DONE" && (f.Owner != a.worker || f.Attempt != a.attempt || f.Result != a.result) {
			bad = append(bad, fmt.Sprintf("%s: the ledger holds %s attempt %d result %s, but %s attempt %d result %s was accepted",
				rangeIndexName(k), f.Owner, f.Attempt, f.Result, a.worker, a.attempt, a.result))
		}
	}
	return applied, len(acc), bad
}

// finalRangeRecords returns a lookup of the final record holding an index
// of a range run.
func finalRangeRecords(final []history.Item) func(history.Key) (history.Item, bool) {
	byRun := map[string][]history.Item{}
	for _, it := range final {
		if it.IsRange() {
			byRun[it.Run] = append(byRun[it.Run], it)
		}
	}
	for _, recs := range byRun {
		slices.SortFunc(recs, func(a, b history.Item) int { return cmp.Compare(a.Index, b.Index) })
	}
	return func(k history.Key) (history.Item, bool) {
		idx, err := strconv.ParseUint(strings.TrimPrefix(k.ID, "#"), 10, 64)
		if err != nil {
			return history.Item{}, false
		}
		recs := byRun[k.Run]
		i, _ := slices.BinarySearchFunc(recs, idx, func(r history.Item, t uint64) int {
			if t < r.Index {
				return 1
			}
			if t-r.Index >= r.Count {
				return -1
			}
			return 0
		})
		if i < len(recs) && idx >= recs[i].Index && idx-recs[i].Index < recs[i].Count {
			return recs[i], true
		}
		return history.Item{}, false
	}
}
