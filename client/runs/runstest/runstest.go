// Package runstest provides an in-memory fake coordinator for tests of
// clients of a run (the runs library, the CLI): items are created on submit
// and finished by the test; hooks script failures. WithRanges adds range
// runs (SubmitRanges). What it shares with the ledger is held to the real
// service by the conformance scenario (client/conformance). It links no
// testing package.
package runstest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/api/validate"
	"github.com/rollout/rollout/store"
	"github.com/rollout/rollout/store/storeurl"
)

// Coordinator is the fake. Create it with New. Its fields may be set
// before use; while it is in use, hold Mu to read or change them.
type Coordinator struct {
	Mu   sync.Mutex
	Term uint64
	Runs map[string]*Run
	// ClusterID is what Cluster announces as the cluster's identity
	// (New: TestClusterID; "": none yet). As the ledger does, a new run's
	// data_prefix must name it.
	ClusterID string
	// Submits records every accepted SubmitItems request; Statuses counts
	// RunStatus calls.
	Submits  []*rolloutv1.SubmitItemsRequest
	Statuses int
	// RangeSubmits records every accepted SubmitRanges request (through
	// WithRanges, ranges.go).
	RangeSubmits []*rolloutv1.SubmitRangesRequest
	// Workers is what RunStatus answers as the workers.
	Workers []*rolloutv1.WorkerStatus
	// OnStatus, when set, runs (Mu held) before each RunStatus answer.
	OnStatus func(f *Coordinator)
	// SubmitErr, when set, fails SubmitItems calls once SubmitErrAt
	// requests were accepted.
	SubmitErr   error
	SubmitErrAt int
	// ResultsHook may rewrite a Results reply.
	ResultsHook func(*rolloutv1.ResultsResponse)
	// ResultsErr, when set, fails every Results call (a certificate the
	// cluster refuses: PERMISSION_DENIED, say).
	ResultsErr error
	// MaxPage, when set, fails Results pages asking for more items with
	// RESOURCE_EXHAUSTED; Limits records every asked limit.
	MaxPage uint32
	Limits  []uint32
	// Closed is set by Close.
	Closed bool
	// Announce is what Cluster announces as limits (nil: the defaults);
	// Clusters counts Cluster calls.
	Announce *rolloutv1.Limits
	Clusters int
	// Busy, when positive, refuses that many SubmitItems calls as a
	// coordinator whose in-flight budget is full.
	Busy int
}

// Run is one run of the fake ledger: its spec and items by index. Items
// keep their depends_on; RunStatus counts a Pending item blocked while one
// of them is not Done (the test finishes items in any order it likes).
type Run struct {
	Spec  *rolloutv1.RunSpec
	Items map[uint64]*rolloutv1.ResultItem
	// Store is the run's store, opened from its spec (nil: inline data);
	// Finish reads payloads from it and writes results to it, as workers
	// do. Cancelled is set by CancelRun.
	Store     *store.Store
	Cancelled bool
	// Stall, when set (by the test), is what RunStatus reports as the
	// run's stall; like the ledger, a submit naming the run or a cancel
	// clears it.
	Stall *rolloutv1.RunStall
	// Ranges, when set (by the test), is what RunStatus reports as the
	// records the ledger holds for a run made of ranges; else a range run
	// (Ranged) reports its records, as the ledger does.
	Ranges uint64
	// Ranged marks a range run (created by WithRanges.SubmitRanges): its
	// Items are range records by first index, each counting Count indexes.
	Ranged bool
	// recSeq is a range run's last record number.
	recSeq uint64
}

// New returns an empty fake answering at term 2 as leader c1.
func New() *Coordinator {
	return &Coordinator{Term: 2, Runs: map[string]*Run{}, ClusterID: TestClusterID}
}

// TestClusterID is the identity a New fake announces.
const TestClusterID = "00000000000000000000000000c1a5e1"

// checkPrefix refuses, as the coordinator does, a submit whose spec names
// a data_prefix not of this cluster and run (a new run) or not the run's
// own (an existing one), and payload references outside the run's input
// prefix (InvalidArgument naming the key and the prefix).
func (f *Coordinator) checkPrefix(run string, r *Run, spec *rolloutv1.RunSpec, objects []string, inPlace bool) error {
	p := spec.GetDataPrefix()
	switch {
	case r != nil && p != "" && p != r.Spec.GetDataPrefix():
		return status.Errorf(codes.InvalidArgument, "invalid command: submit names data_prefix %q for run %q, whose data_prefix is %q", p, run, r.Spec.GetDataPrefix())
	case r == nil && p != "":
		if err := storeurl.CheckDataPrefix(p, f.ClusterID, run); err != nil {
			return status.Errorf(codes.InvalidArgument, "invalid command: %v", err)
		}
	}
	if r != nil {
		p = r.Spec.GetDataPrefix()
	}
	for _, o := range objects {
		if err := storeurl.CheckPayloadKey(o, run, p, inPlace); err != nil {
			return status.Errorf(codes.InvalidArgument, "submit refused, nothing was changed: %v", err)
		}
	}
	return nil
}

func (f *Coordinator) header() *rolloutv1.ReplyHeader {
	return &rolloutv1.ReplyHeader{Term: f.Term, LeaderId: "c1", LeaderAddr: "127.0.0.1:7001", ReplicaId: "c1"}
}

// Close sets Closed.
func (f *Coordinator) Close() error {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	f.Closed = true
	return nil
}

// SubmitItems creates the items not there yet (same index and id) as
// Pending and counts the others by state. As the ledger does, it refuses
// (InvalidArgument) a request with a spec for an existing run whose store
// string is another or for a range run, and (FailedPrecondition) any
// request for a cancelled run; refused requests are not recorded in
// Submits.
func (f *Coordinator) SubmitItems(_ context.Context, req *rolloutv1.SubmitItemsRequest) (*rolloutv1.SubmitItemsResponse, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	if f.SubmitErr != nil && len(f.Submits) >= f.SubmitErrAt {
		return nil, f.SubmitErr
	}
	if f.Busy > 0 {
		f.Busy--
		return nil, status.Error(codes.ResourceExhausted, "coordinator busy: a 10-byte request does not fit in the in-flight request budget")
	}
	r := f.Runs[req.GetRun()]
	if r != nil && req.GetSpec() != nil && req.GetSpec().GetStore() != r.Spec.GetStore() {
		// As the ledger: a run's store string never changes.
		return nil, status.Errorf(codes.InvalidArgument, "invalid command: submit names store %q for run %q, whose store is %q",
			req.GetSpec().GetStore(), req.GetRun(), r.Spec.GetStore())
	}
	if r != nil && r.Cancelled {
		return nil, status.Errorf(codes.FailedPrecondition, "run %q is cancelled", req.GetRun())
	}
	var objects []string
	for _, it := range req.GetItems() {
		if pr := it.GetPayloadRef(); pr != nil {
			objects = append(objects, pr.GetObject())
		}
	}
	if err := f.checkPrefix(req.GetRun(), r, req.GetSpec(), objects, true); err != nil {
		return nil, err
	}
	if r != nil && r.Ranged {
		return nil, status.Errorf(codes.InvalidArgument, "invalid command: submit names items with ids for run %q, a range run (its work is submitted as ranges)",
			req.GetRun())
	}
	f.Submits = append(f.Submits, proto.Clone(req).(*rolloutv1.SubmitItemsRequest))
	if r == nil {
		r = &Run{Spec: req.GetSpec(), Items: map[uint64]*rolloutv1.ResultItem{}}
		if u := req.GetSpec().GetStore(); u != "" {
			st, err := store.Open(context.Background(), u, store.DefaultOptions())
			if err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "spec store: %v", err)
			}
			r.Store = st
		}
		f.Runs[req.GetRun()] = r
	}
	r.Stall = nil // a resubmit re-uploads the inputs: the stall ends
	resp := &rolloutv1.SubmitItemsResponse{Header: f.header()}
	for _, it := range req.GetItems() {
		if old, ok := r.Items[it.GetIndex()]; ok && bytes.Equal(old.GetId(), it.GetId()) {
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
		r.Items[it.GetIndex()] = &rolloutv1.ResultItem{Id: it.GetId(), Index: it.GetIndex(),
			State: rolloutv1.ItemState_ITEM_STATE_PENDING, Payload: it.GetPayload(), DependsOn: it.GetDependsOn(),
			PayloadRef: it.GetPayloadRef()}
		resp.Created++
	}
	return resp, nil
}

// Finish marks items [from, to) of run done with the mock result, or dead
// with reason when reason is not empty.
func (f *Coordinator) Finish(run string, from, to uint64, reason string) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	f.FinishLocked(run, from, to, reason)
}

// FinishLocked is Finish with Mu held.
func (f *Coordinator) FinishLocked(run string, from, to uint64, reason string) {
	for i := from; i < to; i++ {
		it := f.Runs[run].Items[i]
		if reason != "" {
			it.State, it.Reason = rolloutv1.ItemState_ITEM_STATE_DEAD, reason
			continue
		}
		var m struct{ Prompt string }
		r := f.Runs[run]
		payload := it.GetPayload()
		if pr := it.GetPayloadRef(); pr != nil && r.Store != nil {
			b, err := r.Store.ReadRange(context.Background(), pr.GetObject(), int64(pr.GetOffset()), int64(pr.GetLength()))
			if err != nil {
				it.State, it.Reason = rolloutv1.ItemState_ITEM_STATE_DEAD, err.Error()
				continue
			}
			payload = b
		}
		_ = json.Unmarshal(payload, &m)
		it.State = rolloutv1.ItemState_ITEM_STATE_DONE
		res := mockResult(m.Prompt)
		if r.Store == nil {
			it.Result = res
			continue
		}
		key, _, _, err := r.Store.PutContent(context.Background(), store.RunResults(run, r.Spec.GetDataPrefix()), res)
		if err != nil {
			it.State, it.Reason = rolloutv1.ItemState_ITEM_STATE_DEAD, err.Error()
			continue
		}
		sum := store.Hash(res)
		it.ResultRef = &rolloutv1.DataRef{Object: key, Length: uint64(len(res)), Blake3: sum[:]}
	}
}

// CancelRun cancels a run: its pending items become cancelled. The counts
// are in indexes (a range record counts its width).
func (f *Coordinator) CancelRun(_ context.Context, req *rolloutv1.CancelRunRequest) (*rolloutv1.CancelRunResponse, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	r := f.Runs[req.GetRun()]
	if r == nil {
		return nil, status.Errorf(codes.NotFound, "run %q not found", req.GetRun())
	}
	resp := &rolloutv1.CancelRunResponse{Header: f.header()}
	r.Cancelled, r.Stall = true, nil
	for _, it := range r.Items {
		switch it.GetState() {
		case rolloutv1.ItemState_ITEM_STATE_PENDING:
			it.State = rolloutv1.ItemState_ITEM_STATE_CANCELLED
			resp.Cancelled += width(it)
		case rolloutv1.ItemState_ITEM_STATE_RUNNING:
			resp.Running += width(it)
		}
	}
	return resp, nil
}

// DeleteRun removes a finished or cancelled run; the reply counts its
// indexes.
func (f *Coordinator) DeleteRun(_ context.Context, req *rolloutv1.DeleteRunRequest) (*rolloutv1.DeleteRunResponse, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	r := f.Runs[req.GetRun()]
	if r == nil {
		return nil, status.Errorf(codes.NotFound, "run %q not found", req.GetRun())
	}
	rc := f.counters(req.GetRun(), r)
	if !r.Cancelled && rc.GetPending()+rc.GetRunning() > 0 {
		return nil, status.Errorf(codes.FailedPrecondition, "run %q is neither finished nor cancelled", req.GetRun())
	}
	delete(f.Runs, req.GetRun())
	return &rolloutv1.DeleteRunResponse{Header: f.header(), Items: rc.GetTotal(), Store: r.Spec.GetStore(), DataPrefix: rc.GetDataPrefix()}, nil
}

func (f *Coordinator) counters(name string, r *Run) *rolloutv1.RunCounters {
	rc := &rolloutv1.RunCounters{Name: name, ExpectedTotal: r.Spec.GetTotal(), Kind: r.Spec.GetKind(),
		Store: r.Spec.GetStore(), Cancelled: r.Cancelled, Tenant: r.Spec.GetTenant(), Priority: r.Spec.GetPriority()}
	if rc.Store != "" {
		rc.DataPrefix = storeurl.RunData(name, r.Spec.GetDataPrefix())
	}
	// As the ledger reports them: the default tenant and priority when the
	// spec names none.
	if rc.Tenant == "" {
		rc.Tenant = "default"
	}
	if rc.Priority == 0 {
		rc.Priority = 3
	}
	byID := make(map[string]*rolloutv1.ResultItem, len(r.Items))
	for _, it := range r.Items {
		byID[string(it.GetId())] = it
	}
	for _, it := range r.Items {
		n := width(it)
		rc.Total += n
		switch it.GetState() {
		case rolloutv1.ItemState_ITEM_STATE_PENDING:
			rc.Pending += n
			for _, d := range it.GetDependsOn() {
				if dep := byID[string(d)]; dep == nil || dep.GetState() != rolloutv1.ItemState_ITEM_STATE_DONE {
					rc.Blocked++
					break
				}
			}
		case rolloutv1.ItemState_ITEM_STATE_RUNNING:
			rc.Running += n
		case rolloutv1.ItemState_ITEM_STATE_DONE:
			rc.Done += n
		case rolloutv1.ItemState_ITEM_STATE_DEAD:
			rc.Dead += n
		case rolloutv1.ItemState_ITEM_STATE_CANCELLED:
			rc.CancelledItems += n
		}
	}
	rc.Model = r.Spec.GetModel()
	finished := rc.Pending+rc.Running == 0 && rc.Total > 0 && rc.Total >= rc.ExpectedTotal
	rc.UnservedModel = rc.Model != "" && !r.Cancelled && !finished && !f.served(rc.Kind, rc.Model)
	rc.Ranges = r.Ranges
	if r.Ranged && rc.Ranges == 0 {
		rc.Ranges = uint64(len(r.Items))
	}
	if r.Stall != nil {
		rc.Stall = proto.Clone(r.Stall).(*rolloutv1.RunStall)
	}
	return rc
}

// served reports whether a worker of Workers that is not lost runs kind
// and serves model (it names them, or names none), as the coordinator
// computes RunCounters.unserved_model.
func (f *Coordinator) served(kind, model string) bool {
	if kind == "" {
		kind = "batch"
	}
	for _, w := range f.Workers {
		if !w.GetLost() && (len(w.GetKinds()) == 0 || slices.Contains(w.GetKinds(), kind)) &&
			(len(w.GetModels()) == 0 || slices.Contains(w.GetModels(), model)) {
			return true
		}
	}
	return false
}

// RunStatus answers the counters of one run (NOT_FOUND when unknown) or
// of all.
func (f *Coordinator) RunStatus(_ context.Context, req *rolloutv1.RunStatusRequest) (*rolloutv1.RunStatusResponse, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	f.Statuses++
	if f.OnStatus != nil {
		f.OnStatus(f)
	}
	resp := &rolloutv1.RunStatusResponse{Header: f.header(), Workers: f.Workers, NowUnixMs: 1_000_000}
	if req.GetRun() != "" {
		r, ok := f.Runs[req.GetRun()]
		if !ok {
			return nil, status.Errorf(codes.NotFound, "run %q not found", req.GetRun())
		}
		resp.Runs = append(resp.Runs, f.counters(req.GetRun(), r))
		return resp, nil
	}
	var names []string
	for n := range f.Runs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		resp.Runs = append(resp.Runs, f.counters(n, f.Runs[n]))
	}
	return resp, nil
}

// Results pages through a run's records (items, or a range run's ranges)
// in index order (a limit of 0 is a page of up to 1000).
func (f *Coordinator) Results(_ context.Context, req *rolloutv1.ResultsRequest) (*rolloutv1.ResultsResponse, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	if f.ResultsErr != nil {
		return nil, f.ResultsErr
	}
	r, ok := f.Runs[req.GetRun()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "run %q not found", req.GetRun())
	}
	f.Limits = append(f.Limits, req.GetLimit())
	if f.MaxPage > 0 && req.GetLimit() > f.MaxPage {
		return nil, status.Error(codes.ResourceExhausted, "grpc: received message larger than max")
	}
	var idx []uint64
	for i := range r.Items {
		if i >= req.GetFromIndex() {
			idx = append(idx, i)
		}
	}
	sort.Slice(idx, func(a, b int) bool { return idx[a] < idx[b] })
	// As the service: no limit is the largest page; next_index follows
	// the page's last record (from_index for an empty page), done or not.
	resp := &rolloutv1.ResultsResponse{Header: f.header(), NextIndex: req.GetFromIndex()}
	limit := int(req.GetLimit())
	if limit <= 0 {
		limit = 1000
	}
	if len(idx) <= limit {
		resp.Done = true
	} else {
		idx = idx[:limit]
	}
	if len(idx) > 0 {
		last := idx[len(idx)-1]
		resp.NextIndex = last + width(r.Items[last])
	}
	for _, i := range idx {
		resp.Items = append(resp.Items, proto.Clone(r.Items[i]).(*rolloutv1.ResultItem))
	}
	if f.ResultsHook != nil {
		f.ResultsHook(resp)
	}
	return resp, nil
}

// Cluster answers with the announced limits.
func (f *Coordinator) Cluster(context.Context, string) (*rolloutv1.ClusterResponse, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	f.Clusters++
	lim := f.Announce
	if lim == nil {
		lim = validate.DefaultLimits().Proto()
	}
	return &rolloutv1.ClusterResponse{Header: f.header(), State: rolloutv1.ReplicaState_REPLICA_STATE_LEADER, Limits: lim, ClusterId: f.ClusterID}, nil
}

// mockResult is the mock backend's result for prompt.
func mockResult(prompt string) []byte {
	b, _ := json.Marshal(map[string]string{"completion": "MOCK:" + prompt, "finish_reason": "stop"})
	return b
}

// WriteInput writes n valid prompt lines (with a blank line after the
// first, which readers must skip) into dir/in.jsonl and returns its path.
// Line i is {"id":i,"prompt":"prompt i","meta":{"k":[i]}}.
func WriteInput(dir string, n int) (string, error) {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"id":%d,"prompt":"prompt %d","meta":{"k":[%d]}}`+"\n", i, i, i)
		if i == 0 {
			b.WriteString("\n")
		}
	}
	path := filepath.Join(dir, "in.jsonl")
	return path, os.WriteFile(path, []byte(b.String()), 0o644)
}
