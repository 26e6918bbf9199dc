package main

import (
	"bytes"
	"context"
	"sort"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/rollout/rollout/api/coordclient"
	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/api/validate"
)

// fakeCoord is an in-memory coordinator for the CLI's tests: items are
// created on submit and finished by the test.
type fakeCoord struct {
	mu       sync.Mutex
	term     uint64
	runs     map[string]*fakeRun
	submits  []*rolloutv1.SubmitItemsRequest
	statuses int
	workers  []*rolloutv1.WorkerStatus
	// onStatus, when set, runs (locked) before each RunStatus answer.
	onStatus func(f *fakeCoord)
	// submitErr, when set, fails SubmitItems calls from the given count on.
	submitErr   error
	submitErrAt int
	// resultsHook may rewrite a Results reply.
	resultsHook func(*rolloutv1.ResultsResponse)
	// maxPage, when set, fails Results pages asking for more items with
	// RESOURCE_EXHAUSTED; limits records every asked limit.
	maxPage uint32
	limits  []uint32
	closed  bool
	// announce is what Cluster announces as limits (nil: the defaults);
	// clusters counts Cluster calls.
	announce *rolloutv1.Limits
	clusters int
	// busy, when positive, refuses that many SubmitItems calls as a
	// coordinator whose in-flight budget is full.
	busy int
}

type fakeRun struct {
	spec  *rolloutv1.RunSpec
	items map[uint64]*rolloutv1.ResultItem
}

var _ coordConn = (*fakeCoord)(nil)

func newFakeCoord() *fakeCoord {
	return &fakeCoord{term: 2, runs: map[string]*fakeRun{}}
}

func (f *fakeCoord) header() *rolloutv1.ReplyHeader {
	return &rolloutv1.ReplyHeader{Term: f.term, LeaderId: "c1", LeaderAddr: "127.0.0.1:7001", ReplicaId: "c1"}
}

func (f *fakeCoord) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

func (f *fakeCoord) SubmitItems(_ context.Context, req *rolloutv1.SubmitItemsRequest) (*rolloutv1.SubmitItemsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.submitErr != nil && len(f.submits) >= f.submitErrAt {
		return nil, f.submitErr
	}
	if f.busy > 0 {
		f.busy--
		return nil, status.Error(codes.ResourceExhausted, "coordinator busy: a 10-byte request does not fit in the in-flight request budget")
	}
	f.submits = append(f.submits, proto.Clone(req).(*rolloutv1.SubmitItemsRequest))
	r := f.runs[req.GetRun()]
	if r == nil {
		r = &fakeRun{spec: req.GetSpec(), items: map[uint64]*rolloutv1.ResultItem{}}
		f.runs[req.GetRun()] = r
	}
	resp := &rolloutv1.SubmitItemsResponse{Header: f.header()}
	for _, it := range req.GetItems() {
		if old, ok := r.items[it.GetIndex()]; ok && bytes.Equal(old.GetId(), it.GetId()) {
			switch old.GetState() {
			case rolloutv1.ItemState_ITEM_STATE_DONE:
				resp.AlreadyDone++
			case rolloutv1.ItemState_ITEM_STATE_RUNNING:
				resp.AlreadyRunning++
			default:
				resp.AlreadyPending++
			}
			continue
		}
		r.items[it.GetIndex()] = &rolloutv1.ResultItem{Id: it.GetId(), Index: it.GetIndex(),
			State: rolloutv1.ItemState_ITEM_STATE_PENDING, Payload: it.GetPayload()}
		resp.Created++
	}
	return resp, nil
}

// finish marks items [from, to) of run done with the mock result, or dead
// with reason when reason is not empty.
func (f *fakeCoord) finish(run string, from, to uint64, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.finishLocked(run, from, to, reason)
}

func (f *fakeCoord) finishLocked(run string, from, to uint64, reason string) {
	for i := from; i < to; i++ {
		it := f.runs[run].items[i]
		if reason != "" {
			it.State, it.Reason = rolloutv1.ItemState_ITEM_STATE_DEAD, reason
			continue
		}
		var m struct{ Prompt string }
		_ = jsonUnmarshal(it.GetPayload(), &m)
		it.State = rolloutv1.ItemState_ITEM_STATE_DONE
		it.Result = []byte(`{"completion":` + jsonQuote("MOCK:"+m.Prompt) + `,"finish_reason":"stop"}`)
	}
}

func (f *fakeCoord) counters(name string, r *fakeRun) *rolloutv1.RunCounters {
	rc := &rolloutv1.RunCounters{Name: name, Total: uint64(len(r.items)), ExpectedTotal: r.spec.GetTotal()}
	for _, it := range r.items {
		switch it.GetState() {
		case rolloutv1.ItemState_ITEM_STATE_PENDING:
			rc.Pending++
		case rolloutv1.ItemState_ITEM_STATE_RUNNING:
			rc.Running++
		case rolloutv1.ItemState_ITEM_STATE_DONE:
			rc.Done++
		case rolloutv1.ItemState_ITEM_STATE_DEAD:
			rc.Dead++
		}
	}
	return rc
}

func (f *fakeCoord) RunStatus(_ context.Context, req *rolloutv1.RunStatusRequest) (*rolloutv1.RunStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statuses++
	if f.onStatus != nil {
		f.onStatus(f)
	}
	resp := &rolloutv1.RunStatusResponse{Header: f.header(), Workers: f.workers, NowUnixMs: 1_000_000}
	if req.GetRun() != "" {
		r, ok := f.runs[req.GetRun()]
		if !ok {
			return nil, status.Errorf(codes.NotFound, "run %q not found", req.GetRun())
		}
		resp.Runs = append(resp.Runs, f.counters(req.GetRun(), r))
		return resp, nil
	}
	var names []string
	for n := range f.runs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		resp.Runs = append(resp.Runs, f.counters(n, f.runs[n]))
	}
	return resp, nil
}

func (f *fakeCoord) Results(_ context.Context, req *rolloutv1.ResultsRequest) (*rolloutv1.ResultsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.runs[req.GetRun()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "run %q not found", req.GetRun())
	}
	f.limits = append(f.limits, req.GetLimit())
	if f.maxPage > 0 && req.GetLimit() > f.maxPage {
		return nil, status.Error(codes.ResourceExhausted, "grpc: received message larger than max")
	}
	var idx []uint64
	for i := range r.items {
		if i >= req.GetFromIndex() {
			idx = append(idx, i)
		}
	}
	sort.Slice(idx, func(a, b int) bool { return idx[a] < idx[b] })
	resp := &rolloutv1.ResultsResponse{Header: f.header()}
	limit := int(req.GetLimit())
	if len(idx) <= limit {
		resp.Done = true
	} else {
		idx = idx[:limit]
		resp.NextIndex = idx[len(idx)-1] + 1
	}
	for _, i := range idx {
		resp.Items = append(resp.Items, proto.Clone(r.items[i]).(*rolloutv1.ResultItem))
	}
	if f.resultsHook != nil {
		f.resultsHook(resp)
	}
	return resp, nil
}

// Cluster answers with the announced limits.
func (f *fakeCoord) Cluster(context.Context, string) (*rolloutv1.ClusterResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.clusters++
	lim := f.announce
	if lim == nil {
		lim = validate.DefaultLimits().Proto()
	}
	return &rolloutv1.ClusterResponse{Header: f.header(), State: rolloutv1.ReplicaState_REPLICA_STATE_LEADER, Limits: lim}, nil
}

// connect returns an app.connect that hands out f and records the config.
func (f *fakeCoord) connect(got *coordclient.Config) func(coordclient.Config) (coordConn, error) {
	return func(cfg coordclient.Config) (coordConn, error) {
		if got != nil {
			*got = cfg
		}
		return f, nil
	}
}
