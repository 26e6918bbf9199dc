package history

import (
	"strings"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/worker"
)

// FromItems describes items handed to a worker (Claim, Steal, OwnedItems).
func FromItems(items []*rolloutv1.Item) []Item {
	out := make([]Item, 0, len(items))
	for _, it := range items {
		out = append(out, Item{Run: it.GetRun(), ID: IDString(it.GetId()), Index: it.GetIndex(), Attempt: it.GetAttempt(), Count: it.GetCount()})
	}
	return out
}

// FromRangeReports describes the reports of a ReportRange request, one
// item per report (Index is its lo).
func FromRangeReports(reports []*rolloutv1.RangeReport) []Item {
	out := make([]Item, 0, len(reports))
	for _, r := range reports {
		out = append(out, fromRangeReport(r))
	}
	return out
}

func fromRangeReport(r *rolloutv1.RangeReport) Item {
	it := Item{Run: r.GetRun(), ID: IDString(r.GetId()), Index: r.GetLo(), Attempt: r.GetAttempt(), DoneTo: r.GetDoneTo(),
		Nack: r.GetNackRest(), ReleaseFrom: r.GetReleaseFrom(), Result: RefHash(r.GetResultRef().GetBlake3())}
	for _, f := range r.GetFailed() {
		it.Failed = append(it.Failed, f.GetIndex())
	}
	return it
}

// FromRangeResults describes a ReportRange reply: one item per result,
// the report it answers (results[i] answers reports[i]) with the status
// and duplicate flag set.
func FromRangeResults(req *rolloutv1.ReportRangeRequest, resp *rolloutv1.ReportRangeResponse) []Item {
	reps := req.GetReports()
	out := make([]Item, 0, len(resp.GetResults()))
	for i, res := range resp.GetResults() {
		it := Item{ID: IDString(res.GetId())}
		if i < len(reps) {
			it = fromRangeReport(reps[i])
		}
		it.Status, it.Dup = shortEnum(res.GetStatus().String(), "REPORT_STATUS_"), res.GetDuplicate()
		out = append(out, it)
	}
	return out
}

// FromBounds describes a Heartbeat reply's range bounds: each a range
// [lo, hi) still Running(worker, attempt); empty bounds are left out.
func FromBounds(bounds []*rolloutv1.RangeBound) []Item {
	var out []Item
	for _, b := range bounds {
		if b.GetHi() <= b.GetLo() {
			continue
		}
		out = append(out, Item{Run: b.GetRun(), ID: IDString(b.GetId()), Index: b.GetLo(), Attempt: b.GetAttempt(), Count: b.GetHi() - b.GetLo()})
	}
	return out
}

// FromSubmitRanges describes the chunks of a SubmitRanges request: one
// item per chunk, without an id (the ledger makes its records' ids).
func FromSubmitRanges(req *rolloutv1.SubmitRangesRequest) []Item {
	out := make([]Item, 0, len(req.GetRanges()))
	for _, r := range req.GetRanges() {
		out = append(out, Item{Run: req.GetRun(), Index: r.GetIndex(), Count: r.GetCount()})
	}
	return out
}

// FromReports describes the reports of a Report request.
func FromReports(reports []*rolloutv1.ItemReport) []Item {
	out := make([]Item, 0, len(reports))
	for _, r := range reports {
		out = append(out, Item{
			Run: r.GetRun(), ID: IDString(r.GetId()), Attempt: r.GetAttempt(),
			Outcome: shortEnum(r.GetOutcome().String(), "OUTCOME_"), Result: reportHash(r), StoreDown: r.GetStoreUnavailable(),
		})
	}
	return out
}

// FromReportResults describes a Report reply: one item per result, with its
// run, attempt and outcome taken from the request report with the same id.
func FromReportResults(req *rolloutv1.ReportRequest, resp *rolloutv1.ReportResponse) []Item {
	byID := make(map[string]*rolloutv1.ItemReport, len(req.GetReports()))
	for _, r := range req.GetReports() {
		byID[string(r.GetId())] = r
	}
	out := make([]Item, 0, len(resp.GetResults()))
	for _, res := range resp.GetResults() {
		it := Item{ID: IDString(res.GetId()), Status: shortEnum(res.GetStatus().String(), "REPORT_STATUS_")}
		if r := byID[string(res.GetId())]; r != nil {
			it.Run, it.Attempt = r.GetRun(), r.GetAttempt()
			it.Outcome, it.Result = shortEnum(r.GetOutcome().String(), "OUTCOME_"), reportHash(r)
			it.StoreDown = r.GetStoreUnavailable()
		}
		out = append(out, it)
	}
	return out
}

// FromResults describes a page of a Results reply for run.
func FromResults(run string, items []*rolloutv1.ResultItem) []Item {
	out := make([]Item, 0, len(items))
	for _, it := range items {
		out = append(out, Item{
			Run: run, ID: IDString(it.GetId()), Index: it.GetIndex(), Attempt: it.GetAttempt(),
			State: shortEnum(it.GetState().String(), "ITEM_STATE_"), Owner: it.GetOwner(), Result: readHash(it), Count: it.GetCount(),
		})
	}
	return out
}

// FromSubmit describes the items of a SubmitItems request.
func FromSubmit(req *rolloutv1.SubmitItemsRequest) []Item {
	out := make([]Item, 0, len(req.GetItems()))
	for _, it := range req.GetItems() {
		out = append(out, Item{Run: req.GetRun(), ID: IDString(it.GetId()), Index: it.GetIndex()})
	}
	return out
}

// reportHash is the fingerprint of a report's result: inline, or by
// reference (RefHash).
func reportHash(r *rolloutv1.ItemReport) string {
	if ref := r.GetResultRef(); ref != nil && len(r.GetResult()) == 0 {
		return RefHash(ref.GetBlake3())
	}
	return ResultHash(r.GetResult())
}

// readHash is the fingerprint of a read item's result: inline, or by
// reference (RefHash).
func readHash(it *rolloutv1.ResultItem) string {
	if ref := it.GetResultRef(); ref != nil && len(it.GetResult()) == 0 {
		return RefHash(ref.GetBlake3())
	}
	return ResultHash(it.GetResult())
}

func shortEnum(s, prefix string) string { return strings.TrimPrefix(s, prefix) }

// WorkerRecorder is a worker.Recorder that writes a worker's history.
type WorkerRecorder struct {
	w  *Writer
	id string
}

var _ worker.Recorder = (*WorkerRecorder)(nil)

// NewWorkerRecorder returns a recorder writing the history of the worker
// with identity workerID to w.
func NewWorkerRecorder(w *Writer, workerID string) *WorkerRecorder {
	return &WorkerRecorder{w: w, id: workerID}
}

// Record converts ev to an Event and writes it.
func (r *WorkerRecorder) Record(ev worker.Event) {
	e := Event{Type: Type(ev.Kind.String()), Op: ev.Op, Call: ev.Call, Worker: r.id}
	switch ev.Kind {
	case worker.EventGuard:
		g := ev.Guard
		e.Term, e.Highest, e.Rejected, e.Addr, e.Hint = g.Term, g.Highest, g.Rejected, g.Addr, g.Hint
	case worker.EventInvoke:
		switch req := ev.Req.(type) {
		case *rolloutv1.ReportRequest:
			e.Items = FromReports(req.GetReports())
		case *rolloutv1.ReportRangeRequest:
			e.Items = FromRangeReports(req.GetReports())
		}
	case worker.EventOK:
		if h, ok := ev.Resp.(interface {
			GetHeader() *rolloutv1.ReplyHeader
		}); ok {
			e.Term = h.GetHeader().GetTerm()
		}
		switch resp := ev.Resp.(type) {
		case *rolloutv1.ClaimResponse:
			e.Items = FromItems(resp.GetItems())
		case *rolloutv1.StealResponse:
			e.Items = FromItems(resp.GetItems())
			e.Detail = resp.GetVictim()
		case *rolloutv1.OwnedItemsResponse:
			e.Items = FromItems(resp.GetItems())
		case *rolloutv1.ReportResponse:
			req, _ := ev.Req.(*rolloutv1.ReportRequest)
			e.Items = FromReportResults(req, resp)
		case *rolloutv1.ReportRangeResponse:
			req, _ := ev.Req.(*rolloutv1.ReportRangeRequest)
			e.Items = FromRangeResults(req, resp)
		case *rolloutv1.HeartbeatResponse:
			e.Items = FromBounds(resp.GetBounds())
		}
	case worker.EventFail, worker.EventUnknown:
		if ev.Err != nil {
			e.Err = ev.Err.Error()
		}
	}
	r.w.Write(e)
}
