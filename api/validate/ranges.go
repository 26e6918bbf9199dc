package validate

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/internal/limits"
)

// CheckRangesRequest checks a whole SubmitRanges request, in this order:
// the run name; at least one range (ErrEmptyRequest); at most
// MaxItemsPerRequest ranges (ErrTooManyItems); at most MaxRequestBytes as
// encoded (ErrTooLarge); the spec (Spec; a spec must name a store, ErrSpec:
// a range run's payloads and results live in its store); every range
// (ErrRange: count 1 to limits.MaxRangeCount, index at most
// limits.MaxRangeIndex, index+count within uint64, a payload_ref that Ref
// accepts with a length > 0) and no two ranges overlapping (ErrRange). Every
// error names the field, e.g. "ranges[2].count is 0". Whether a range
// overlaps indexes the run already holds is the ledger's to say.
func (l Limits) CheckRangesRequest(req *rolloutv1.SubmitRangesRequest) error {
	if err := l.RunName(req.GetRun()); err != nil {
		return err
	}
	rs := req.GetRanges()
	switch n := len(rs); {
	case n == 0:
		return fmt.Errorf("%w: the request has no ranges", ErrEmptyRequest)
	case n > l.MaxItemsPerRequest:
		return fmt.Errorf("%w: %d ranges, the limit is %d per request", ErrTooManyItems, n, l.MaxItemsPerRequest)
	}
	if n := proto.Size(req); n > l.MaxRequestBytes {
		return fmt.Errorf("%w: the request is %d bytes, exceeds the per-request limit of %d bytes", ErrTooLarge, n, l.MaxRequestBytes)
	}
	if ms := req.GetStaleAfterMs(); ms > math.MaxInt64/uint64(time.Millisecond) {
		return fmt.Errorf("%w: stale_after_ms %d is too large", ErrStaleAfter, ms)
	}
	if sp := req.GetSpec(); sp != nil {
		if err := l.Spec(sp); err != nil {
			return err
		}
		if sp.GetStore() == "" {
			return fmt.Errorf("%w: spec.store is empty: a range run's payloads and results live in its store", ErrSpec)
		}
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrRange}, args...)...)
	}
	for i, r := range rs {
		switch {
		case r.GetCount() == 0:
			return bad("ranges[%d].count is 0 (index %d): a range has at least one index", i, r.GetIndex())
		case r.GetIndex() > math.MaxUint64-r.GetCount():
			return bad("ranges[%d]: index %d + count %d overflows", i, r.GetIndex(), r.GetCount())
		case r.GetCount() > limits.MaxRangeCount:
			return bad("ranges[%d].count is %d (index %d), the limit is %d lines per chunk", i, r.GetCount(), r.GetIndex(), uint64(limits.MaxRangeCount))
		case r.GetIndex() > limits.MaxRangeIndex:
			return bad("ranges[%d].index is %d, the limit is %d", i, r.GetIndex(), uint64(limits.MaxRangeIndex))
		case r.GetPayloadRef() == nil:
			return bad("ranges[%d].payload_ref is missing (index %d): it names the chunk object", i, r.GetIndex())
		case r.GetPayloadRef().GetLength() == 0:
			return bad("ranges[%d].payload_ref.length is 0 (index %d)", i, r.GetIndex())
		}
		if err := Ref(fmt.Sprintf("ranges[%d].payload_ref", i), r.GetPayloadRef(), false); err != nil {
			return fmt.Errorf("%w: %v", ErrRange, err)
		}
	}
	order := make([]int, len(rs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		if c := cmp.Compare(rs[a].GetIndex(), rs[b].GetIndex()); c != 0 {
			return c
		}
		return a - b
	})
	for k := 1; k < len(order); k++ {
		p, q := rs[order[k-1]], rs[order[k]]
		if q.GetIndex() < p.GetIndex()+p.GetCount() {
			i, j := min(order[k-1], order[k]), max(order[k-1], order[k])
			return bad("ranges[%d] [%d, %d) overlaps ranges[%d] [%d, %d)", j, rs[j].GetIndex(), rs[j].GetIndex()+rs[j].GetCount(),
				i, rs[i].GetIndex(), rs[i].GetIndex()+rs[i].GetCount())
		}
	}
	return nil
}

// CheckRangeReport checks report pos of a ReportRange request on its own
// (ErrRangeReport): a run and an id (at most IDBytes); lo <= done_to, and
// lo < done_to unless nack_rest is set (else it reports nothing); at
// most done_to-lo and limits.MaxReportFailures failed indexes, each in
// [lo, done_to), strictly
// ascending, with a reason of at most limits.MaxReasonBytes; a result_ref,
// when set, that Ref accepts with its blake3 (required); a result_ref
// whenever some index of [lo, done_to) is done (not failed). Whether the
// range is the worker's, and its bounds, is the ledger's to say (a CAS miss
// in the report's result). Every error names the field, e.g.
// "reports[0].done_to 5 is below reports[0].lo 9".
func (l Limits) CheckRangeReport(pos int, r *rolloutv1.RangeReport) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrRangeReport}, args...)...)
	}
	switch {
	case r.GetRun() == "":
		return bad("reports[%d].run is empty", pos)
	case len(r.GetId()) == 0:
		return bad("reports[%d].id is empty", pos)
	case len(r.GetId()) > l.IDBytes:
		return bad("reports[%d].id is %d bytes, the limit is %d", pos, len(r.GetId()), l.IDBytes)
	case r.GetDoneTo() < r.GetLo():
		return bad("reports[%d].done_to %d is below reports[%d].lo %d", pos, r.GetDoneTo(), pos, r.GetLo())
	case r.GetReleaseFrom() > 0 && r.GetNackRest():
		return bad("reports[%d] sets both release_from and nack_rest", pos)
	case r.GetReleaseFrom() > 0 && (r.GetReleaseFrom() < r.GetDoneTo() || r.GetReleaseFrom() <= r.GetLo()):
		return bad("reports[%d].release_from %d is not above lo %d and at least done_to %d", pos, r.GetReleaseFrom(), r.GetLo(), r.GetDoneTo())
	case r.GetDoneTo() == r.GetLo() && !r.GetNackRest() && r.GetReleaseFrom() == 0:
		return bad("reports[%d] reports nothing: done_to equals lo (%d) and neither nack_rest nor release_from is set", pos, r.GetLo())
	}
	span := r.GetDoneTo() - r.GetLo()
	failed := r.GetFailed()
	switch {
	case uint64(len(failed)) > span:
		return bad("reports[%d].failed names %d indexes, [lo, done_to) holds %d", pos, len(failed), span)
	case len(failed) > limits.MaxReportFailures:
		return bad("reports[%d].failed names %d indexes, the limit is %d per report", pos, len(failed), limits.MaxReportFailures)
	}
	for k, f := range failed {
		switch {
		case f.GetIndex() < r.GetLo() || f.GetIndex() >= r.GetDoneTo():
			return bad("reports[%d].failed[%d].index %d is outside [lo, done_to) = [%d, %d)", pos, k, f.GetIndex(), r.GetLo(), r.GetDoneTo())
		case k > 0 && f.GetIndex() <= failed[k-1].GetIndex():
			return bad("reports[%d].failed[%d].index %d does not follow failed[%d].index %d (ascending, each once)", pos, k, f.GetIndex(), k-1, failed[k-1].GetIndex())
		case len(f.GetReason()) > limits.MaxReasonBytes:
			return bad("reports[%d].failed[%d].reason is %d bytes, the limit is %d", pos, k, len(f.GetReason()), limits.MaxReasonBytes)
		}
	}
	if ref := r.GetResultRef(); ref != nil {
		if err := Ref(fmt.Sprintf("reports[%d].result_ref", pos), ref, true); err != nil {
			return fmt.Errorf("%w: %v", ErrRangeReport, err)
		}
	} else if span > uint64(len(failed)) {
		return bad("reports[%d].result_ref is missing: [lo, done_to) = [%d, %d) has done indexes", pos, r.GetLo(), r.GetDoneTo())
	}
	return nil
}
