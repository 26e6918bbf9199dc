package workload

import (
	"context"
	"fmt"
	"strings"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/jepsen-lite/history"
	"github.com/rollout/rollout/store"
	"github.com/rollout/rollout/worker"
	"github.com/rollout/rollout/worker/mock"
)

// Range runs: a run named in SubmitConfig.RangeRuns has the range layout
// (the ledger's records are ranges of its indexes, fsm/ranges.go), as
// client/runs submits a store run by default: each chunk's lines are
// stored as one range chunk (store.RangeChunk) under the run's input
// prefix, and SubmitRanges describes it by reference. Workers run each
// index on the backend with the line as its payload and the sample id
// batch.SampleIDOfLine gives, and report the finished prefixes of their
// ranges (ReportRange) with result objects in the run's store.

// RangeModel is the model (RunSpec.model) of the range runs: the mock
// backend serves any model, and a straggler that registers with it alone
// claims ranges only (Straggler.SetModels).
const RangeModel = "mock-ranges"

// ItemModel is the model of the item runs.
const ItemModel = "mock"

// SubmitRanges adds range chunks to a run (one SubmitRanges call).
func (cl *Client) SubmitRanges(ctx context.Context, req *rolloutv1.SubmitRangesRequest) (*rolloutv1.SubmitRangesResponse, error) {
	return do(ctx, cl, "SubmitRanges", "", cl.c.SubmitRanges, req, history.FromSubmitRanges(req), nil)
}

// ReportRange sends range reports as workerID.
func (cl *Client) ReportRange(ctx context.Context, workerID string, reports []*rolloutv1.RangeReport) (*rolloutv1.ReportRangeResponse, error) {
	req := &rolloutv1.ReportRangeRequest{WorkerId: workerID, Reports: reports}
	return do(ctx, cl, "ReportRange", workerID, cl.c.ReportRange, req, history.FromRangeReports(reports),
		func(r *rolloutv1.ReportRangeResponse) []history.Item { return history.FromRangeResults(req, r) })
}

// RangeChunk returns the range chunk of lines [from, to) of range run run
// (store.RangeChunk's bytes) and the length of its lines part (what the
// ledger's reference records).
func RangeChunk(run string, from, to uint64) (data []byte, dataLen int) {
	var ch store.RangeChunk
	for i := from; i < to; i++ {
		ch.Add(Payload(run, i))
	}
	return ch.Bytes(), ch.DataLen()
}

// submitRangeChunk stores chunk c of a range run in st and submits it
// (SubmitRanges): the same lines make the same content-addressed chunk, so
// a retry names the same object and the ledger counts the chunk once.
func (s *Submitter) submitRangeChunk(ctx context.Context, c chunk, st *store.Store) error {
	data, dataLen := RangeChunk(c.run, c.from, c.to)
	sctx, cancel := context.WithTimeout(ctx, s.cl.OpTimeout)
	key, _, _, err := st.PutContent(sctx, store.InputPrefix(c.run), data)
	cancel()
	if err != nil {
		return fmt.Errorf("workload: storing the range chunk of %s [%d, %d): %w", c.run, c.from, c.to, err)
	}
	req := &rolloutv1.SubmitRangesRequest{
		Run:  c.run,
		Spec: s.cfg.spec(c.run, &rolloutv1.RunSpec{MaxFailures: s.cfg.MaxFailures, Model: RangeModel, Total: uint64(s.cfg.ItemsPerRun), Store: st.URL()}),
		Ranges: []*rolloutv1.InputRange{{Index: c.from, Count: c.to - c.from,
			PayloadRef: &rolloutv1.DataRef{Object: key, Length: uint64(dataLen)}}},
	}
	_, err = s.cl.SubmitRanges(ctx, req)
	return err
}

// RangeWant is what a correct worker records for index idx of range run
// run: the sample id of its line and the mock backend's result for it.
func RangeWant(ctx context.Context, run string, idx uint64) (sid [32]byte, result []byte, err error) {
	b, err := mock.New(mock.DefaultConfig())
	if err != nil {
		return sid, nil, err
	}
	return rangeResult(ctx, b, run, idx, Payload(run, idx))
}

// rangeResult is index idx's sample id and b's result for its line.
func rangeResult(ctx context.Context, b *mock.Backend, run string, idx uint64, line []byte) ([32]byte, []byte, error) {
	sp, err := batch.ParseSamplingJSON(nil)
	if err != nil {
		return [32]byte{}, nil, err
	}
	sid := batch.SampleIDOfLine(RangeModel, line, sp, idx)
	res, err := b.Run(ctx, worker.Item{Run: run, ID: sid[:], Index: idx, Payload: line, Model: RangeModel})
	return sid, res, err
}

// lateRange reports held range it late, at its old attempt, with the very
// bytes a worker would send: the results of the indexes [lo, c) in a
// result object in the run's store. c is the end of the Done segment
// another worker recorded at lo when there is one (so that the object is
// byte for byte the one the ledger holds, and only the ownership tells
// the reports apart: the hardest case for the CAS), else the range's end.
func (s *Straggler) lateRange(ctx context.Context, it *rolloutv1.Item) (LateResult, error) {
	lo, hi := it.GetIndex(), it.GetIndex()+it.GetCount()
	if recs, err := s.records(ctx, it); err == nil {
		for _, r := range recs {
			if r.GetIndex() == lo && r.GetState() == rolloutv1.ItemState_ITEM_STATE_DONE && r.GetOwner() != s.id {
				hi = min(hi, lo+r.GetCount())
			}
		}
	}
	ref, err := s.rangeResults(ctx, it, lo, hi)
	if err != nil {
		return LateResult{}, fmt.Errorf("workload: straggler results for %s [%d, %d): %w", it.GetRun(), lo, hi, err)
	}
	rep := &rolloutv1.RangeReport{Run: it.GetRun(), Id: it.GetId(), Attempt: it.GetAttempt(), Lo: lo, DoneTo: hi, ResultRef: ref}
	resp, err := s.cl.ReportRange(ctx, s.id, []*rolloutv1.RangeReport{rep})
	if err != nil {
		return LateResult{}, err
	}
	lr := LateResult{Index: lo, Status: "NO ANSWER"}
	if rs := resp.GetResults(); len(rs) > 0 {
		lr.Status = strings.TrimPrefix(rs[0].GetStatus().String(), "REPORT_STATUS_")
		if rs[0].GetDuplicate() {
			lr.Status += " (duplicate)"
		}
	}
	return lr, nil
}

// rangeResults computes the results of indexes [lo, hi) of range it as a
// worker does (the lines read from its chunk), writes them as one result
// object in the run's store and returns its reference.
func (s *Straggler) rangeResults(ctx context.Context, it *rolloutv1.Item, lo, hi uint64) (*rolloutv1.DataRef, error) {
	if s.open == nil {
		return nil, fmt.Errorf("workload: straggler: range run %s keeps its data in a store and no store opener is set", it.GetRun())
	}
	st, err := s.open(ctx, it.GetStore())
	if err != nil {
		return nil, err
	}
	ref := it.GetPayloadRef()
	lines, err := store.ReadChunkLines(ctx, st, ref.GetObject(), ref.GetLength(), lo-it.GetBase(), hi-lo)
	if err != nil {
		return nil, err
	}
	rs := make([]store.RangeResult, 0, len(lines))
	for k, line := range lines {
		idx := lo + uint64(k)
		sid, res, err := rangeResult(ctx, s.mock, it.GetRun(), idx, line)
		if err != nil {
			return nil, err
		}
		rs = append(rs, store.RangeResult{Index: idx, SampleID: sid, Result: res})
	}
	obj, err := store.EncodeRangeResults(rs)
	if err != nil {
		return nil, err
	}
	key, sum, _, err := st.PutContent(ctx, store.RunResults(it.GetRun(), it.GetDataPrefix()), obj)
	if err != nil {
		return nil, err
	}
	return &rolloutv1.DataRef{Object: key, Length: uint64(len(obj)), Blake3: sum[:]}, nil
}
