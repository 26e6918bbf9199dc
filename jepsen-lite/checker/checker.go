package checker

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/rollout/rollout/jepsen-lite/history"
)

// Checker names.
const (
	Lost         = "lost-items"
	Unexpected   = "unexpected-items"
	Duplicates   = "duplicate-results"
	Incomplete   = "incomplete-items"
	StaleReplies = "stale-replies"
	Epochs       = "monotonic-epochs"
	Linearizable = "linearizable"
	Completion   = "completion-bound"
	// HostileRefused fails when an operation of the hostile nemesis was
	// accepted or changed anything.
	HostileRefused = "hostile-refused"
)

// maxExamples caps the examples listed per verdict.
const maxExamples = 10

// Input is what Check looks at.
type Input struct {
	// Events is the merged history, in time order.
	Events []history.Event
	// Final is every item of every run as read at the end; FinalErr is set
	// when it could not be read.
	Final    []history.Item
	FinalErr string
	// Totals are the runs and their sizes.
	Totals map[string]uint64
	// LastHeal is the history time of the last heal; Completed the time the
	// runs were seen complete (0: never). Bound is the allowed gap.
	LastHeal, Completed int64
	Bound               time.Duration
	// VisualizeDir, when set, receives porcupine's HTML visualization of up
	// to 3 non-linearizable items.
	VisualizeDir string
	// LinearizabilityTimeout bounds porcupine per item (default 10s);
	// a timeout counts as a pass (no violation found) and is reported.
	LinearizabilityTimeout time.Duration
	// Hostile says the hostile nemesis ran: a history without a hostile
	// operation then fails hostile-refused.
	Hostile bool
	// Store is the runs' data read back through their object stores
	// (StoreResults).
	Store StoreInput
	// Flood is what the flood checker needs besides the history (it runs
	// when the history has a flood fault).
	Flood FloodInput
	// Ranges are the range runs read back through their stores at the end
	// (range-results; ranges.go). Final holds their records too (items
	// with a Count), which range-indexes checks.
	Ranges []RangeRun
	// Tenants are the runs' tenants and priorities (tenants.go); with
	// none, the tenant checkers do not run.
	Tenants TenantsInput
	// Federation is what the federation checkers need (federation.go);
	// with no Parent they do not run.
	Federation FedInput
}

// Verdict is one checker's result.
type Verdict struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	// Count is the number of violations (items, replies, ...).
	Count int `json:"count"`
	// Detail summarises what was checked.
	Detail string `json:"detail"`
	// Examples are the first violations.
	Examples []string `json:"examples,omitempty"`
}

// Result is every verdict.
type Result struct {
	Verdicts []Verdict `json:"verdicts"`
	// Visualizations are the files written (porcupine HTML).
	Visualizations []string `json:"visualizations,omitempty"`
	// Ops counts the operations by name.
	Ops []OpCounts `json:"ops"`
	// Hostile counts the hostile nemesis' operations per attack.
	Hostile []AttackCount `json:"hostile,omitempty"`
}

// OK reports whether every verdict passed.
func (r Result) OK() bool {
	for _, v := range r.Verdicts {
		if !v.OK {
			return false
		}
	}
	return true
}

// Failed returns the names of the verdicts that failed.
func (r Result) Failed() []string {
	var out []string
	for _, v := range r.Verdicts {
		if !v.OK {
			out = append(out, v.Name)
		}
	}
	return out
}

// Verdict returns the named verdict.
func (r Result) Verdict(name string) (Verdict, bool) {
	for _, v := range r.Verdicts {
		if v.Name == name {
			return v, true
		}
	}
	return Verdict{}, false
}

// verdict builds a Verdict from its violations.
func verdict(name, detail string, violations []string) Verdict {
	v := Verdict{Name: name, OK: len(violations) == 0, Count: len(violations), Detail: detail}
	if len(violations) > maxExamples {
		v.Examples = append(violations[:maxExamples:maxExamples], fmt.Sprintf("... and %d more", len(violations)-maxExamples))
	} else {
		v.Examples = violations
	}
	return v
}

// Check runs every checker.
func Check(in Input) Result {
	ops := Pair(in.Events)
	res := Result{Ops: Count(ops)}
	submitted, acked := submittedItems(ops)
	final := map[history.Key]history.Item{}
	for _, it := range in.Final {
		final[it.Key()] = it
	}
	name := func(k history.Key) string {
		if it, ok := final[k]; ok {
			return fmt.Sprintf("%s/%d", k.Run, it.Index)
		}
		if it, ok := submitted[k]; ok {
			return fmt.Sprintf("%s/%d", k.Run, it.Index)
		}
		return k.Run + "/" + short(k.ID)
	}

	// Lost, unexpected, incomplete: against the final ledger.
	if in.FinalErr != "" {
		msg := "the final ledger could not be read: " + in.FinalErr
		for _, n := range []string{Lost, Unexpected, Incomplete} {
			res.Verdicts = append(res.Verdicts, Verdict{Name: n, Count: 1, Detail: msg, Examples: []string{msg}})
		}
	} else {
		var lost, unexpected, incomplete []string
		for _, k := range sortedKeys(acked) {
			if _, ok := final[k]; !ok {
				lost = append(lost, name(k)+": acknowledged by SubmitItems, absent from the ledger")
			}
		}
		for _, it := range in.Final {
			if it.IsRange() {
				continue // range-indexes
			}
			if _, ok := submitted[it.Key()]; !ok {
				unexpected = append(unexpected, fmt.Sprintf("%s/%d: in the ledger, never submitted", it.Run, it.Index))
			}
			if it.State != "DONE" && it.State != "DEAD" {
				incomplete = append(incomplete, fmt.Sprintf("%s/%d: %s (owner %q, attempt %d)", it.Run, it.Index, it.State, it.Owner, it.Attempt))
			}
		}
		for _, op := range ops {
			if op.Type != history.TypeOK {
				continue
			}
			if op.Name == "ReportRange" {
				continue // answers name ranges: range-indexes
			}
			for _, it := range op.Out {
				if it.Run == "" || it.IsRange() {
					continue
				}
				if _, ok := submitted[it.Key()]; !ok {
					unexpected = append(unexpected, fmt.Sprintf("%s: %s by %s returned an item never submitted", name(it.Key()), op.Name, op.Process))
				}
			}
		}
		res.Verdicts = append(res.Verdicts,
			verdict(Lost, fmt.Sprintf("%d items acknowledged, %d in the final ledger", len(acked), countItems(in.Final)), lost),
			verdict(Unexpected, fmt.Sprintf("%d items submitted", len(submitted)), unexpected),
			verdict(Incomplete, "every item Done or Dead at the end", incomplete))
	}

	res.Verdicts = append(res.Verdicts, duplicates(ops, final, in.Final, name))
	if rv, ok := rangeIndexes(in, ops); ok {
		res.Verdicts = append(res.Verdicts, rv)
	}
	if rv, ok := rangeResults(in); ok {
		res.Verdicts = append(res.Verdicts, rv)
	}
	res.Verdicts = append(res.Verdicts, staleReplies(in.Events))
	res.Verdicts = append(res.Verdicts, epochs(in.Events, ops))
	lin, files := linearizable(ops, in, name)
	res.Verdicts = append(res.Verdicts, lin)
	res.Visualizations = files
	res.Verdicts = append(res.Verdicts, completion(in))
	hv, counts := hostileRefused(in, submitted)
	res.Verdicts = append(res.Verdicts, hv)
	res.Hostile = counts
	if iv, ok := impostorRefused(in); ok {
		res.Verdicts = append(res.Verdicts, iv)
	}
	res.Verdicts = append(res.Verdicts, storeResults(in))
	if sv, ok := inputStall(in); ok {
		res.Verdicts = append(res.Verdicts, sv)
	}
	if fv, ok := floodCheck(in); ok {
		res.Verdicts = append(res.Verdicts, fv)
	}
	if rv, ok := revokedRefused(in.Events, ops); ok {
		res.Verdicts = append(res.Verdicts, rv)
	}
	if len(in.Tenants.Runs) > 0 {
		res.Verdicts = append(res.Verdicts, tenantsFinish(in), tenantsStarved(in, ops))
	}
	if in.Federation.Parent != "" {
		res.Verdicts = append(res.Verdicts, federation(in.Federation)...)
	}
	return res
}

// submittedItems returns every item named by a SubmitItems invocation and
// those an acknowledged one named.
func submittedItems(ops []*Op) (all, acked map[history.Key]history.Item) {
	all, acked = map[history.Key]history.Item{}, map[history.Key]history.Item{}
	for _, op := range ops {
		if op.Name != "SubmitItems" {
			continue
		}
		for _, it := range op.In {
			all[it.Key()] = it
			if op.Type == history.TypeOK {
				acked[it.Key()] = it
			}
		}
	}
	return all, acked
}

func sortedKeys[V any](m map[history.Key]V) []history.Key {
	out := make([]history.Key, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b history.Key) int { return cmp.Or(cmp.Compare(a.Run, b.Run), cmp.Compare(a.ID, b.ID)) })
	return out
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// accepted is one completion the ledger applied.
type accepted struct {
	worker  string
	attempt uint64
	result  string
	by      string // process
}

// countItems counts the items of final that are not range records.
func countItems(final []history.Item) int {
	n := 0
	for _, it := range final {
		if !it.IsRange() {
			n++
		}
	}
	return n
}

// duplicates finds items with more than one accepted result: Done reports
// APPLIED for two different (worker, attempt) pairs, or a final record that
// differs from an APPLIED completion; and the same for every index of a
// range run (rangeDuplicates), from all, the final ledger.
func duplicates(ops []*Op, final map[history.Key]history.Item, all []history.Item, name func(history.Key) string) Verdict {
	acc := map[history.Key][]accepted{}
	n := 0
	for _, op := range ops {
		if op.Name != "Report" || op.Type != history.TypeOK {
			continue
		}
		sent := map[string]history.Item{}
		for _, it := range op.In {
			sent[it.ID] = it
		}
		for _, it := range op.Out {
			if it.Status != "APPLIED" {
				continue
			}
			in, ok := sent[it.ID]
			if !ok || in.Outcome != "DONE" {
				continue
			}
			n++
			k := in.Key()
			a := accepted{worker: op.Worker, attempt: in.Attempt, result: in.Result, by: op.Process}
			if !slices.ContainsFunc(acc[k], func(b accepted) bool { return b.worker == a.worker && b.attempt == a.attempt && b.result == a.result }) {
				acc[k] = append(acc[k], a)
			}
		}
	}
	var bad []string
	for _, k := range sortedKeys(acc) {
		as := acc[k]
		pairs := map[string]bool{}
		var desc []string
		for _, a := range as {
			pairs[fmt.Sprintf("%s/%d", a.worker, a.attempt)] = true
			desc = append(desc, fmt.Sprintf("%s attempt %d result %s (%s)", a.worker, a.attempt, a.result, a.by))
		}
		if len(pairs) > 1 {
			bad = append(bad, fmt.Sprintf("%s: %d accepted results: %s", name(k), len(pairs), strings.Join(desc, "; ")))
			continue
		}
		if f, ok := final[k]; ok && f.State == "DONE" {
			a := as[0]
			if f.Owner != a.worker || f.Attempt != a.attempt || f.Result != a.result {
				bad = append(bad, fmt.Sprintf("%s: the ledger holds %s attempt %d result %s, but %s attempt %d result %s was accepted",
					name(k), f.Owner, f.Attempt, f.Result, a.worker, a.attempt, a.result))
			}
		}
	}
	detail := fmt.Sprintf("%d Done reports applied, on %d items", n, len(acc))
	if rn, ri, rbad := rangeDuplicates(ops, all); rn > 0 || len(rbad) > 0 {
		detail += fmt.Sprintf("; %d Done indexes applied by range reports, on %d indexes of range runs", rn, ri)
		bad = append(bad, rbad...)
	}
	return verdict(Duplicates, detail, bad)
}

// staleReplies finds replies a worker's epoch guard accepted from a term
// older than the highest it had seen (or without a term).
func staleReplies(events []history.Event) Verdict {
	var bad []string
	checks, rejected := 0, 0
	for _, ev := range events {
		if ev.Type != history.TypeGuard {
			continue
		}
		checks++
		if ev.Rejected {
			rejected++
			continue
		}
		what := "reply"
		if ev.Hint {
			what = "leader hint"
		}
		if ev.Term == 0 {
			bad = append(bad, fmt.Sprintf("%s accepted a %s to %s from %s without a term", ev.Process, what, ev.Op, ev.Addr))
		} else if ev.Term < ev.Highest {
			bad = append(bad, fmt.Sprintf("%s accepted a %s to %s from %s of term %d after seeing term %d",
				ev.Process, what, ev.Op, ev.Addr, ev.Term, ev.Highest))
		}
	}
	return verdict(StaleReplies, fmt.Sprintf("%d epoch-guard checks by workers, %d stale replies rejected", checks, rejected), bad)
}

// epochs checks that the terms each client accepted never decrease: the
// replies of each sequential harness client in order, and each worker's
// accepted guard checks in the order the guard made them.
func epochs(events []history.Event, ops []*Op) Verdict {
	var bad []string
	highest := map[string]uint64{}
	clients := map[string]bool{}
	note := func(proc, what string, term uint64) {
		clients[proc] = true
		if h := highest[proc]; term < h {
			bad = append(bad, fmt.Sprintf("%s saw term %d after term %d (%s)", proc, term, h, what))
			return
		}
		highest[proc] = term
	}
	for _, ev := range events {
		if ev.Type == history.TypeGuard && !ev.Rejected {
			note(ev.Process, ev.Op+" from "+ev.Addr, ev.Term)
		}
	}
	// Harness clients are sequential: order their replies by completion.
	var replies []*Op
	guarded := map[string]bool{}
	for _, ev := range events {
		if ev.Type == history.TypeGuard {
			guarded[ev.Process] = true
		}
	}
	for _, op := range ops {
		if op.Type == history.TypeOK && !guarded[op.Process] && op.Term > 0 {
			replies = append(replies, op)
		}
	}
	slices.SortStableFunc(replies, func(a, b *Op) int { return cmp.Compare(a.Return, b.Return) })
	for _, op := range replies {
		note(op.Process, op.Name, op.Term)
	}
	return verdict(Epochs, fmt.Sprintf("terms seen by %d clients and worker processes", len(clients)), bad)
}

// linearizable checks every item's operations with porcupine.
func linearizable(ops []*Op, in Input, name func(history.Key) string) (Verdict, []string) {
	timeout := in.LinearizabilityTimeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	by, _ := itemOps(ops)
	m := model()
	var bad []string
	var files []string
	timedOut, total := 0, 0
	for _, k := range sortedKeys(by) {
		hist := by[k]
		total += len(hist)
		res, info := porcupine.CheckOperationsVerbose(m, hist, timeout)
		switch res {
		case porcupine.Ok:
			continue
		case porcupine.Unknown:
			timedOut++
			continue
		}
		bad = append(bad, fmt.Sprintf("%s: %d operations are not linearizable", name(k), len(hist)))
		if in.VisualizeDir != "" && len(files) < 3 {
			if err := os.MkdirAll(in.VisualizeDir, 0o755); err == nil {
				path := filepath.Join(in.VisualizeDir, "linearizability-"+strings.ReplaceAll(name(k), "/", "-")+".html")
				if err := porcupine.VisualizePath(m, info, path); err == nil {
					files = append(files, path)
				}
			}
		}
	}
	ranged := 0
	for k := range by {
		if isRangeKey(k) {
			ranged++
		}
	}
	detail := fmt.Sprintf("%d items, %d operations checked with porcupine", len(by)-ranged, total)
	if ranged > 0 {
		detail = fmt.Sprintf("%d items and %d indexes of range runs, %d operations checked with porcupine", len(by)-ranged, ranged, total)
	}
	if timedOut > 0 {
		detail += fmt.Sprintf("; %d items timed out (no violation found in %v)", timedOut, timeout)
	}
	return verdict(Linearizable, detail, bad), files
}

// completion checks that the runs finished within the bound after the last
// heal.
func completion(in Input) Verdict {
	if in.Completed == 0 {
		msg := fmt.Sprintf("the runs did not complete within %v of the last heal", in.Bound)
		return Verdict{Name: Completion, Count: 1, Detail: msg, Examples: []string{msg}}
	}
	took := time.Duration(max(in.Completed-in.LastHeal, 0))
	detail := fmt.Sprintf("complete %v after the last heal (bound %v)", took.Round(time.Millisecond), in.Bound)
	if took > in.Bound {
		return Verdict{Name: Completion, Count: 1, Detail: detail, Examples: []string{detail}}
	}
	return Verdict{Name: Completion, OK: true, Detail: detail}
}
