package workload

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/client/runs"
	"github.com/rollout/rollout/jepsen-lite/history"
	"github.com/rollout/rollout/worker"
)

var (
	// ErrInvalidConfig names a bad Config field.
	ErrInvalidConfig = errors.New("workload: invalid config")
	// ErrIncomplete means the runs did not finish in time.
	ErrIncomplete = errors.New("workload: runs did not finish")
)

// ItemID is the id of item index of run: 32 bytes, like a real sample id.
func ItemID(run string, index uint64) []byte {
	h := sha256.Sum256(fmt.Appendf(nil, "jepsen-lite\x00%s\x00%d", run, index))
	return h[:]
}

// Payload is the input line of item index of run.
func Payload(run string, index uint64) []byte {
	return fmt.Appendf(nil, `{"prompt":"jepsen-lite %s %d"}`, run, index)
}

// Client is one sequential client: a coordinator client and the history
// it records into.
type Client struct {
	c *coordclient.Client
	h *history.Writer
	// OpTimeout bounds one operation (default 8s).
	OpTimeout time.Duration
}

// NewClient returns a Client calling through c and recording into h. The
// caller keeps ownership of both.
func NewClient(c *coordclient.Client, h *history.Writer) *Client {
	return &Client{c: c, h: h, OpTimeout: 8 * time.Second}
}

// reply is what every response has.
type reply interface{ GetHeader() *rolloutv1.ReplyHeader }

// do runs one recorded operation: it writes the invocation (with items),
// calls, and writes the completion (with what okItems makes of the reply).
func do[Req any, Resp reply](ctx context.Context, cl *Client, op, workerID string, call func(context.Context, Req) (Resp, error),
	req Req, items []history.Item, okItems func(Resp) []history.Item) (Resp, error) {
	id := cl.h.NextCall()
	cl.h.Write(history.Event{Type: history.TypeInvoke, Op: op, Call: id, Worker: workerID, Items: items})
	octx, cancel := context.WithTimeout(ctx, cl.OpTimeout)
	resp, err := call(octx, req)
	cancel()
	if err != nil {
		t := history.TypeUnknown
		if worker.Outcome(err) == worker.EventFail {
			t = history.TypeFail
		}
		cl.h.Write(history.Event{Type: t, Op: op, Call: id, Worker: workerID, Err: err.Error()})
		return resp, err
	}
	ev := history.Event{Type: history.TypeOK, Op: op, Call: id, Worker: workerID, Term: resp.GetHeader().GetTerm()}
	if okItems != nil {
		ev.Items = okItems(resp)
	}
	cl.h.Write(ev)
	return resp, nil
}

// Submit adds items to run (one SubmitItems call).
func (cl *Client) Submit(ctx context.Context, req *rolloutv1.SubmitItemsRequest) (*rolloutv1.SubmitItemsResponse, error) {
	return do(ctx, cl, "SubmitItems", "", cl.c.SubmitItems, req, history.FromSubmit(req), nil)
}

// SetTenant sets a tenant's weight and quotas (admin).
func (cl *Client) SetTenant(ctx context.Context, req *rolloutv1.SetTenantRequest) (*rolloutv1.SetTenantResponse, error) {
	return do(ctx, cl, "SetTenant", "", cl.c.SetTenant, req, nil, nil)
}

// Cancel cancels run (CancelRun).
func (cl *Client) Cancel(ctx context.Context, run string) (*rolloutv1.CancelRunResponse, error) {
	return do(ctx, cl, "CancelRun", "", cl.c.CancelRun, &rolloutv1.CancelRunRequest{Run: run}, nil, nil)
}

// Status reads the counters of every run.
func (cl *Client) Status(ctx context.Context) (*rolloutv1.RunStatusResponse, error) {
	return do(ctx, cl, "RunStatus", "", cl.c.RunStatus, &rolloutv1.RunStatusRequest{}, nil, nil)
}

// StallEvents returns run's run-stalled and run-resumed events from the
// ledger's event history (every page), oldest first.
func (cl *Client) StallEvents(ctx context.Context, run string) ([]*rolloutv1.Event, error) {
	var out []*rolloutv1.Event
	after := uint64(0)
	for {
		resp, err := do(ctx, cl, "Events", "", cl.c.Events, &rolloutv1.EventsRequest{Run: run, AfterSeq: after, Limit: 1000}, nil, nil)
		if err != nil {
			return nil, err
		}
		for _, e := range resp.GetEvents() {
			after = max(after, e.GetSeq())
			if k := e.GetKind(); k == rolloutv1.EventKind_EVENT_KIND_RUN_STALLED || k == rolloutv1.EventKind_EVENT_KIND_RUN_RESUMED {
				out = append(out, e)
			}
		}
		if len(resp.GetEvents()) == 0 || after >= resp.GetLastSeq() {
			return out, nil
		}
	}
}

// RunStall returns run's stall as RunStatus reports it now (nil: the run
// is not stalled).
func (cl *Client) RunStall(ctx context.Context, run string) (*rolloutv1.RunStall, error) {
	resp, err := do(ctx, cl, "RunStatus", "", cl.c.RunStatus, &rolloutv1.RunStatusRequest{Run: run}, nil, nil)
	if err != nil {
		return nil, err
	}
	for _, rc := range resp.GetRuns() {
		if rc.GetName() == run {
			return rc.GetStall(), nil
		}
	}
	return nil, nil
}

// Results reads one page of run's items from index from.
func (cl *Client) Results(ctx context.Context, run string, from uint64, limit uint32) (*rolloutv1.ResultsResponse, error) {
	req := &rolloutv1.ResultsRequest{Run: run, FromIndex: from, Limit: limit}
	return do(ctx, cl, "Results", "", cl.c.Results, req, nil, func(r *rolloutv1.ResultsResponse) []history.Item {
		return history.FromResults(run, r.GetItems())
	})
}

// ReadAll reads every item of run in index order, page by page
// (runs.Results: pages checked to advance and stay in order), each page a
// recorded Results operation.
func (cl *Client) ReadAll(ctx context.Context, run string) ([]*rolloutv1.ResultItem, error) {
	var out []*rolloutv1.ResultItem
	err := runs.Results(ctx, recordedResults{cl}, run, runs.ResultsConfig{PageSize: 500, Timeout: cl.OpTimeout},
		func(it *rolloutv1.ResultItem) error {
			out = append(out, it)
			return nil
		})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// recordedResults reads pages through Client.Results, so that each is
// recorded in the history.
type recordedResults struct{ cl *Client }

func (r recordedResults) Results(ctx context.Context, req *rolloutv1.ResultsRequest) (*rolloutv1.ResultsResponse, error) {
	return r.cl.Results(ctx, req.GetRun(), req.GetFromIndex(), req.GetLimit())
}

// Register registers workerID (a worker must register before it claims),
// serving models (none: every model).
func (cl *Client) Register(ctx context.Context, workerID string, models ...string) (*rolloutv1.RegisterResponse, error) {
	return do(ctx, cl, "Register", workerID, cl.c.Register, &rolloutv1.RegisterRequest{WorkerId: workerID, Models: models}, nil, nil)
}

// Claim claims up to max items as workerID, long-polling up to wait.
func (cl *Client) Claim(ctx context.Context, workerID string, max uint32, wait time.Duration) (*rolloutv1.ClaimResponse, error) {
	req := &rolloutv1.ClaimRequest{WorkerId: workerID, MaxItems: max, WaitMs: uint32(wait / time.Millisecond)}
	return do(ctx, cl, "Claim", workerID, cl.c.Claim, req, nil, func(r *rolloutv1.ClaimResponse) []history.Item {
		return history.FromItems(r.GetItems())
	})
}

// Report sends reports as workerID.
func (cl *Client) Report(ctx context.Context, workerID string, reports []*rolloutv1.ItemReport) (*rolloutv1.ReportResponse, error) {
	req := &rolloutv1.ReportRequest{WorkerId: workerID, Reports: reports}
	return do(ctx, cl, "Report", workerID, cl.c.Report, req, history.FromReports(reports), func(r *rolloutv1.ReportResponse) []history.Item {
		return history.FromReportResults(req, r)
	})
}
