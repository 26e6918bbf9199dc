package checker_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/jepsen-lite/checker"
	"github.com/rollout/rollout/jepsen-lite/history"
)

// builder writes a synthetic history: each operation takes 10 time units
// and starts after the previous one ended, unless told otherwise.
type builder struct {
	evs   []history.Event
	t     int64
	calls map[string]uint64
}

func newBuilder() *builder { return &builder{t: 100, calls: map[string]uint64{}} }

// op appends one operation; typ is its completion (TypeUnknown with open
// true leaves it without one).
func (b *builder) op(proc, name, worker string, in []history.Item, typ history.Type, term uint64, out []history.Item) {
	b.calls[proc]++
	c := b.calls[proc]
	b.evs = append(b.evs, history.Event{Time: b.t, Process: proc, Type: history.TypeInvoke, Op: name, Call: c, Worker: worker, Items: in})
	b.evs = append(b.evs, history.Event{Time: b.t + 5, Process: proc, Type: typ, Op: name, Call: c, Worker: worker, Term: term, Items: out})
	b.t += 10
}

func (b *builder) open(proc, name, worker string, in []history.Item) {
	b.calls[proc]++
	b.evs = append(b.evs, history.Event{Time: b.t, Process: proc, Type: history.TypeInvoke, Op: name, Call: b.calls[proc], Worker: worker, Items: in})
	b.t += 10
}

func (b *builder) guard(proc string, term, highest uint64, rejected bool) {
	b.evs = append(b.evs, history.Event{Time: b.t, Process: proc, Type: history.TypeGuard, Op: "Claim", Term: term, Highest: highest, Rejected: rejected, Addr: "c1"})
	b.t += 10
}

const run = "r"

func item(id string, idx uint64) history.Item { return history.Item{Run: run, ID: id, Index: idx} }

func claimed(id string, attempt uint64) []history.Item {
	return []history.Item{{Run: run, ID: id, Attempt: attempt}}
}

func report(id string, attempt uint64, outcome, res string) []history.Item {
	return []history.Item{{Run: run, ID: id, Attempt: attempt, Outcome: outcome, Result: res}}
}

func status(id, st string) []history.Item { return []history.Item{{ID: id, Status: st}} }

func read(id, state, owner string, attempt uint64, res string) []history.Item {
	return []history.Item{{Run: run, ID: id, State: state, Owner: owner, Attempt: attempt, Result: res}}
}

// base is a clean history of one item: submitted, claimed by w1, done,
// read back.
func base() (*builder, checker.Input) {
	b := newBuilder()
	b.op("submit", "SubmitItems", "", []history.Item{item("aa", 0)}, history.TypeOK, 2, nil)
	b.guard("w1/1", 2, 0, false)
	b.op("w1/1", "Claim", "w1", nil, history.TypeOK, 2, claimed("aa", 1))
	b.guard("w1/1", 2, 2, false)
	b.op("w1/1", "Report", "w1", report("aa", 1, "DONE", "h1"), history.TypeOK, 2, status("aa", "APPLIED"))
	b.op("reader", "Results", "", nil, history.TypeOK, 2, read("aa", "DONE", "w1", 1, "h1"))
	in := checker.Input{
		Final:     read("aa", "DONE", "w1", 1, "h1"),
		Totals:    map[string]uint64{run: 1},
		LastHeal:  50,
		Completed: 60,
		Bound:     time.Second,
	}
	return b, in
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(b *builder, in *checker.Input)
		fail   []string
	}{
		{"clean", func(*builder, *checker.Input) {}, nil},
		{"lost", func(_ *builder, in *checker.Input) { in.Final = nil }, []string{checker.Lost}},
		{"unexpected in the ledger", func(_ *builder, in *checker.Input) {
			in.Final = append(in.Final, read("bb", "DONE", "w1", 1, "h2")...)
		}, []string{checker.Unexpected}},
		{"unexpected in a reply", func(b *builder, _ *checker.Input) {
			b.op("w2/1", "Claim", "w2", nil, history.TypeOK, 2, claimed("cc", 1))
		}, []string{checker.Unexpected, checker.Linearizable}},
		{"incomplete", func(_ *builder, in *checker.Input) {
			in.Final = read("aa", "RUNNING", "w1", 1, "")
		}, []string{checker.Incomplete}},
		{"final read failed", func(_ *builder, in *checker.Input) {
			in.Final, in.FinalErr = nil, "no leader"
		}, []string{checker.Lost, checker.Unexpected, checker.Incomplete}},
		{"second accepted result", func(b *builder, _ *checker.Input) {
			b.op("straggler", "Report", "straggler", report("aa", 1, "DONE", "h1"), history.TypeOK, 2, status("aa", "APPLIED"))
		}, []string{checker.Duplicates, checker.Linearizable}},
		{"ledger differs from the accepted result", func(_ *builder, in *checker.Input) {
			in.Final = read("aa", "DONE", "w2", 2, "h1")
		}, []string{checker.Duplicates}},
		{"winner's retry is not a duplicate", func(b *builder, _ *checker.Input) {
			b.op("w1/1", "Report", "w1", report("aa", 1, "DONE", "h1"), history.TypeOK, 2, status("aa", "APPLIED"))
		}, nil},
		{"late report refused", func(b *builder, _ *checker.Input) {
			b.op("straggler", "Report", "straggler", report("aa", 1, "DONE", "h1"), history.TypeOK, 2, status("aa", "CAS_MISS"))
		}, nil},
		{"stale reply accepted", func(b *builder, _ *checker.Input) { b.guard("w1/1", 1, 2, false) },
			[]string{checker.StaleReplies, checker.Epochs}},
		{"reply without a term accepted", func(b *builder, _ *checker.Input) { b.guard("w1/1", 0, 2, false) },
			[]string{checker.StaleReplies, checker.Epochs}},
		{"stale reply rejected", func(b *builder, _ *checker.Input) { b.guard("w1/1", 1, 2, true) }, nil},
		{"a new incarnation starts over", func(b *builder, _ *checker.Input) { b.guard("w1/2", 1, 0, false) }, nil},
		{"client term went back", func(b *builder, _ *checker.Input) {
			b.op("reader", "RunStatus", "", nil, history.TypeOK, 3, nil)
			b.op("reader", "RunStatus", "", nil, history.TypeOK, 2, nil)
		}, []string{checker.Epochs}},
		{"read goes back in time", func(b *builder, _ *checker.Input) {
			b.op("reader", "Results", "", nil, history.TypeOK, 2, read("aa", "PENDING", "", 0, ""))
		}, []string{checker.Linearizable}},
		{"report applied to an item another worker took", func(b *builder, _ *checker.Input) {
			b.op("w2/1", "Claim", "w2", nil, history.TypeOK, 2, claimed("aa", 2))
		}, []string{checker.Linearizable}},
		{"completion never seen", func(_ *builder, in *checker.Input) { in.Completed = 0 }, []string{checker.Completion}},
		{"completion too late", func(_ *builder, in *checker.Input) { in.Completed = in.LastHeal + int64(2*time.Second) },
			[]string{checker.Completion}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, in := base()
			tt.mutate(b, &in)
			in.Events = history.Merge(b.evs)
			res := checker.Check(in)
			got := res.Failed()
			slices.Sort(got)
			want := slices.Clone(tt.fail)
			slices.Sort(want)
			require.Equal(t, want, got, "verdicts: %+v", res.Verdicts)
			require.Equal(t, len(want) == 0, res.OK())
			for _, v := range res.Verdicts {
				if !v.OK {
					require.NotEmpty(t, v.Examples, v.Name)
					require.Positive(t, v.Count, v.Name)
				}
			}
		})
	}
}

// TestLinearizabilityUnseenTransitions checks histories that are legal only
// through transitions no client saw (a failure-scan re-pend, a claim whose
// reply was lost), and operations with unknown outcomes.
func TestLinearizabilityUnseenTransitions(t *testing.T) {
	b := newBuilder()
	b.op("submit", "SubmitItems", "", []history.Item{item("aa", 0)}, history.TypeOK, 2, nil)
	b.op("w1/1", "Claim", "w1", nil, history.TypeOK, 2, claimed("aa", 1))
	// w1 goes silent; the scan re-pends, w2 claims (its reply lost) and
	// adopts the item through OwnedItems.
	b.op("w2/1", "Claim", "w2", nil, history.TypeUnknown, 0, nil)
	b.op("w2/1", "OwnedItems", "w2", nil, history.TypeOK, 3, claimed("aa", 2))
	b.op("w1/1", "Report", "w1", report("aa", 1, "DONE", "h1"), history.TypeOK, 3, status("aa", "CAS_MISS"))
	// w2's report times out, then a read shows it applied.
	b.open("w2/1", "Report", "w2", report("aa", 2, "DONE", "h1"))
	b.op("reader", "Results", "", nil, history.TypeOK, 3, read("aa", "DONE", "w2", 2, "h1"))
	// A failed nack whose first attempt applied reads as a CAS miss.
	b.op("submit", "SubmitItems", "", []history.Item{item("bb", 1)}, history.TypeOK, 3, nil)
	b.op("w1/1", "Claim", "w1", nil, history.TypeOK, 3, claimed("bb", 1))
	b.op("w1/1", "Report", "w1", report("bb", 1, "FAILED", ""), history.TypeOK, 3, status("bb", "CAS_MISS"))
	b.op("reader", "Results", "", nil, history.TypeOK, 3, read("bb", "DEAD", "w1", 1, ""))
	in := checker.Input{
		Events: history.Merge(b.evs), Totals: map[string]uint64{run: 2}, LastHeal: 1, Completed: 2, Bound: time.Second,
		Final: append(read("aa", "DONE", "w2", 2, "h1"), read("bb", "DEAD", "w1", 1, "")...),
	}
	res := checker.Check(in)
	require.True(t, res.OK(), "%+v", res.Verdicts)
	v, ok := res.Verdict(checker.Linearizable)
	require.True(t, ok)
	require.Contains(t, v.Detail, "2 items")
	counts := map[string]checker.OpCounts{}
	for _, c := range res.Ops {
		counts[c.Op] = c
	}
	require.Equal(t, checker.OpCounts{Op: "Report", Invoked: 3, OK: 2, Open: 1}, counts["Report"])
	require.Equal(t, checker.OpCounts{Op: "Claim", Invoked: 3, OK: 2, Unknown: 1}, counts["Claim"])
}

func TestVisualizationWritten(t *testing.T) {
	b, in := base()
	b.op("reader", "Results", "", nil, history.TypeOK, 2, read("aa", "PENDING", "", 0, ""))
	in.Events = history.Merge(b.evs)
	in.VisualizeDir = t.TempDir()
	res := checker.Check(in)
	require.Equal(t, []string{checker.Linearizable}, res.Failed())
	require.Len(t, res.Visualizations, 1)
	require.Equal(t, in.VisualizeDir, filepath.Dir(res.Visualizations[0]))
	html, err := os.ReadFile(res.Visualizations[0])
	require.NoError(t, err)
	require.Contains(t, string(html), "<html")
}

func TestPair(t *testing.T) {
	b := newBuilder()
	b.op("p", "Claim", "w", nil, history.TypeFail, 0, nil)
	b.open("p", "Report", "w", nil)
	b.op("p", "Results", "", nil, history.TypeUnknown, 0, nil)
	ops := checker.Pair(history.Merge(b.evs))
	require.Len(t, ops, 3)
	require.True(t, ops[0].Completed)
	require.Equal(t, history.TypeFail, ops[0].Type)
	require.NotEqual(t, checker.Open, ops[0].Return)
	require.False(t, ops[1].Completed)
	require.Equal(t, checker.Open, ops[1].Return)
	require.True(t, ops[2].Completed)
	require.Equal(t, checker.Open, ops[2].Return, "an unknown outcome is open-ended")
}
