// Package coordtest provides a scriptable in-memory fake of the rollout
// coordinator's gRPC service, for tests of workers and clients (in the
// manner of net/http/httptest).
//
// A Server keeps a tiny ledger with the real service's semantics (explicit
// registration, claim (FIFO: items join the back of the queue when they
// are submitted, re-pended or unblocked; only items whose dependencies are
// Done, handed out with their results and the run's kind; at most
// max_indexes indexes), report with compare-and-swap on owner and attempt
// (failures counted against the run's max_failures, nacks not counted),
// heartbeat with lost items, owned items, steal, deregister, eviction,
// cancel, delete; range runs: SubmitRanges, carving claims, ReportRange progress,
// started marks and bounds, tail steals and cancel cuts, see ranges.go) and
// lets a test script the rest (events too: registrations, deregistrations
// with their reason and evictions are recorded, AddEvent adds any other):
// the semantics it shares with the ledger are held to the real service by
// the conformance scenario (client/conformance);
// the term it answers with, "not leader" replies with a hint, and per-method
// interceptors that replace or precede the default behaviour.
package coordtest

import (
	"bytes"
	"context"
	"errors"
	"net"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/store/storeurl"
)

// State is an item's state in the fake ledger.
type State int

// Item states.
const (
	Pending State = iota + 1
	Running
	Done
	Dead
	// Cancelled: the item's run was cancelled before it finished.
	Cancelled
)

// MaxFailures is how many failed attempts make an item Dead in a run whose
// spec names no max_failures (the ledger's default).
const MaxFailures = 3

// Interceptor runs before the default handler of one method. Returning a
// non-nil response or error answers the call; returning (nil, nil) lets the
// default handler run.
type Interceptor func(ctx context.Context, req any) (any, error)

// ItemView is a copy of an item's ledger record.
type ItemView struct {
	Run     string
	ID      []byte
	Index   uint64
	Payload []byte
	State   State
	Owner   string
	Attempt uint64
	// Owner is the worker that holds a Running item, or that completed
	// or last failed a Done or Dead one (as the ledger keeps it).
	Result []byte
	// Reason is a Dead item's reason.
	Reason   string
	Failures int
	// DependsOn lists the ids of the items of the run this one depends on;
	// it is claimable only when they are all Done.
	DependsOn [][]byte
	// PayloadRef, ResultRef and Summary are the item's references into its
	// run's store and its result summary (runs with a store).
	PayloadRef *rolloutv1.DataRef
	ResultRef  *rolloutv1.DataRef
	Summary    []byte
	// Count is, for a record of a range run (SubmitRanges, ranges.go), its
	// number of indexes: it stands for [Index, Index+Count) of the chunk
	// whose first index is Base (PayloadRef names the whole chunk). Count
	// is 0 for an item.
	Count, Base uint64
	// Started is a Running range's high-water mark, as its owner's
	// heartbeats reported it (0: none reported).
	Started uint64
}

type key struct{ run, id string }

type item struct {
	ItemView
	seq     uint64 // when it joined the pending queue, for FIFO claims
	claimed uint64 // when its owner got it, for claim (and steal) order
}

type workerState struct {
	executing map[key]bool
	beats     int
}

// Server is the fake coordinator. Create it with Start.
type Server struct {
	rolloutv1.UnimplementedCoordinatorServer

	addr string
	id   string
	gs   *grpc.Server

	mu        sync.Mutex
	term      uint64
	follower  bool
	hint      string
	items     map[key]*item
	kinds     map[string]string // run -> RunSpec.kind
	specs     map[string]*rolloutv1.RunSpec
	cancelled map[string]bool   // the cancelled runs
	failures  map[string]uint64 // run -> failed attempts
	seq       uint64
	workers   map[string]*workerState
	intercept map[string]Interceptor
	calls     map[string]int
	reports   []*rolloutv1.ItemReport
	changed   chan struct{} // closed and replaced on every change
	maxWait   time.Duration
	mem       *bufconn.Listener  // StartInMemory's listener, else nil
	events    []*rolloutv1.Event // the event history (events.go)
	eventSeq  uint64             // the newest event's seq
	// models are the models of each worker's last Register, kept after
	// it deregisters (the fake records them; it does not route by them).
	models map[string][]string
	// stalls are the stalled runs (stall.go); stallProbe their probe
	// interval (0: DefaultStallProbe).
	stalls     map[string]*stall
	stallProbe time.Duration
	// storeSuspects are, per run not stalled, the workers that reported
	// its store unreachable (stall.go).
	storeSuspects map[string]map[string]bool
	// ranged marks the range runs; recSeq is each range run's last record
	// number (ranges.go).
	ranged map[string]bool
	recSeq map[string]uint64
	// clusterID is the identity Cluster announces (spec.go).
	clusterID string
}

// Start serves a fake coordinator on 127.0.0.1 (a free port) at term 1 as
// leader, and stops it when the test ends. opts are passed to
// grpc.NewServer (e.g. grpc.Creds for TLS).
func Start(t testing.TB, replicaID string, opts ...grpc.ServerOption) *Server {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("coordtest: listen: %v", err)
	}
	return serve(t, lis, lis.Addr().String(), replicaID, opts)
}

// StartAt is Start on the given TCP address (host:port), for a test that
// points a client at an address before anything listens there (reserve it
// with freeport.Ports) and starts the replica later.
func StartAt(t testing.TB, replicaID, addr string, opts ...grpc.ServerOption) *Server {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("coordtest: listen on %s: %v", addr, err)
	}
	return serve(t, lis, lis.Addr().String(), replicaID, opts)
}

// StartInMemory is Start over an in-memory listener (grpc's bufconn) in
// place of TCP: a client reaches it only through Dial (set it as
// coordclient.Config.Dial). Nothing in it blocks on the network, so a test
// that starts it inside a testing/synctest bubble runs on the bubble's fake
// clock. addr is the address it answers to (headers and hints carry it); make
// it an IP literal such as "127.0.0.1:1", since gRPC's resolver would look a
// host name up over the network.
func StartInMemory(t testing.TB, replicaID, addr string, opts ...grpc.ServerOption) *Server {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	s := serve(t, lis, addr, replicaID, opts)
	s.mem = lis
	return s
}

// Dial opens an in-memory connection to a server started with
// StartInMemory; it fails for one started with Start.
func (s *Server) Dial(ctx context.Context, _ string) (net.Conn, error) {
	if s.mem == nil {
		return nil, errors.New("coordtest: Dial needs a server from StartInMemory")
	}
	return s.mem.DialContext(ctx)
}

func serve(t testing.TB, lis net.Listener, addr, replicaID string, opts []grpc.ServerOption) *Server {
	s := newServer(addr, replicaID)
	s.gs = grpc.NewServer(append(opts, grpc.UnaryInterceptor(s.interceptor))...)
	rolloutv1.RegisterCoordinatorServer(s.gs, s)
	go func() { _ = s.gs.Serve(lis) }()
	t.Cleanup(s.Stop)
	return s
}

// NewLedger returns a fake that serves nothing: a ledger whose handler
// methods (SubmitItems, SubmitRanges, RunStatus, Results, CancelRun,
// DeleteRun, Cluster, ...) a test helper calls in-process, at term 1 as
// leader replicaID at addr. Interceptors and Calls apply only to served
// calls; Stop does nothing.
func NewLedger(replicaID, addr string) *Server { return newServer(addr, replicaID) }

func newServer(addr, replicaID string) *Server {
	return &Server{
		addr:      addr,
		id:        replicaID,
		term:      1,
		items:     make(map[key]*item),
		kinds:     make(map[string]string),
		specs:     make(map[string]*rolloutv1.RunSpec),
		cancelled: make(map[string]bool),
		failures:  make(map[string]uint64),
		ranged:    make(map[string]bool),
		recSeq:    make(map[string]uint64),
		workers:   make(map[string]*workerState),
		intercept: make(map[string]Interceptor),
		calls:     make(map[string]int),
		changed:   make(chan struct{}),
		maxWait:   10 * time.Second,
		clusterID: ClusterID,
	}
}

// Addr returns the server's host:port.
func (s *Server) Addr() string { return s.addr }

// Stop stops serving at once (open calls fail). It is idempotent; on a
// NewLedger fake it does nothing.
func (s *Server) Stop() {
	if s.gs != nil {
		s.gs.Stop()
	}
}

// SetTerm sets the term put in reply headers (it may go down, to fake a
// deposed leader's late replies).
func (s *Server) SetTerm(term uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.term = term
	s.notifyLocked()
}

// Term returns the term put in reply headers.
func (s *Server) Term() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.term
}

// SetFollower makes every call except Cluster answer UNAVAILABLE with a
// ReplyHeader naming leaderAddr ("" = leader unknown) in its details.
func (s *Server) SetFollower(leaderAddr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.follower, s.hint = true, leaderAddr
	s.notifyLocked()
}

// SetLeader makes the server serve calls again.
func (s *Server) SetLeader() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.follower, s.hint = false, ""
	s.notifyLocked()
}

// Intercept installs fn before the default handler of method (the short
// name, e.g. "Claim"); nil removes it.
func (s *Server) Intercept(method string, fn Interceptor) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fn == nil {
		delete(s.intercept, method)
		return
	}
	s.intercept[method] = fn
}

// Calls returns how many calls of method (short name) arrived, including
// intercepted and refused ones.
func (s *Server) Calls(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[method]
}

// Reports returns every ItemReport received by the default Report handler,
// in arrival order.
func (s *Server) Reports() []*rolloutv1.ItemReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*rolloutv1.ItemReport(nil), s.reports...)
}

// Header returns the header the server would put in a reply now.
func (s *Server) Header() *rolloutv1.ReplyHeader {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.headerLocked()
}

// Add puts Pending items into run. Items whose id exists are left alone.
func (s *Server) Add(run string, items ...*rolloutv1.SubmitItem) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addLocked(run, items)
}

// Assign puts items directly into Running(worker, attempt) (creating them
// when missing), as if claimed by a reply the worker never saw.
func (s *Server) Assign(worker string, attempt uint64, run string, items ...*rolloutv1.SubmitItem) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addLocked(run, items)
	for _, in := range items {
		it := s.items[key{run, string(in.GetId())}]
		it.State, it.Owner, it.Attempt = Running, worker, attempt
		s.seq++
		it.claimed = s.seq
	}
	s.notifyLocked()
}

// Item returns a copy of an item's record.
func (s *Server) Item(run string, id []byte) (ItemView, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	it, ok := s.items[key{run, string(id)}]
	if !ok {
		return ItemView{}, false
	}
	return it.copy(), true
}

// Items returns copies of all items, ordered by run and index.
func (s *Server) Items() []ItemView {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ItemView, 0, len(s.items))
	for _, it := range s.items {
		out = append(out, it.copy())
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Run != out[j].Run {
			return out[i].Run < out[j].Run
		}
		return out[i].Index < out[j].Index
	})
	return out
}

// Count returns how many records (items, or a range run's ranges) are in
// state st.
func (s *Server) Count(st State) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, it := range s.items {
		if it.State == st {
			n++
		}
	}
	return n
}

// Executing returns the executing keys of worker's last heartbeat.
func (s *Server) Executing(worker string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w, ok := s.workers[worker]; ok {
		return len(w.executing)
	}
	return 0
}

// AddWorker registers worker as if it had called Register.
func (s *Server) AddWorker(worker string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.worker(worker)
	s.notifyLocked()
}

// Models returns the models worker named in its last Register, even after
// it deregistered (nil when it named none or never registered). The fake
// does not route items by model.
func (s *Server) Models(worker string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.models[worker])
}

// Registered reports whether worker is registered.
func (s *Server) Registered(worker string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.workers[worker]
	return ok
}

// Evict does what EvictWorker does: it re-pends worker's Running items and
// forgets the worker (which must register again). It returns how many
// indexes it re-pended (an item counts one, a range its width), or -1 when
// worker was not registered.
func (s *Server) Evict(worker string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.evictLocked(worker)
}

func (s *Server) evictLocked(worker string) int {
	if _, ok := s.workers[worker]; !ok {
		return -1
	}
	n := s.rependLocked(worker)
	delete(s.workers, worker)
	s.notifyLocked()
	return n
}

// rependLocked puts worker's Running records back to Pending whole, in
// claim order, at their attempts (Cancelled in a cancelled run), and
// returns how many indexes they hold.
func (s *Server) rependLocked(worker string) int {
	n := 0
	for _, it := range s.ownedLocked(worker) {
		s.enqueueLocked(it)
		n += int(it.width())
	}
	return n
}

// enqueueLocked makes it Pending at the back of the queue with no owner,
// or Cancelled when its run is cancelled, as the ledger's enqueue.
func (s *Server) enqueueLocked(it *item) {
	it.Owner = ""
	if s.cancelled[it.Run] {
		it.State = Cancelled
		return
	}
	it.State = Pending
	s.seq++
	it.seq = s.seq
}

// unblockLocked is called when it has just become Done: its Pending
// dependents that wait on nothing more join the back of the queue in index
// order, as in the ledger.
func (s *Server) unblockLocked(done *item) {
	var ready []*item
	for _, it := range s.items {
		if it.Run != done.Run || it.State != Pending || !slices.ContainsFunc(it.DependsOn, func(id []byte) bool { return bytes.Equal(id, done.ID) }) {
			continue
		}
		if !s.blockedLocked(it) {
			ready = append(ready, it)
		}
	}
	sort.Slice(ready, func(i, j int) bool { return ready[i].Index < ready[j].Index })
	for _, it := range ready {
		s.seq++
		it.seq = s.seq
	}
}

// maxFailuresLocked is run's max_failures (MaxFailures when its spec names none).
func (s *Server) maxFailuresLocked(run string) int {
	if n := s.specs[run].GetMaxFailures(); n > 0 {
		return int(n)
	}
	return MaxFailures
}

// registeredLocked returns the FAILED_PRECONDITION a worker that is not
// registered gets, or nil.
func (s *Server) registeredLocked(worker string) error {
	if _, ok := s.workers[worker]; ok {
		return nil
	}
	return rolloutv1.NotRegisteredError(worker)
}

// Heartbeats returns how many heartbeats worker sent.
func (s *Server) Heartbeats(worker string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w, ok := s.workers[worker]; ok {
		return w.beats
	}
	return 0
}

func (it *item) copy() ItemView {
	v := it.ItemView
	v.ID = bytes.Clone(v.ID)
	v.Payload = bytes.Clone(v.Payload)
	v.Result = bytes.Clone(v.Result)
	v.DependsOn = cloneIDs(v.DependsOn)
	v.PayloadRef = proto.Clone(v.PayloadRef).(*rolloutv1.DataRef)
	v.ResultRef = proto.Clone(v.ResultRef).(*rolloutv1.DataRef)
	v.Summary = bytes.Clone(v.Summary)
	return v
}

func cloneIDs(ids [][]byte) [][]byte {
	if ids == nil {
		return nil
	}
	out := make([][]byte, len(ids))
	for i, id := range ids {
		out[i] = bytes.Clone(id)
	}
	return out
}

// protoLocked is it as handed to a worker: with its run's kind and its
// dependencies' results, in depends_on order, like the real service.
func (s *Server) protoLocked(it *item) *rolloutv1.Item {
	pb := &rolloutv1.Item{Run: it.Run, Id: bytes.Clone(it.ID), Index: it.Index, Payload: bytes.Clone(it.Payload),
		Attempt: it.Attempt, Kind: s.kinds[it.Run], Count: it.Count, Base: it.Base, Started: it.Started}
	if sp := s.specs[it.Run]; sp != nil {
		pb.Model, pb.Sampling, pb.Store = sp.GetModel(), bytes.Clone(sp.GetSampling()), sp.GetStore()
		if pb.Store != "" {
			pb.DataPrefix = s.dataPrefixLocked(it.Run)
		}
	}
	if it.PayloadRef != nil {
		pb.PayloadRef = proto.Clone(it.PayloadRef).(*rolloutv1.DataRef)
	}
	for _, id := range it.DependsOn {
		d := &rolloutv1.Dependency{Id: bytes.Clone(id)}
		if dep := s.items[key{it.Run, string(id)}]; dep != nil {
			d.Result = bytes.Clone(dep.Result)
			if dep.ResultRef != nil {
				d.ResultRef = proto.Clone(dep.ResultRef).(*rolloutv1.DataRef)
			}
			d.Summary = bytes.Clone(dep.Summary)
		}
		pb.Deps = append(pb.Deps, d)
	}
	return pb
}

// blockedLocked reports whether it depends on an item that is not Done.
func (s *Server) blockedLocked(it *item) bool {
	for _, id := range it.DependsOn {
		if dep := s.items[key{it.Run, string(id)}]; dep == nil || dep.State != Done {
			return true
		}
	}
	return false
}

// SetKind sets the kind (RunSpec.kind) the items of run are handed out
// with; SubmitItems with a spec sets it too.
func (s *Server) SetKind(run, kind string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kinds[run] = kind
}

// SetSpec records run's spec: its items are handed out with its model,
// sampling, store and kind (SubmitItems with a spec records it too, the
// first time).
func (s *Server) SetSpec(run string, spec *rolloutv1.RunSpec) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.specs[run] = proto.Clone(spec).(*rolloutv1.RunSpec)
	s.kinds[run] = spec.GetKind()
}

// addLocked creates the items of run not there yet (Pending, or Dead with
// their dead_reason) and counts the others by state as SubmitItems answers;
// with retryDead it re-pends Dead items (not those created Dead).
func (s *Server) addLocked(run string, items []*rolloutv1.SubmitItem) *rolloutv1.SubmitItemsResponse {
	return s.submitLocked(run, items, false)
}

func (s *Server) submitLocked(run string, items []*rolloutv1.SubmitItem, retryDead bool) *rolloutv1.SubmitItemsResponse {
	resp := &rolloutv1.SubmitItemsResponse{}
	for _, in := range items {
		k := key{run, string(in.GetId())}
		if ex, ok := s.items[k]; ok {
			switch ex.State {
			case Pending:
				resp.AlreadyPending++
			case Running:
				resp.AlreadyRunning++
			case Done:
				resp.AlreadyDone++
			case Dead:
				if !retryDead || in.GetDeadReason() != "" {
					resp.Dead++
					continue
				}
				ex.Failures, ex.Reason = 0, ""
				s.enqueueLocked(ex)
				resp.Retried++
			}
			continue
		}
		s.seq++
		it := &item{seq: s.seq, ItemView: ItemView{
			Run: run, ID: bytes.Clone(in.GetId()), Index: in.GetIndex(), Payload: bytes.Clone(in.GetPayload()), State: Pending,
			DependsOn: cloneIDs(in.GetDependsOn()),
		}}
		if in.GetPayloadRef() != nil {
			it.PayloadRef = proto.Clone(in.GetPayloadRef()).(*rolloutv1.DataRef)
		}
		s.items[k] = it
		if r := in.GetDeadReason(); r != "" {
			it.State, it.Reason = Dead, r
			resp.CreatedDead++
			continue
		}
		resp.Created++
	}
	s.notifyLocked()
	return resp
}

func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *Server) headerLocked() *rolloutv1.ReplyHeader {
	h := &rolloutv1.ReplyHeader{Term: s.term, ReplicaId: s.id}
	if s.follower {
		h.LeaderAddr = s.hint
	} else {
		h.LeaderAddr, h.LeaderId = s.addr, s.id
	}
	return h
}

// notLeaderLocked is the UNAVAILABLE error with a hint, or nil when leading.
func (s *Server) notLeaderLocked() error {
	if !s.follower {
		return nil
	}
	st, err := status.New(codes.Unavailable, "not leader").WithDetails(s.headerLocked())
	if err != nil {
		return status.Error(codes.Unavailable, "not leader")
	}
	return st.Err()
}

func (s *Server) interceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	name := info.FullMethod
	if i := len("/rollout.v1.Coordinator/"); len(name) > i {
		name = name[i:]
	}
	s.mu.Lock()
	s.calls[name]++
	fn := s.intercept[name]
	s.mu.Unlock()
	if fn != nil {
		resp, err := fn(ctx, req)
		if resp != nil || err != nil {
			return resp, err
		}
	}
	return handler(ctx, req)
}

func (s *Server) worker(id string) *workerState {
	w, ok := s.workers[id]
	if !ok {
		w = &workerState{executing: make(map[key]bool)}
		s.workers[id] = w
	}
	return w
}

// SubmitItems adds items as Pending and counts the ones there by state (a
// run's spec is recorded by its first submit; a larger total raises it).
// A cancelled run takes no items (FailedPrecondition), nor does a range run
// (InvalidArgument); a spec naming another store or data_prefix than the
// run's, or a new run's data_prefix not of this cluster and run, is refused
// (InvalidArgument, spec.go).
func (s *Server) SubmitItems(_ context.Context, req *rolloutv1.SubmitItemsRequest) (*rolloutv1.SubmitItemsResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.notLeaderLocked(); err != nil {
		return nil, err
	}
	if req.GetRun() == "" {
		return nil, status.Error(codes.InvalidArgument, "run is empty")
	}
	if s.cancelled[req.GetRun()] {
		return nil, status.Errorf(codes.FailedPrecondition, "run %q was cancelled; it takes no new items", req.GetRun())
	}
	if s.ranged[req.GetRun()] {
		return nil, status.Errorf(codes.InvalidArgument, "invalid command: submit names items with ids for run %q, a range run (its work is submitted as ranges)", req.GetRun())
	}
	if err := s.checkSpecLocked("submit", req.GetRun(), req.GetSpec()); err != nil {
		return nil, err
	}
	var objects []string
	for _, it := range req.GetItems() {
		if pr := it.GetPayloadRef(); pr != nil {
			objects = append(objects, pr.GetObject())
		}
	}
	if err := s.checkPayloadsLocked(req.GetRun(), req.GetSpec(), objects, true); err != nil {
		return nil, err
	}
	if sp := req.GetSpec(); sp != nil {
		if old, ok := s.specs[req.GetRun()]; !ok {
			s.specs[req.GetRun()] = proto.Clone(sp).(*rolloutv1.RunSpec)
		} else if sp.GetTotal() > old.GetTotal() {
			old.Total = sp.GetTotal()
		}
	}
	if k := req.GetSpec().GetKind(); k != "" {
		if _, ok := s.kinds[req.GetRun()]; !ok {
			s.kinds[req.GetRun()] = k
		}
	}
	resp := s.submitLocked(req.GetRun(), req.GetItems(), req.GetRetryDead())
	s.resumeLocked(req.GetRun(), "the run was submitted again")
	resp.Header = s.headerLocked()
	return resp, nil
}

// takeLocked picks a claim's records from the claimable pend (in queue
// order): at most max_items records and max_indexes indexes (0: max_items;
// an item counts one, a range its width), a range longer than what is left
// carved (its head is taken, the rest keeps its queue place).
func (s *Server) takeLocked(pend []*item, req *rolloutv1.ClaimRequest) []*item {
	budget := req.GetMaxIndexes()
	if budget == 0 {
		budget = uint64(req.GetMaxItems())
	}
	var out []*item
	for _, it := range pend {
		if len(out) == int(req.GetMaxItems()) || budget == 0 {
			break
		}
		if it.width() > budget {
			it = s.carveLocked(it, budget)
		}
		budget -= it.width()
		out = append(out, it)
	}
	return out
}

// Claim long-polls for Pending records (FIFO): items and ranges, a range
// carved to fit max_indexes.
func (s *Server) Claim(ctx context.Context, req *rolloutv1.ClaimRequest) (*rolloutv1.ClaimResponse, error) {
	if req.GetWorkerId() == "" || req.GetMaxItems() == 0 {
		return nil, status.Error(codes.InvalidArgument, "worker_id and max_items are required")
	}
	wait := min(time.Duration(req.GetWaitMs())*time.Millisecond, s.maxWait)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		s.mu.Lock()
		if err := s.notLeaderLocked(); err != nil {
			s.mu.Unlock()
			return nil, err
		}
		if err := s.registeredLocked(req.GetWorkerId()); err != nil {
			s.mu.Unlock()
			return nil, err
		}
		var pend []*item
		for _, it := range s.items {
			if it.State == Pending && !s.blockedLocked(it) {
				pend = append(pend, it)
			}
		}
		sort.Slice(pend, func(i, j int) bool { return pend[i].seq < pend[j].seq })
		now := time.Now()
		pend, nextProbe := s.claimableLocked(pend, now)
		if taken := s.takeLocked(pend, req); len(taken) > 0 {
			resp := &rolloutv1.ClaimResponse{Header: s.headerLocked()}
			for _, it := range taken {
				s.probeTakenLocked(it, now)
				s.assignLocked(it, req.GetWorkerId())
				resp.Items = append(resp.Items, s.protoLocked(it))
			}
			s.notifyLocked()
			s.mu.Unlock()
			return resp, nil
		}
		changed := s.changed
		s.mu.Unlock()
		var probeDue <-chan time.Time
		if !nextProbe.IsZero() {
			pt := time.NewTimer(time.Until(nextProbe))
			defer pt.Stop()
			probeDue = pt.C
		}
		select {
		case <-changed:
		case <-probeDue:
		case <-timer.C:
			s.mu.Lock()
			defer s.mu.Unlock()
			if err := s.notLeaderLocked(); err != nil {
				return nil, err
			}
			return &rolloutv1.ClaimResponse{Header: s.headerLocked()}, nil
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
}

// Report applies reports with compare-and-swap on owner and attempt.
func (s *Server) Report(_ context.Context, req *rolloutv1.ReportRequest) (*rolloutv1.ReportResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.notLeaderLocked(); err != nil {
		return nil, err
	}
	if req.GetWorkerId() == "" || len(req.GetReports()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "worker_id and reports are required")
	}
	resp := &rolloutv1.ReportResponse{Header: s.headerLocked()}
	for _, r := range req.GetReports() {
		s.reports = append(s.reports, r)
		resp.Results = append(resp.Results, &rolloutv1.ReportResult{Id: r.GetId(), Status: s.applyLocked(req.GetWorkerId(), r)})
	}
	s.notifyLocked()
	return resp, nil
}

func (s *Server) applyLocked(worker string, r *rolloutv1.ItemReport) rolloutv1.ReportStatus {
	it, ok := s.items[key{r.GetRun(), string(r.GetId())}]
	if !ok {
		return rolloutv1.ReportStatus_REPORT_STATUS_NOT_FOUND
	}
	if it.width() > 1 && (r.GetOutcome() == rolloutv1.Outcome_OUTCOME_DONE || r.GetOutcome() == rolloutv1.Outcome_OUTCOME_FAILED) {
		// A range's indexes are reported with ReportRange; a nack gives
		// it back whole.
		return rolloutv1.ReportStatus_REPORT_STATUS_INVALID
	}
	if r.GetOutcome() == rolloutv1.Outcome_OUTCOME_DONE && it.State == Done {
		if !bytes.Equal(it.Result, r.GetResult()) || !bytes.Equal(it.ResultRef.GetBlake3(), r.GetResultRef().GetBlake3()) {
			return rolloutv1.ReportStatus_REPORT_STATUS_CONFLICT
		}
		// Only the winning completion's own retry is idempotent.
		if it.Owner != worker || it.Attempt != r.GetAttempt() {
			return rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS
		}
		return rolloutv1.ReportStatus_REPORT_STATUS_APPLIED
	}
	if it.State != Running || it.Owner != worker || it.Attempt != r.GetAttempt() {
		return rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS
	}
	switch r.GetOutcome() {
	case rolloutv1.Outcome_OUTCOME_DONE, rolloutv1.Outcome_OUTCOME_FAILED:
		s.reportedLocked(it)
	}
	switch r.GetOutcome() {
	case rolloutv1.Outcome_OUTCOME_DONE:
		it.State, it.Result = Done, bytes.Clone(r.GetResult())
		it.Summary = bytes.Clone(r.GetSummary())
		if r.GetResultRef() != nil {
			it.ResultRef = proto.Clone(r.GetResultRef()).(*rolloutv1.DataRef)
		}
		s.unblockLocked(it)
	case rolloutv1.Outcome_OUTCOME_FAILED:
		it.Failures++
		s.failures[it.Run]++
		if it.Failures >= s.maxFailuresLocked(it.Run) || r.GetPermanent() {
			it.State, it.Reason = Dead, r.GetReason()
		} else {
			s.enqueueLocked(it)
		}
	case rolloutv1.Outcome_OUTCOME_NACK:
		s.enqueueLocked(it)
	case rolloutv1.Outcome_OUTCOME_HELD:
		s.holdLocked(worker, it, r)
	default:
		return rolloutv1.ReportStatus_REPORT_STATUS_INVALID
	}
	return rolloutv1.ReportStatus_REPORT_STATUS_APPLIED
}

// Register registers the worker, or refreshes a registered one.
func (s *Server) Register(_ context.Context, req *rolloutv1.RegisterRequest) (*rolloutv1.RegisterResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.notLeaderLocked(); err != nil {
		return nil, err
	}
	if req.GetWorkerId() == "" {
		return nil, status.Error(codes.InvalidArgument, "worker_id is empty")
	}
	if _, ok := s.workers[req.GetWorkerId()]; !ok {
		s.recordLocked(&rolloutv1.Event{Kind: rolloutv1.EventKind_EVENT_KIND_WORKER_REGISTERED, Worker: req.GetWorkerId()})
	}
	s.worker(req.GetWorkerId())
	if s.models == nil {
		s.models = make(map[string][]string)
	}
	s.models[req.GetWorkerId()] = slices.Clone(req.GetModels())
	s.notifyLocked()
	return &rolloutv1.RegisterResponse{Header: s.headerLocked()}, nil
}

// EvictWorker re-pends a registered worker's items and forgets it; an
// unknown worker is NOT_FOUND.
func (s *Server) EvictWorker(_ context.Context, req *rolloutv1.EvictWorkerRequest) (*rolloutv1.EvictWorkerResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.notLeaderLocked(); err != nil {
		return nil, err
	}
	n := s.evictLocked(req.GetWorkerId())
	if n < 0 {
		return nil, status.Errorf(codes.NotFound, "worker %q is not registered", req.GetWorkerId())
	}
	s.recordLocked(&rolloutv1.Event{Kind: rolloutv1.EventKind_EVENT_KIND_WORKER_EVICTED, Worker: req.GetWorkerId(), Count: uint64(n)})
	return &rolloutv1.EvictWorkerResponse{Header: s.headerLocked(), Repended: uint64(n)}, nil
}

// Heartbeat refreshes a registered worker and lists held items it does not
// own, and the bounds of the held ranges it does; an executing range's
// started raises its high-water mark. An unregistered worker gets
// FAILED_PRECONDITION.
func (s *Server) Heartbeat(_ context.Context, req *rolloutv1.HeartbeatRequest) (*rolloutv1.HeartbeatResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.notLeaderLocked(); err != nil {
		return nil, err
	}
	if req.GetWorkerId() == "" {
		return nil, status.Error(codes.InvalidArgument, "worker_id is empty")
	}
	if err := s.registeredLocked(req.GetWorkerId()); err != nil {
		return nil, err
	}
	w := s.worker(req.GetWorkerId())
	w.beats++
	w.executing = make(map[key]bool)
	for _, k := range req.GetExecuting() {
		w.executing[key{k.GetRun(), string(k.GetId())}] = true
	}
	resp := &rolloutv1.HeartbeatResponse{Header: s.headerLocked(), Bounds: s.heartbeatRangesLocked(req.GetWorkerId(), req)}
	for _, k := range req.GetHeld() {
		it, ok := s.items[key{k.GetRun(), string(k.GetId())}]
		if !ok || it.State != Running || it.Owner != req.GetWorkerId() || it.Attempt != k.GetAttempt() {
			resp.Lost = append(resp.Lost, k)
		}
	}
	return resp, nil
}

// Deregister re-pends the worker's Running items.
func (s *Server) Deregister(_ context.Context, req *rolloutv1.DeregisterRequest) (*rolloutv1.DeregisterResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.notLeaderLocked(); err != nil {
		return nil, err
	}
	n := s.rependLocked(req.GetWorkerId())
	if _, ok := s.workers[req.GetWorkerId()]; ok {
		s.recordLocked(&rolloutv1.Event{Kind: rolloutv1.EventKind_EVENT_KIND_WORKER_DEREGISTERED,
			Worker: req.GetWorkerId(), Detail: req.GetReason(), Count: uint64(n)})
	}
	delete(s.workers, req.GetWorkerId())
	s.notifyLocked()
	return &rolloutv1.DeregisterResponse{Header: s.headerLocked(), Repended: uint64(n)}, nil
}

// OwnedItems lists the worker's Running items by index.
func (s *Server) OwnedItems(_ context.Context, req *rolloutv1.OwnedItemsRequest) (*rolloutv1.OwnedItemsResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.notLeaderLocked(); err != nil {
		return nil, err
	}
	resp := &rolloutv1.OwnedItemsResponse{Header: s.headerLocked()}
	for _, it := range s.ownedLocked(req.GetWorkerId()) {
		resp.Items = append(resp.Items, s.protoLocked(it))
	}
	return resp, nil
}

func (s *Server) ownedLocked(worker string) []*item {
	var out []*item
	for _, it := range s.items {
		if it.State == Running && it.Owner == worker {
			out = append(out, it)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].claimed < out[j].claimed })
	return out
}

// Steal moves work from the worker with the most stealable work (an item
// counts one, a range its indexes past its high-water mark) to the idle
// caller, as the ledger does: up to half of it, rounded up, at most 32,
// latest claims first, each at the next attempt. Items the victim executes
// stay; from a range the thief takes a tail of at most half its unstarted
// indexes (ranges.go).
func (s *Server) Steal(_ context.Context, req *rolloutv1.StealRequest) (*rolloutv1.StealResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.notLeaderLocked(); err != nil {
		return nil, err
	}
	if err := s.registeredLocked(req.GetWorkerId()); err != nil {
		return nil, err
	}
	if req.GetBacklog() != 0 {
		return nil, status.Error(codes.FailedPrecondition, "backlog is not empty")
	}
	owners := make(map[string]bool)
	for _, it := range s.items {
		if it.State == Running && it.Owner != req.GetWorkerId() {
			owners[it.Owner] = true
		}
	}
	victim, most := "", uint64(0)
	for w := range owners {
		n := stealable(s.ownedLocked(w))
		if n > 0 && (n > most || (n == most && w < victim)) {
			victim, most = w, n
		}
	}
	resp := &rolloutv1.StealResponse{Header: s.headerLocked(), Victim: victim}
	if victim == "" {
		return resp, nil
	}
	var exec map[key]bool
	if w, ok := s.workers[victim]; ok {
		exec = w.executing
	}
	for _, it := range s.stealRangesLocked(req.GetWorkerId(), s.ownedLocked(victim), exec, min((most+1)/2, 32)) {
		resp.Items = append(resp.Items, s.protoLocked(it))
	}
	s.notifyLocked()
	return resp, nil
}

// Cluster describes this fake replica; it is served by followers too.
func (s *Server) Cluster(context.Context, *rolloutv1.ClusterRequest) (*rolloutv1.ClusterResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	state := rolloutv1.ReplicaState_REPLICA_STATE_LEADER
	if s.follower {
		state = rolloutv1.ReplicaState_REPLICA_STATE_FOLLOWER
	}
	return &rolloutv1.ClusterResponse{
		Header:    s.headerLocked(),
		State:     state,
		Members:   []*rolloutv1.Member{{Id: s.id, GrpcAddr: s.addr, Leader: !s.follower}},
		ClusterId: s.clusterID,
	}, nil
}

// ClusterID is the identity a fake announces (ClusterResponse) unless
// SetClusterID names another.
const ClusterID = "000000000000000000000000c0deface"

// dataPrefixLocked is the key prefix of run's objects: its spec's
// data_prefix, or runs/NAME/ (storeurl.RunData).
func (s *Server) dataPrefixLocked(run string) string {
	return storeurl.RunData(run, s.specs[run].GetDataPrefix())
}

// checkPayloadsLocked refuses, as the service does, a submit to run whose
// payload references name objects outside the run's input prefix (the
// run's recorded data prefix, else the one spec names).
func (s *Server) checkPayloadsLocked(run string, spec *rolloutv1.RunSpec, objects []string, inPlace bool) error {
	p := spec.GetDataPrefix()
	if old, ok := s.specs[run]; ok {
		p = old.GetDataPrefix()
	}
	for _, o := range objects {
		if err := storeurl.CheckPayloadKey(o, run, p, inPlace); err != nil {
			return status.Errorf(codes.InvalidArgument, "submit refused, nothing was changed: %v", err)
		}
	}
	return nil
}

// RunStatus returns one run's counters (or all runs'), in indexes (a
// range counts its width); a range run's ranges count its records.
func (s *Server) RunStatus(_ context.Context, req *rolloutv1.RunStatusRequest) (*rolloutv1.RunStatusResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.notLeaderLocked(); err != nil {
		return nil, err
	}
	runs := make(map[string]*rolloutv1.RunCounters)
	for _, it := range s.items {
		if req.GetRun() != "" && it.Run != req.GetRun() {
			continue
		}
		rc, ok := runs[it.Run]
		if !ok {
			rc = s.runCountersLocked(it.Run)
			runs[it.Run] = rc
		}
		n := it.width()
		rc.Total += n
		if s.ranged[it.Run] {
			rc.Ranges++
		}
		switch it.State {
		case Pending:
			rc.Pending += n
			if s.blockedLocked(it) {
				rc.Blocked += n
			}
		case Running:
			rc.Running += n
		case Done:
			rc.Done += n
		case Dead:
			rc.Dead += n
		case Cancelled:
			rc.CancelledItems += n
		}
	}
	if req.GetRun() != "" && runs[req.GetRun()] == nil {
		return nil, status.Errorf(codes.NotFound, "run %q not found", req.GetRun())
	}
	resp := &rolloutv1.RunStatusResponse{Header: s.headerLocked(), NowUnixMs: time.Now().UnixMilli()}
	for _, rc := range runs {
		rc.Stall = s.stallLocked(rc.Name)
		resp.Runs = append(resp.Runs, rc)
	}
	sort.Slice(resp.Runs, func(i, j int) bool { return resp.Runs[i].Name < resp.Runs[j].Name })
	return resp, nil
}

// runCountersLocked is run's RunCounters before its records are counted:
// its kind, expected total, failures and cancel mark, and its spec as the
// ledger reports it (store and data prefix, model, the default tenant and
// priority when the spec names none).
func (s *Server) runCountersLocked(run string) *rolloutv1.RunCounters {
	sp := s.specs[run]
	rc := &rolloutv1.RunCounters{Name: run, Kind: s.kinds[run], ExpectedTotal: sp.GetTotal(),
		Failures: s.failures[run], Cancelled: s.cancelled[run], Store: sp.GetStore(), Model: sp.GetModel(),
		Tenant: sp.GetTenant(), Priority: sp.GetPriority()}
	if rc.Store != "" {
		rc.DataPrefix = s.dataPrefixLocked(run)
	}
	if rc.Tenant == "" {
		rc.Tenant = DefaultTenant
	}
	if rc.Priority == 0 {
		rc.Priority = DefaultPriority
	}
	return rc
}

// DefaultTenant and DefaultPriority are what RunStatus reports for a run
// whose spec names no tenant or priority, as the ledger does.
const (
	DefaultTenant   = "default"
	DefaultPriority = 3
)

// CancelRun cancels a run as the ledger does: its Pending items (blocked
// ones too) become Cancelled, its Running items may still finish (a nack,
// a retried failure, a deregistration or an eviction cancels them), a
// Running range loses its unstarted tail (ranges.go), it takes no new
// items, and cancelling it again succeeds with nothing to do. The counts
// are in indexes. An unknown run is NOT_FOUND.
func (s *Server) CancelRun(_ context.Context, req *rolloutv1.CancelRunRequest) (*rolloutv1.CancelRunResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.notLeaderLocked(); err != nil {
		return nil, err
	}
	resp := &rolloutv1.CancelRunResponse{}
	recs := s.recordsLocked(req.GetRun())
	if len(recs) == 0 {
		return nil, status.Errorf(codes.NotFound, "run %q not found", req.GetRun())
	}
	for _, it := range recs {
		switch {
		case s.cancelled[it.Run]:
		case it.State == Running && it.isRange():
			resp.Cancelled += s.cancelTailLocked(it)
		case it.State == Pending:
			it.State = Cancelled
			resp.Cancelled += it.width()
		}
	}
	for _, it := range s.recordsLocked(req.GetRun()) {
		if it.State == Running {
			resp.Running += it.width()
		}
	}
	if !s.cancelled[req.GetRun()] {
		s.cancelled[req.GetRun()] = true
		delete(s.stalls, req.GetRun()) // a cancelled run's stall ends with it
		delete(s.storeSuspects, req.GetRun())
		s.recordLocked(&rolloutv1.Event{Kind: rolloutv1.EventKind_EVENT_KIND_RUN_CANCELLED, Run: req.GetRun(), Count: resp.GetCancelled()})
	}
	s.notifyLocked()
	resp.Header = s.headerLocked()
	return resp, nil
}
