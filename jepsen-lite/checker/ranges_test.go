package checker_test

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/jepsen-lite/checker"
	"github.com/rollout/rollout/jepsen-lite/history"
	"github.com/rollout/rollout/store"
)

const rrun = "rr"

// rid is the history id of the range record seq: "R" and 8 bytes big
// endian, in hex.
func rid(seq uint64) string {
	b := []byte{'R', 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint64(b[1:], seq)
	return hex.EncodeToString(b)
}

func rng(seq, attempt, lo, n uint64) history.Item {
	return history.Item{Run: rrun, ID: rid(seq), Index: lo, Attempt: attempt, Count: n}
}

func rrecord(seq uint64, state, owner string, attempt, lo, n uint64, res string) history.Item {
	return history.Item{Run: rrun, ID: rid(seq), Index: lo, Count: n, State: state, Owner: owner, Attempt: attempt, Result: res}
}

func rreport(seq, attempt, lo, to uint64, res string, failed ...uint64) history.Item {
	return history.Item{Run: rrun, ID: rid(seq), Index: lo, Attempt: attempt, DoneTo: to, Result: res, Failed: failed}
}

func answered(rep history.Item, status string, dup bool) []history.Item {
	rep.Status, rep.Dup = status, dup
	return []history.Item{rep}
}

// rangeBase is a clean history of one range run of 4 indexes: the chunk
// submitted (record 1), claimed whole by w1, its bounds seen by a
// heartbeat, [0, 2) reported done, index 2 failed and 3 done in a second
// report; index 2 (record 4) claimed again and done by w2 (record 5);
// read back.
func rangeBase() (*builder, checker.Input) {
	b := newBuilder()
	b.op("submit", "SubmitRanges", "", []history.Item{{Run: rrun, Index: 0, Count: 4}}, history.TypeOK, 2, nil)
	b.op("w1/1", "Claim", "w1", nil, history.TypeOK, 2, []history.Item{rng(1, 1, 0, 4)})
	b.op("w1/1", "Heartbeat", "w1", nil, history.TypeOK, 2, []history.Item{rng(1, 1, 0, 4)})
	r1 := rreport(1, 1, 0, 2, "b3:01")
	b.op("w1/1", "ReportRange", "w1", []history.Item{r1}, history.TypeOK, 2, answered(r1, "APPLIED", false))
	r2 := rreport(1, 1, 2, 4, "b3:02", 2)
	b.op("w1/1", "ReportRange", "w1", []history.Item{r2}, history.TypeOK, 2, answered(r2, "APPLIED", false))
	b.op("w2/1", "Claim", "w2", nil, history.TypeOK, 2, []history.Item{rng(4, 2, 2, 1)})
	r3 := rreport(4, 2, 2, 3, "b3:03")
	b.op("w2/1", "ReportRange", "w2", []history.Item{r3}, history.TypeOK, 2, answered(r3, "APPLIED", false))
	final := []history.Item{
		rrecord(2, "DONE", "w1", 1, 0, 2, "b3:01"),
		rrecord(6, "DONE", "w2", 2, 2, 1, "b3:03"),
		rrecord(3, "DONE", "w1", 1, 3, 1, "b3:02"),
	}
	b.op("reader", "Results", "", nil, history.TypeOK, 2, final)
	in := checker.Input{Final: final, Totals: map[string]uint64{rrun: 4}, LastHeal: 50, Completed: 60, Bound: time.Second}
	return b, in
}

func TestCheckRanges(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(b *builder, in *checker.Input)
		fail   []string
	}{
		{"clean", func(*builder, *checker.Input) {}, nil},
		{"a retry answered as a duplicate", func(b *builder, _ *checker.Input) {
			r := rreport(1, 1, 0, 2, "b3:01")
			b.op("w1/1", "ReportRange", "w1", []history.Item{r}, history.TypeOK, 2, answered(r, "APPLIED", true))
		}, nil},
		{"a late report refused", func(b *builder, _ *checker.Input) {
			r := rreport(1, 1, 0, 2, "b3:09")
			b.op("w3/1", "ReportRange", "w3", []history.Item{r}, history.TypeOK, 2, answered(r, "CAS_MISS", false))
		}, nil},
		{"a report with no answer", func(b *builder, _ *checker.Input) {
			b.open("w3/1", "ReportRange", "w3", []history.Item{rreport(1, 1, 0, 2, "b3:09")})
		}, nil},
		{"another ownership's identical report accepted", func(b *builder, _ *checker.Input) {
			r := rreport(7, 1, 0, 2, "b3:01")
			b.op("w3/1", "ReportRange", "w3", []history.Item{r}, history.TypeOK, 2, answered(r, "APPLIED", true))
		}, []string{checker.Duplicates, checker.Linearizable}},
		{"a stale owner's report accepted after a steal", func(b *builder, in *checker.Input) {
			// w1 holds [0, 4) of record 8 ...
			b2, in2 := newBuilder(), in
			b2.op("submit", "SubmitRanges", "", []history.Item{{Run: rrun, Index: 0, Count: 4}}, history.TypeOK, 2, nil)
			b2.op("w1/1", "Claim", "w1", nil, history.TypeOK, 2, []history.Item{rng(1, 1, 0, 4)})
			// ... w2 steals [2, 4) (record 2, attempt 2) ...
			b2.op("w2/1", "Steal", "w2", nil, history.TypeOK, 2, []history.Item{rng(2, 2, 2, 2)})
			// ... and w1's report of [0, 4) is applied anyway.
			r := rreport(1, 1, 0, 4, "b3:01")
			b2.op("w1/1", "ReportRange", "w1", []history.Item{r}, history.TypeOK, 2, answered(r, "APPLIED", false))
			in2.Final = []history.Item{rrecord(3, "DONE", "w1", 1, 0, 4, "b3:01")}
			*b = *b2
		}, []string{checker.Linearizable}},
		{"index lost", func(_ *builder, in *checker.Input) {
			in.Final = in.Final[:2]
		}, []string{checker.RangeIndexes}},
		{"index in two records", func(_ *builder, in *checker.Input) {
			in.Final = append(in.Final, rrecord(9, "DONE", "w1", 1, 3, 1, "b3:02"))
		}, []string{checker.RangeIndexes}},
		{"index never submitted", func(_ *builder, in *checker.Input) {
			in.Final = append(in.Final, rrecord(9, "DONE", "w1", 1, 4, 1, "b3:02"))
		}, []string{checker.RangeIndexes}},
		{"running at the end", func(_ *builder, in *checker.Input) {
			in.Final = slices.Clone(in.Final)
			in.Final[1] = rrecord(4, "RUNNING", "w2", 2, 2, 1, "")
		}, []string{checker.RangeIndexes}},
		{"the ledger holds another result than the one accepted", func(_ *builder, in *checker.Input) {
			in.Final = slices.Clone(in.Final)
			in.Final[0] = rrecord(2, "DONE", "w1", 1, 0, 2, "b3:77")
		}, []string{checker.Duplicates}},
		{"a read sees a result never reported", func(b *builder, _ *checker.Input) {
			b.op("reader", "Results", "", nil, history.TypeOK, 2, []history.Item{rrecord(2, "DONE", "w1", 1, 0, 2, "b3:77")})
		}, []string{checker.Linearizable}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, in := rangeBase()
			tt.mutate(b, &in)
			in.Events = b.evs
			res := checker.Check(in)
			failed := res.Failed()
			slices.Sort(failed)
			want := slices.Clone(tt.fail)
			slices.Sort(want)
			require.Equal(t, want, failed, "verdicts: %+v", res.Verdicts)
			_, ok := res.Verdict(checker.RangeIndexes)
			require.True(t, ok, "a history with a range run has the range-indexes verdict")
		})
	}
}

// wants is what a correct worker records for n indexes.
func wants(n int) []checker.RangeWant {
	out := make([]checker.RangeWant, n)
	for i := range out {
		out[i].SampleID[0], out[i].SampleID[1] = 0x5a, byte(i)
		out[i].Result = fmt.Appendf(nil, `{"i":%d}`, i)
	}
	return out
}

// object encodes the results of indexes lo..hi-1 as a worker does.
func object(t *testing.T, want []checker.RangeWant, lo, hi uint64) ([]byte, []byte) {
	var rs []store.RangeResult
	for i := lo; i < hi; i++ {
		rs = append(rs, store.RangeResult{Index: i, SampleID: want[i].SampleID, Result: want[i].Result})
	}
	b, err := store.EncodeRangeResults(rs)
	require.NoError(t, err)
	sum := store.Hash(b)
	return b, sum[:]
}

func TestRangeResults(t *testing.T) {
	want := wants(4)
	clean := func() checker.RangeRun {
		o1, s1 := object(t, want, 0, 3)
		return checker.RangeRun{Run: rrun, Want: want,
			Records: []checker.RangeRecord{
				{Index: 0, Count: 3, State: "DONE", Object: "o1", Blake3: s1},
				{Index: 3, Count: 1, State: "DEAD"},
			},
			Objects: map[string]checker.RangeObject{"o1": {Data: o1}},
		}
	}
	tests := []struct {
		name   string
		mutate func(rr *checker.RangeRun)
		bad    int
	}{
		{"clean", func(*checker.RangeRun) {}, 0},
		{"wrong sample id", func(rr *checker.RangeRun) {
			w := slices.Clone(want)
			w[1].SampleID[0] = 0x11
			o, s := object(t, w, 0, 3)
			rr.Objects["o1"], rr.Records[0].Blake3 = checker.RangeObject{Data: o}, s
		}, 1},
		{"wrong result bytes", func(rr *checker.RangeRun) {
			w := slices.Clone(want)
			w[2].Result = []byte(`{"i":99}`)
			o, s := object(t, w, 0, 3)
			rr.Objects["o1"], rr.Records[0].Blake3 = checker.RangeObject{Data: o}, s
		}, 1},
		{"index missing from its object", func(rr *checker.RangeRun) {
			o, s := object(t, want, 0, 2)
			rr.Objects["o1"], rr.Records[0].Blake3 = checker.RangeObject{Data: o}, s
		}, 1},
		{"object not the one recorded", func(rr *checker.RangeRun) {
			rr.Records[0].Blake3 = make([]byte, 32)
		}, 1},
		{"object unreadable", func(rr *checker.RangeRun) {
			rr.Objects["o1"] = checker.RangeObject{Err: "not found"}
		}, 1},
		{"Done without an object", func(rr *checker.RangeRun) {
			rr.Records[0].Object = ""
		}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rr := clean()
			tt.mutate(&rr)
			res := checker.Check(checker.Input{Ranges: []checker.RangeRun{rr}})
			v, ok := res.Verdict(checker.RangeResults)
			require.True(t, ok)
			require.Equal(t, tt.bad == 0, v.OK, "%+v", v)
			require.Equal(t, tt.bad, v.Count, "%+v", v)
		})
	}
}
