package validate

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/internal/limits"
)

func inputRange(index, count uint64) *rolloutv1.InputRange {
	return &rolloutv1.InputRange{Index: index, Count: count,
		PayloadRef: &rolloutv1.DataRef{Object: "runs/r/inputs/chunk", Length: 100}}
}

func TestCheckRangesRequest(t *testing.T) {
	l := DefaultLimits()
	spec := &rolloutv1.RunSpec{Store: "file:///srv/store"}
	for _, tc := range []struct {
		name string
		req  *rolloutv1.SubmitRangesRequest
		want string // "" when valid
		is   error
	}{
		{"two chunks", &rolloutv1.SubmitRangesRequest{Run: "r", Spec: spec, Ranges: []*rolloutv1.InputRange{inputRange(10, 10), inputRange(0, 10)}}, "", nil},
		{"no spec (an existing run)", &rolloutv1.SubmitRangesRequest{Run: "r", Ranges: []*rolloutv1.InputRange{inputRange(0, 1)}}, "", nil},
		{"bad run", &rolloutv1.SubmitRangesRequest{Run: " r", Spec: spec, Ranges: []*rolloutv1.InputRange{inputRange(0, 1)}}, "leading or trailing", ErrRunName},
		{"no ranges", &rolloutv1.SubmitRangesRequest{Run: "r", Spec: spec}, "no ranges", ErrEmptyRequest},
		{"spec without store", &rolloutv1.SubmitRangesRequest{Run: "r", Spec: &rolloutv1.RunSpec{}, Ranges: []*rolloutv1.InputRange{inputRange(0, 1)}}, "spec.store is empty", ErrSpec},
		{"count 0", &rolloutv1.SubmitRangesRequest{Run: "r", Spec: spec, Ranges: []*rolloutv1.InputRange{inputRange(0, 1), inputRange(5, 0)}}, "ranges[1].count is 0", ErrRange},
		{"overflow", &rolloutv1.SubmitRangesRequest{Run: "r", Spec: spec, Ranges: []*rolloutv1.InputRange{inputRange(1<<64-2, 3)}}, "ranges[0]: index", ErrRange},
		{"no payload_ref", &rolloutv1.SubmitRangesRequest{Run: "r", Spec: spec, Ranges: []*rolloutv1.InputRange{{Index: 0, Count: 3}}}, "ranges[0].payload_ref is missing", ErrRange},
		{"empty payload_ref", &rolloutv1.SubmitRangesRequest{Run: "r", Spec: spec, Ranges: []*rolloutv1.InputRange{{Index: 0, Count: 3, PayloadRef: &rolloutv1.DataRef{Object: "a"}}}}, "ranges[0].payload_ref.length is 0", ErrRange},
		{"bad object", &rolloutv1.SubmitRangesRequest{Run: "r", Spec: spec, Ranges: []*rolloutv1.InputRange{{Index: 0, Count: 3, PayloadRef: &rolloutv1.DataRef{Object: "/etc/passwd", Length: 3}}}}, "ranges[0].payload_ref object", ErrRange},
		{"overlap", &rolloutv1.SubmitRangesRequest{Run: "r", Spec: spec, Ranges: []*rolloutv1.InputRange{inputRange(20, 5), inputRange(0, 10), inputRange(5, 10)}}, "ranges[2] [5, 15) overlaps ranges[1] [0, 10)", ErrRange},
		{"count over a chunk's lines", &rolloutv1.SubmitRangesRequest{Run: "r", Spec: spec, Ranges: []*rolloutv1.InputRange{inputRange(0, limits.MaxRangeCount+1)}}, "ranges[0].count is 4294967297", ErrRange},
		{"index too large", &rolloutv1.SubmitRangesRequest{Run: "r", Spec: spec, Ranges: []*rolloutv1.InputRange{inputRange(1<<62, 1)}}, "ranges[0].index is 4611686018427387904", ErrRange},
		{"uint64 max", &rolloutv1.SubmitRangesRequest{Run: "r", Spec: spec, Ranges: []*rolloutv1.InputRange{inputRange(1<<64-1, 1)}}, "ranges[0]: index 18446744073709551615 + count 1 overflows", ErrRange},
		{"same chunk twice", &rolloutv1.SubmitRangesRequest{Run: "r", Spec: spec, Ranges: []*rolloutv1.InputRange{inputRange(0, 10), inputRange(0, 10)}}, "ranges[1] [0, 10) overlaps ranges[0] [0, 10)", ErrRange},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := l.CheckRangesRequest(tc.req)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.is)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestCheckRangeReport(t *testing.T) {
	l := DefaultLimits()
	ref := &rolloutv1.DataRef{Object: "runs/r/results/x", Length: 10, Blake3: make([]byte, 32)}
	for _, tc := range []struct {
		name string
		r    *rolloutv1.RangeReport
		want string
	}{
		{"done", &rolloutv1.RangeReport{Run: "r", Id: []byte("R1"), Attempt: 1, Lo: 5, DoneTo: 8, ResultRef: ref}, ""},
		{"all failed, no result", &rolloutv1.RangeReport{Run: "r", Id: []byte("R1"), Lo: 5, DoneTo: 6, Failed: []*rolloutv1.FailedIndex{{Index: 5}}}, ""},
		{"nack all", &rolloutv1.RangeReport{Run: "r", Id: []byte("R1"), Lo: 5, DoneTo: 5, NackRest: true}, ""},
		{"nothing", &rolloutv1.RangeReport{Run: "r", Id: []byte("R1"), Lo: 5, DoneTo: 5}, "reports[2] reports nothing"},
		{"release the tail", &rolloutv1.RangeReport{Run: "r", Id: []byte("R1"), Lo: 5, DoneTo: 5, ReleaseFrom: 9}, ""},
		{"release below done_to", &rolloutv1.RangeReport{Run: "r", Id: []byte("R1"), Lo: 5, DoneTo: 8, ResultRef: ref, ReleaseFrom: 7}, "reports[2].release_from 7 is not above lo 5 and at least done_to 8"},
		{"release and nack", &rolloutv1.RangeReport{Run: "r", Id: []byte("R1"), Lo: 5, DoneTo: 5, NackRest: true, ReleaseFrom: 9}, "reports[2] sets both release_from and nack_rest"},
		{"no run", &rolloutv1.RangeReport{Id: []byte("R1"), Lo: 5, DoneTo: 8, ResultRef: ref}, "reports[2].run is empty"},
		{"no id", &rolloutv1.RangeReport{Run: "r", Lo: 5, DoneTo: 8, ResultRef: ref}, "reports[2].id is empty"},
		{"reversed", &rolloutv1.RangeReport{Run: "r", Id: []byte("R1"), Lo: 8, DoneTo: 5, ResultRef: ref}, "reports[2].done_to 5 is below reports[2].lo 8"},
		{"failed outside", &rolloutv1.RangeReport{Run: "r", Id: []byte("R1"), Lo: 5, DoneTo: 8, ResultRef: ref, Failed: []*rolloutv1.FailedIndex{{Index: 8}}}, "reports[2].failed[0].index 8 is outside"},
		{"failed twice", &rolloutv1.RangeReport{Run: "r", Id: []byte("R1"), Lo: 5, DoneTo: 8, ResultRef: ref, Failed: []*rolloutv1.FailedIndex{{Index: 6}, {Index: 6}}}, "reports[2].failed[1].index 6 does not follow"},
		{"too many failed", &rolloutv1.RangeReport{Run: "r", Id: []byte("R1"), Lo: 0, DoneTo: 1 << 20, Failed: ascendingFailed(0, limits.MaxReportFailures+1)}, "reports[2].failed names 4097 indexes, the limit is 4096"},
		{"no result_ref", &rolloutv1.RangeReport{Run: "r", Id: []byte("R1"), Lo: 5, DoneTo: 8}, "reports[2].result_ref is missing"},
		{"result without hash", &rolloutv1.RangeReport{Run: "r", Id: []byte("R1"), Lo: 5, DoneTo: 8, ResultRef: &rolloutv1.DataRef{Object: "runs/r/results/x", Length: 1}}, "reports[2].result_ref blake3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := l.CheckRangeReport(2, tc.r)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrRangeReport)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// ascendingFailed returns n failed indexes from lo on.
func ascendingFailed(lo uint64, n int) []*rolloutv1.FailedIndex {
	out := make([]*rolloutv1.FailedIndex, n)
	for i := range out {
		out[i] = &rolloutv1.FailedIndex{Index: lo + uint64(i)}
	}
	return out
}

// FuzzCheckRangesRequest decodes arbitrary bytes as a SubmitRangesRequest:
// the check never panics, a refusal matches a sentinel, and a request it
// accepts meets every rule (ranges within the limits, no two overlapping).
func FuzzCheckRangesRequest(f *testing.F) {
	spec := &rolloutv1.RunSpec{Store: "file:///srv/store"}
	for _, req := range []*rolloutv1.SubmitRangesRequest{
		{Run: "r", Spec: spec, Ranges: []*rolloutv1.InputRange{inputRange(10, 10), inputRange(0, 10)}},
		{Run: "r", Spec: spec, Ranges: []*rolloutv1.InputRange{inputRange(1<<64-2, 3)}},
		{Run: "r", Spec: spec, Ranges: []*rolloutv1.InputRange{inputRange(0, 10), inputRange(5, 10)}},
	} {
		b, _ := proto.Marshal(req)
		f.Add(b)
	}
	l := DefaultLimits()
	l.MaxItemsPerRequest, l.MaxRequestBytes = 16, 4<<10
	f.Fuzz(func(t *testing.T, data []byte) {
		var req rolloutv1.SubmitRangesRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		err := l.CheckRangesRequest(&req)
		if err != nil {
			if !errors.Is(err, ErrRunName) && !errors.Is(err, ErrEmptyRequest) && !errors.Is(err, ErrTooManyItems) &&
				!errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrSpec) && !errors.Is(err, ErrStaleAfter) && !errors.Is(err, ErrRange) {
				t.Fatalf("refusal matches no sentinel: %v", err)
			}
			return
		}
		rs := req.GetRanges()
		if len(rs) == 0 || len(rs) > l.MaxItemsPerRequest {
			t.Fatalf("accepted %d ranges", len(rs))
		}
		for i, r := range rs {
			if r.GetCount() == 0 || r.GetCount() > limits.MaxRangeCount || r.GetIndex() > limits.MaxRangeIndex || r.GetPayloadRef().GetLength() == 0 {
				t.Fatalf("accepted ranges[%d] %v", i, r)
			}
			for j := range i {
				q := rs[j]
				if r.GetIndex() < q.GetIndex()+q.GetCount() && q.GetIndex() < r.GetIndex()+r.GetCount() {
					t.Fatalf("accepted overlapping ranges[%d] and ranges[%d]", j, i)
				}
			}
		}
	})
}

// FuzzCheckRangeReport decodes arbitrary bytes as a RangeReport: the check
// never panics, a refusal is ErrRangeReport, and a report it accepts is
// one the ledger can apply (done_to >= lo, failed indexes ascending inside
// [lo, done_to) and within the limit, a result_ref with a hash for done
// indexes).
func FuzzCheckRangeReport(f *testing.F) {
	ref := &rolloutv1.DataRef{Object: "runs/r/results/x", Length: 10, Blake3: make([]byte, 32)}
	for _, r := range []*rolloutv1.RangeReport{
		{Run: "r", Id: []byte("R1"), Attempt: 1, Lo: 5, DoneTo: 8, ResultRef: ref, Failed: []*rolloutv1.FailedIndex{{Index: 6}}},
		{Run: "r", Id: []byte("R1"), Lo: 5, DoneTo: 5, ReleaseFrom: 9},
		{Run: "r", Id: []byte("R1"), Lo: math.MaxUint64 - 1, DoneTo: math.MaxUint64, NackRest: true, Failed: []*rolloutv1.FailedIndex{{Index: math.MaxUint64 - 1}}},
	} {
		b, _ := proto.Marshal(r)
		f.Add(b)
	}
	l := DefaultLimits()
	f.Fuzz(func(t *testing.T, data []byte) {
		var r rolloutv1.RangeReport
		if proto.Unmarshal(data, &r) != nil {
			return
		}
		err := l.CheckRangeReport(0, &r)
		if err != nil {
			if !errors.Is(err, ErrRangeReport) {
				t.Fatalf("refusal is not ErrRangeReport: %v", err)
			}
			return
		}
		lo, to, failed := r.GetLo(), r.GetDoneTo(), r.GetFailed()
		if to < lo || (to == lo && !r.GetNackRest() && r.GetReleaseFrom() == 0) || len(failed) > limits.MaxReportFailures {
			t.Fatalf("accepted %v", &r)
		}
		for k, fi := range failed {
			if fi.GetIndex() < lo || fi.GetIndex() >= to || (k > 0 && fi.GetIndex() <= failed[k-1].GetIndex()) {
				t.Fatalf("accepted failed[%d] %d of [%d, %d)", k, fi.GetIndex(), lo, to)
			}
		}
		if uint64(len(failed)) < to-lo && len(r.GetResultRef().GetBlake3()) != 32 {
			t.Fatalf("accepted done indexes without a hashed result_ref: %v", &r)
		}
	})
}
