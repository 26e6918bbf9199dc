package runstest

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/api/validate"
)

// WithRanges is the fake as a cluster that takes range runs: the
// Coordinator plus SubmitRanges. A Coordinator alone has no SubmitRanges,
// as a cluster of an older version or a client that cannot submit ranges:
// the runs library then submits items (its tests rely on that).
//
// A range run (Run.Ranged) keeps its records in Run.Items by first index:
// a record stands for [Index, Index+Count) of the chunk whose first index
// is Base, PayloadRef naming the whole chunk; its id is made as the ledger
// makes it ("R" and the run's record number). As in the ledger
// (fsm/ranges.go): a chunk is one Pending record; the same chunk again is
// counted by state (retry_dead re-pends its Dead records), never created
// again; a chunk overlapping indexes the run holds (or another count for
// a chunk it holds), a range run's SubmitItems and an item run's
// SubmitRanges are refused (INVALID_ARGUMENT); status, results, cancel and
// delete count indexes. The fake has no worker side, so its range records
// never run; Finish does not apply to them. A range run's store is not
// opened (Run.Store stays nil): its records are references.
type WithRanges struct{ *Coordinator }

// SubmitRanges creates a range run or adds chunks to one; see WithRanges.
// The request is checked first as the service checks it
// (validate.DefaultLimits CheckRangesRequest); a cancelled run is
// FAILED_PRECONDITION. Accepted requests are recorded in RangeSubmits.
func (f WithRanges) SubmitRanges(_ context.Context, req *rolloutv1.SubmitRangesRequest) (*rolloutv1.SubmitRangesResponse, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	if err := validate.DefaultLimits().CheckRangesRequest(req); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "submit refused, nothing was changed: %v", err)
	}
	r := f.Runs[req.GetRun()]
	objects := make([]string, 0, len(req.GetRanges()))
	for _, in := range req.GetRanges() {
		objects = append(objects, in.GetPayloadRef().GetObject())
	}
	if err := f.checkPrefix(req.GetRun(), r, req.GetSpec(), objects, false); err != nil {
		return nil, err
	}
	fresh, err := checkRanges(req, r)
	if err != nil {
		return nil, err
	}
	f.RangeSubmits = append(f.RangeSubmits, proto.Clone(req).(*rolloutv1.SubmitRangesRequest))
	if r == nil {
		r = &Run{Spec: req.GetSpec(), Items: map[uint64]*rolloutv1.ResultItem{}, Ranged: true}
		f.Runs[req.GetRun()] = r
	}
	r.Stall = nil // a resubmit re-uploads the inputs: the stall ends
	resp := &rolloutv1.SubmitRangesResponse{Header: f.header()}
	for _, in := range req.GetRanges() {
		r.countChunk(in, req.GetRetryDead(), resp)
	}
	for _, in := range fresh {
		r.recSeq++
		r.Items[in.GetIndex()] = &rolloutv1.ResultItem{Id: rangeID(r.recSeq), Index: in.GetIndex(), Count: in.GetCount(), Base: in.GetIndex(),
			State: rolloutv1.ItemState_ITEM_STATE_PENDING, PayloadRef: proto.Clone(in.GetPayloadRef()).(*rolloutv1.DataRef)}
		resp.Created += in.GetCount()
	}
	return resp, nil
}

// rangeID is the id of a range run's record number seq, as the ledger
// makes it.
func rangeID(seq uint64) []byte {
	b := make([]byte, 9)
	b[0] = 'R'
	binary.BigEndian.PutUint64(b[1:], seq)
	return b
}

// width is how many indexes a record stands for: its count for a range, 1
// for an item.
func width(it *rolloutv1.ResultItem) uint64 { return max(it.GetCount(), 1) }

// checkRanges checks req (already checked on its own) against its run r
// (nil: a new run) and returns the chunks r does not hold, by index.
func checkRanges(req *rolloutv1.SubmitRangesRequest, r *Run) ([]*rolloutv1.InputRange, error) {
	invalid := func(format string, args ...any) error {
		return status.Errorf(codes.InvalidArgument, "invalid command: "+format, args...)
	}
	run, store := req.GetRun(), req.GetSpec().GetStore()
	if r != nil {
		switch {
		case r.Cancelled:
			return nil, status.Errorf(codes.FailedPrecondition, "run %q is cancelled", run)
		case !r.Ranged:
			return nil, invalid("submit_ranges names run %q, whose items have ids (a run is ranges or items, not both)", run)
		case req.GetSpec() != nil && store != r.Spec.GetStore():
			return nil, invalid("submit_ranges names store %q for run %q, whose store is %q", store, run, r.Spec.GetStore())
		}
		store = r.Spec.GetStore()
	}
	if store == "" {
		return nil, invalid("submit_ranges run %q has no store: a range's lines are read from its chunk object", run)
	}
	byIdx := slices.Clone(req.GetRanges())
	sort.SliceStable(byIdx, func(i, j int) bool { return byIdx[i].GetIndex() < byIdx[j].GetIndex() })
	var fresh []*rolloutv1.InputRange
	for _, in := range byIdx {
		if r == nil {
			fresh = append(fresh, in)
			continue
		}
		if err := r.checkChunk(in); err != nil {
			return nil, invalid("%v", err)
		}
		if r.recordAt(in.GetIndex()) == nil {
			fresh = append(fresh, in)
		}
	}
	return fresh, nil
}

// checkChunk says why the range run r cannot take chunk in: it overlaps
// indexes r holds for another chunk, or names a chunk r holds with
// another count.
func (r *Run) checkChunk(in *rolloutv1.InputRange) error {
	lo, hi := in.GetIndex(), in.GetIndex()+in.GetCount()
	ex := r.recordAt(lo)
	if ex == nil {
		for i := range r.Items {
			if i >= lo && i < hi {
				return fmt.Errorf("submit_ranges chunk [%d, %d) overlaps indexes the run holds from %d", lo, hi, i)
			}
		}
		return nil
	}
	if ex.GetBase() != lo || ex.GetPayloadRef().GetObject() != in.GetPayloadRef().GetObject() {
		return fmt.Errorf("submit_ranges chunk at index %d of object %q: the run holds that index for another chunk", lo, in.GetPayloadRef().GetObject())
	}
	last, next := r.recordAt(hi-1), r.recordAt(hi)
	if last == nil || last.GetBase() != lo || (next != nil && next.GetBase() == lo) {
		return fmt.Errorf("submit_ranges chunk at index %d: count %d differs from the chunk the run holds", lo, in.GetCount())
	}
	return nil
}

// recordAt returns the record of r that holds index idx, or nil.
func (r *Run) recordAt(idx uint64) *rolloutv1.ResultItem {
	for i, it := range r.Items {
		if i <= idx && idx < i+width(it) {
			return it
		}
	}
	return nil
}

// countChunk counts the records of chunk in that r holds already by state
// into resp (in indexes); with retryDead it re-pends the Dead ones.
func (r *Run) countChunk(in *rolloutv1.InputRange, retryDead bool, resp *rolloutv1.SubmitRangesResponse) {
	for i, it := range r.Items {
		if it.GetCount() == 0 || it.GetBase() != in.GetIndex() || i >= in.GetIndex()+in.GetCount() {
			continue
		}
		n := width(it)
		switch it.GetState() {
		case rolloutv1.ItemState_ITEM_STATE_PENDING:
			resp.AlreadyPending += n
		case rolloutv1.ItemState_ITEM_STATE_RUNNING:
			resp.AlreadyRunning += n
		case rolloutv1.ItemState_ITEM_STATE_DONE:
			resp.AlreadyDone += n
		case rolloutv1.ItemState_ITEM_STATE_DEAD:
			if !retryDead {
				resp.Dead += n
				continue
			}
			it.State, it.Reason = rolloutv1.ItemState_ITEM_STATE_PENDING, ""
			resp.Retried += n
		}
	}
}
