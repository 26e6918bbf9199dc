// Package conformance holds the conformance scenario of the coordinator's
// gRPC contract (api/rollout/v1): one script of submit, claim, report
// (done, failed, permanent failure, nack), steal, dependencies, cancel,
// delete and the final counters and results, with the outcomes the real
// ledger (fsm behind server) gives. The real server and every fake run it
// (TestConformance in server, client/coordtest and client/runs/runstest),
// so a fake cannot drift from the ledger unnoticed: where they disagree,
// the ledger is the truth and the fake is fixed.
//
// A second run, RangeRun, is a range run (SubmitRanges; see ranges.go):
// its records are ranges of indexes that claims carve, progress reports
// shrink, failed indexes split into one-index records, steals and
// releases cut and a cancel cuts at their started mark, every counter in
// indexes.
//
// The scenario is written against rolloutv1.CoordinatorClient, the gRPC
// client of the contract, because that is the only interface every
// implementation shares: the real server and coordtest serve gRPC, and
// runstest (a plain Go value with some of the service's methods, no
// worker side) is put behind a gRPC server by its test. A fake that
// legitimately leaves a group of operations out declares it in Caps; the
// scenario then checks that those calls answer codes.Unimplemented and
// skips the steps that need them.
//
// It is a test-helper package (it imports testing): import it from tests
// only.
package conformance

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/store/storeurl"
)

// Caps is a set of the optional groups of operations of the contract an
// implementation serves (combine them with |). SubmitItems, RunStatus and
// Results are always required.
type Caps uint

// The optional groups.
const (
	// Worker is the worker protocol: Register, Heartbeat, Claim, Report
	// (every outcome but HELD) and Steal.
	Worker Caps = 1 << iota
	// Cancel is CancelRun.
	Cancel
	// Delete is DeleteRun.
	Delete
	// Ranges is the range ledger: SubmitRanges, and with Worker also
	// ReportRange, claims that carve ranges (max_indexes), heartbeats that
	// record a range's started mark and answer its bounds, and steals that
	// split a range's unstarted tail.
	Ranges
	// Tenants is SetTenant and ListTenants, a run's tenant and priority in
	// RunCounters, and a tenant's max_queued quota refusing a submit
	// (RESOURCE_EXHAUSTED).
	Tenants
)

// All is every optional group: what the real server serves.
const All = Worker | Cancel | Delete | Ranges | Tenants

// Has reports whether c includes every group of op.
func (c Caps) Has(op Caps) bool { return c&op == op }

func (c Caps) String() string {
	s := ""
	for _, g := range []struct {
		op   Caps
		name string
	}{{Worker, "worker"}, {Cancel, "cancel"}, {Delete, "delete"}, {Ranges, "ranges"}, {Tenants, "tenants"}} {
		if c.Has(g.op) {
			if s != "" {
				s += "+"
			}
			s += g.name
		}
	}
	if s == "" {
		return "none"
	}
	return s
}

// Run is the scenario's run name.
const Run = "conformance"

// PrefixRun is the run the scenario submits with another cluster's
// data_prefix: it is refused, so it never exists.
const PrefixRun = "conformance-prefix"

// MaxFailures is the run's RunSpec.max_failures.
const MaxFailures = 2

// The scenario's items, by index. C depends on A and G on F.
const (
	A = iota
	B
	C
	D
	E
	F
	G
	numItems
)

var names = [numItems]string{"a", "b", "c", "d", "e", "f", "g"}

// ID is the 32-byte id (validate.DefaultIDBytes) of item i.
func ID(i int) []byte { return []byte(fmt.Sprintf("%-32s", "conformance-"+names[i])) }

func payload(i int) []byte { return []byte(fmt.Sprintf(`{"prompt":"p-%s"}`, names[i])) }

func result(i int) []byte { return []byte(fmt.Sprintf(`{"completion":"r-%s"}`, names[i])) }

// Items is the scenario's submission: seven items, C depending on A and G
// on F.
func Items() []*rolloutv1.SubmitItem {
	out := make([]*rolloutv1.SubmitItem, numItems)
	for i := range out {
		out[i] = &rolloutv1.SubmitItem{Id: ID(i), Index: uint64(i), Payload: payload(i)}
	}
	out[C].DependsOn = [][]byte{ID(A)}
	out[G].DependsOn = [][]byte{ID(F)}
	return out
}

// want is the expected record of one item at the end.
type want struct {
	state   rolloutv1.ItemState
	attempt uint64
	owner   string
	result  []byte
	reason  string
}

// The scenario's workers.
const (
	W1 = "conformance-w1"
	W2 = "conformance-w2"
)

type scenario struct {
	t    *testing.T
	cl   rolloutv1.CoordinatorClient
	caps Caps
	// work2 is what the range run's work phase leaves for its cancel.
	work2 rangeWork
}

func (s *scenario) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 20*time.Second)
}

// Scenario runs the conformance scenario against cl, a client of a fresh
// coordinator (no run named Run, no workers), skipping the groups caps
// leaves out after checking that they answer codes.Unimplemented.
func Scenario(t *testing.T, cl rolloutv1.CoordinatorClient, caps Caps) {
	t.Helper()
	t.Logf("conformance scenario, optional operations served: %v", caps)
	s := &scenario{t: t, cl: cl, caps: caps}
	s.submit()
	if caps.Has(Worker) {
		s.work()
	} else {
		s.noWorker()
	}
	s.lifecycle()
	s.ranges()
	s.tenants()
}

// lifecycle is the item run's end: cancel, the results, delete (each
// checked Unimplemented where caps leaves it out, and the steps after it
// skipped).
func (s *scenario) lifecycle() {
	if !s.caps.Has(Cancel) {
		s.unimplemented("CancelRun", func(ctx context.Context) error {
			_, err := s.cl.CancelRun(ctx, &rolloutv1.CancelRunRequest{Run: Run})
			return err
		})
		return
	}
	s.cancel()
	s.results()
	if !s.caps.Has(Delete) {
		s.unimplemented("DeleteRun", func(ctx context.Context) error {
			_, err := s.cl.DeleteRun(ctx, &rolloutv1.DeleteRunRequest{Run: Run})
			return err
		})
		return
	}
	s.delete()
}

func (s *scenario) unimplemented(op string, call func(ctx context.Context) error) {
	s.t.Helper()
	ctx, cancel := s.ctx()
	defer cancel()
	err := call(ctx)
	require.Equal(s.t, codes.Unimplemented, status.Code(err), "%s of an implementation that leaves it out: %v", op, err)
}

// submit: creation, idempotent resubmission, the counters with blocked
// dependents, and an unknown run.
func (s *scenario) submit() {
	t := s.t
	ctx, cancel := s.ctx()
	defer cancel()
	spec := &rolloutv1.RunSpec{MaxFailures: MaxFailures, Total: numItems}
	resp, err := s.cl.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: Run, Spec: spec, Items: Items()})
	require.NoError(t, err, "submit")
	require.EqualValues(t, numItems, resp.GetCreated(), "submit: created")
	resp, err = s.cl.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: Run, Spec: spec, Items: Items()})
	require.NoError(t, err, "resubmit")
	require.Zero(t, resp.GetCreated(), "resubmit: created")
	require.EqualValues(t, numItems, resp.GetAlreadyPending(), "resubmit: already pending")

	if s.caps.Has(Ranges) {
		// A run is items or ranges, never both.
		_, err = s.cl.SubmitRanges(ctx, &rolloutv1.SubmitRangesRequest{Run: Run, Ranges: Chunks()})
		require.Equal(t, codes.InvalidArgument, status.Code(err), "submit of ranges to an item run: %v", err)
	}
	s.counters("after submit", &rolloutv1.RunCounters{Total: numItems, ExpectedTotal: numItems, Pending: numItems, Blocked: 2})

	// A run's store never changes, and a new run's data_prefix must be of
	// this cluster: both are refused and change nothing.
	_, err = s.cl.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: Run, Spec: &rolloutv1.RunSpec{Store: "file:///elsewhere"}, Items: Items()[:1]})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "resubmit naming another store: %v", err)
	s.counters("after a refused store change", &rolloutv1.RunCounters{Total: numItems, ExpectedTotal: numItems, Pending: numItems, Blocked: 2})
	const otherCluster = "0123456789abcdef0123456789abcdef"
	_, err = s.cl.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: PrefixRun, Items: Items()[:1],
		Spec: &rolloutv1.RunSpec{DataPrefix: storeurl.DataPrefix(otherCluster, PrefixRun, otherCluster)}})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "submit naming another cluster's data_prefix: %v", err)
	_, err = s.cl.RunStatus(ctx, &rolloutv1.RunStatusRequest{Run: PrefixRun})
	require.Equal(t, codes.NotFound, status.Code(err), "status of a run refused for its data_prefix: %v", err)

	_, err = s.cl.RunStatus(ctx, &rolloutv1.RunStatusRequest{Run: "no-such-run"})
	require.Equal(t, codes.NotFound, status.Code(err), "status of an unknown run: %v", err)
	_, err = s.cl.Results(ctx, &rolloutv1.ResultsRequest{Run: "no-such-run", Limit: 10})
	require.Equal(t, codes.NotFound, status.Code(err), "results of an unknown run: %v", err)
}

// counters checks the item run's counters that every implementation
// keeps.
func (s *scenario) counters(when string, w *rolloutv1.RunCounters) {
	s.t.Helper()
	s.countersOf(Run, when, w)
}

// countersOf checks run's counters that every implementation keeps (ranges:
// a range run's records; 0 for an item run).
func (s *scenario) countersOf(run, when string, w *rolloutv1.RunCounters) {
	t := s.t
	t.Helper()
	ctx, cancel := s.ctx()
	defer cancel()
	resp, err := s.cl.RunStatus(ctx, &rolloutv1.RunStatusRequest{Run: run})
	require.NoError(t, err, "status %s", when)
	require.Len(t, resp.GetRuns(), 1, "status %s", when)
	got := resp.GetRuns()[0]
	type counters struct {
		Name                                             string
		Total, Expected, Pending, Blocked, Running, Done uint64
		Dead, Failures, CancelledItems, Ranges           uint64
		Cancelled                                        bool
		Tenant                                           string
		Priority                                         uint32
	}
	// A spec naming no tenant or priority reports the defaults.
	tenant, priority := w.GetTenant(), w.GetPriority()
	if tenant == "" {
		tenant = "default"
	}
	if priority == 0 {
		priority = 3
	}
	require.Equal(t,
		counters{run, w.Total, w.ExpectedTotal, w.Pending, w.Blocked, w.Running, w.Done, w.Dead, w.Failures, w.CancelledItems, w.Ranges, w.Cancelled,
			tenant, priority},
		counters{got.GetName(), got.GetTotal(), got.GetExpectedTotal(), got.GetPending(), got.GetBlocked(), got.GetRunning(), got.GetDone(),
			got.GetDead(), got.GetFailures(), got.GetCancelledItems(), got.GetRanges(), got.GetCancelled(), got.GetTenant(), got.GetPriority()},
		"counters %s", when)
}

// noWorker checks that an implementation without the worker protocol
// answers its calls Unimplemented.
func (s *scenario) noWorker() {
	s.unimplemented("Register", func(ctx context.Context) error {
		_, err := s.cl.Register(ctx, &rolloutv1.RegisterRequest{WorkerId: W1})
		return err
	})
	s.unimplemented("Heartbeat", func(ctx context.Context) error {
		_, err := s.cl.Heartbeat(ctx, &rolloutv1.HeartbeatRequest{WorkerId: W1})
		return err
	})
	s.unimplemented("Claim", func(ctx context.Context) error {
		_, err := s.cl.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: W1, MaxItems: 1})
		return err
	})
	s.unimplemented("Report", func(ctx context.Context) error {
		_, err := s.cl.Report(ctx, &rolloutv1.ReportRequest{WorkerId: W1, Reports: []*rolloutv1.ItemReport{
			{Run: Run, Id: ID(A), Attempt: 1, Outcome: rolloutv1.Outcome_OUTCOME_NACK}}})
		return err
	})
	s.unimplemented("Steal", func(ctx context.Context) error {
		_, err := s.cl.Steal(ctx, &rolloutv1.StealRequest{WorkerId: W2})
		return err
	})
}

// claimed is an item as a claim or steal handed it out.
type claimed struct {
	index   uint64
	attempt uint64
}

func handed(items []*rolloutv1.Item) []claimed {
	out := make([]claimed, len(items))
	for i, it := range items {
		out[i] = claimed{it.GetIndex(), it.GetAttempt()}
	}
	return out
}

func (s *scenario) claim(worker string, max uint32, wait time.Duration) []*rolloutv1.Item {
	s.t.Helper()
	ctx, cancel := s.ctx()
	defer cancel()
	resp, err := s.cl.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: worker, MaxItems: max, WaitMs: uint32(wait.Milliseconds())})
	require.NoError(s.t, err, "claim by %s", worker)
	return resp.GetItems()
}

// report sends one report and returns its status.
func (s *scenario) report(worker string, r *rolloutv1.ItemReport) rolloutv1.ReportStatus {
	s.t.Helper()
	ctx, cancel := s.ctx()
	defer cancel()
	if r.Run == "" {
		r.Run = Run
	}
	resp, err := s.cl.Report(ctx, &rolloutv1.ReportRequest{WorkerId: worker, Reports: []*rolloutv1.ItemReport{r}})
	require.NoError(s.t, err, "report by %s", worker)
	require.Len(s.t, resp.GetResults(), 1)
	require.Equal(s.t, r.GetId(), resp.GetResults()[0].GetId(), "report result id")
	return resp.GetResults()[0].GetStatus()
}

func done(i int, attempt uint64, res []byte) *rolloutv1.ItemReport {
	return &rolloutv1.ItemReport{Id: ID(i), Attempt: attempt, Outcome: rolloutv1.Outcome_OUTCOME_DONE, Result: res}
}

func failed(i int, attempt uint64, reason string, permanent bool) *rolloutv1.ItemReport {
	return &rolloutv1.ItemReport{Id: ID(i), Attempt: attempt, Outcome: rolloutv1.Outcome_OUTCOME_FAILED, Reason: reason, Permanent: permanent}
}

func nack(i int, attempt uint64) *rolloutv1.ItemReport {
	return &rolloutv1.ItemReport{Id: ID(i), Attempt: attempt, Outcome: rolloutv1.Outcome_OUTCOME_NACK}
}

const (
	applied  = rolloutv1.ReportStatus_REPORT_STATUS_APPLIED
	casMiss  = rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS
	conflict = rolloutv1.ReportStatus_REPORT_STATUS_CONFLICT
	notFound = rolloutv1.ReportStatus_REPORT_STATUS_NOT_FOUND
)

// work is the worker protocol: registration, claims in queue order,
// dependencies, steal, every report outcome and the CAS rules.
func (s *scenario) work() {
	t := s.t
	ctx, cancel := s.ctx()
	defer cancel()

	// Registration comes first: an unregistered worker's claim is refused.
	_, err := s.cl.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: W1, MaxItems: 1})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "claim by an unregistered worker: %v", err)
	for _, w := range []string{W1, W2} {
		_, err := s.cl.Register(ctx, &rolloutv1.RegisterRequest{WorkerId: w})
		require.NoError(t, err, "register %s", w)
	}

	// W1 claims every claimable item, in submission order; C and G wait
	// on their dependencies.
	got := s.claim(W1, 10, time.Second)
	require.Equal(t, []claimed{{A, 1}, {B, 1}, {D, 1}, {E, 1}, {F, 1}}, handed(got), "first claim")
	for _, it := range got {
		require.Equal(t, Run, it.GetRun())
		require.Equal(t, ID(int(it.GetIndex())), it.GetId())
		require.Equal(t, payload(int(it.GetIndex())), it.GetPayload())
		require.Empty(t, it.GetDeps(), "item %d has no dependencies", it.GetIndex())
	}
	s.counters("after the first claim", &rolloutv1.RunCounters{Total: numItems, ExpectedTotal: numItems, Running: 5, Pending: 2, Blocked: 2})
	// Nothing else is claimable: a claim waits out its wait and answers none.
	require.Empty(t, s.claim(W2, 10, 50*time.Millisecond), "claim while only blocked items are pending")

	// Steal: only an idle thief may steal; it takes half of the busiest
	// worker's items (rounded up) from the end of its claim order, skipping
	// the ones it executes, each at the next attempt.
	_, err = s.cl.Steal(ctx, &rolloutv1.StealRequest{WorkerId: W2, Backlog: 1})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "steal with a backlog: %v", err)
	held := make([]*rolloutv1.ItemKey, 0, len(got))
	for _, it := range got {
		held = append(held, &rolloutv1.ItemKey{Run: Run, Id: it.GetId(), Attempt: it.GetAttempt()})
	}
	hb, err := s.cl.Heartbeat(ctx, &rolloutv1.HeartbeatRequest{WorkerId: W1, Backlog: 4, Held: held,
		Executing: []*rolloutv1.ItemKey{{Run: Run, Id: ID(F), Attempt: 1}}})
	require.NoError(t, err, "heartbeat")
	require.Empty(t, hb.GetLost(), "heartbeat before the steal: nothing lost")
	st, err := s.cl.Steal(ctx, &rolloutv1.StealRequest{WorkerId: W2})
	require.NoError(t, err, "steal")
	require.Equal(t, W1, st.GetVictim(), "steal victim")
	require.Equal(t, []claimed{{E, 2}, {D, 2}, {B, 2}}, handed(st.GetItems()), "stolen items")
	hb, err = s.cl.Heartbeat(ctx, &rolloutv1.HeartbeatRequest{WorkerId: W1, Held: held})
	require.NoError(t, err, "heartbeat")
	var lost []uint64
	for _, k := range hb.GetLost() {
		for i := range numItems {
			if string(k.GetId()) == string(ID(i)) {
				lost = append(lost, uint64(i))
			}
		}
	}
	require.Equal(t, []uint64{B, D, E}, lost, "heartbeat after the steal: the stolen items are lost, in held order")
	require.Equal(t, casMiss, s.report(W1, done(D, 1, result(D))), "the victim's report of a stolen item")
	// A nack puts D back to Pending, at the back of the queue.
	require.Equal(t, applied, s.report(W2, nack(D, 2)), "nack D")

	// Done, its idempotent retry, a conflicting result, another worker's
	// copy of the same result, and reports naming nothing.
	require.Equal(t, applied, s.report(W1, done(A, 1, result(A))), "done")
	require.Equal(t, applied, s.report(W1, done(A, 1, result(A))), "the same done again")
	require.Equal(t, conflict, s.report(W1, done(A, 1, []byte(`{"completion":"other"}`))), "done with another result")
	require.Equal(t, casMiss, s.report(W2, done(A, 1, result(A))), "the same result from a worker that does not own the item")
	require.Equal(t, notFound, s.report(W1, &rolloutv1.ItemReport{Run: "no-such-run", Id: ID(A), Attempt: 1,
		Outcome: rolloutv1.Outcome_OUTCOME_DONE, Result: result(A)}), "report naming an unknown run")
	require.Equal(t, notFound, s.report(W1, &rolloutv1.ItemReport{Id: []byte(fmt.Sprintf("%-32s", "no-such-item")), Attempt: 1,
		Outcome: rolloutv1.Outcome_OUTCOME_NACK}), "report naming an unknown item")

	// A is Done: C is claimable, with A's result as its dependency's; it
	// joined the queue when A was done, after D.
	require.Equal(t, []claimed{{D, 3}}, handed(s.claim(W1, 1, time.Second)), "claim after D was nacked and A is done")
	got = s.claim(W1, 10, time.Second)
	require.Equal(t, []claimed{{C, 1}}, handed(got), "claim after A is done")
	require.Len(t, got[0].GetDeps(), 1)
	require.Equal(t, ID(A), got[0].GetDeps()[0].GetId(), "C's dependency")
	require.Equal(t, result(A), got[0].GetDeps()[0].GetResult(), "C's dependency's result")

	// Failures: a failure re-pends C and counts; a nack re-pends it and
	// does not count; the MaxFailures-th failure makes it Dead with its
	// reason. Each claim is the next attempt.
	require.Equal(t, applied, s.report(W1, failed(C, 1, "first failure", false)), "fail C")
	s.counters("after C's first failure", &rolloutv1.RunCounters{Total: numItems, ExpectedTotal: numItems, Done: 1, Running: 4, Pending: 2, Blocked: 1, Failures: 1})
	require.Equal(t, []claimed{{C, 2}}, handed(s.claim(W1, 10, time.Second)), "claim after C failed")
	require.Equal(t, applied, s.report(W1, nack(C, 2)), "nack C")
	require.Equal(t, casMiss, s.report(W1, nack(C, 2)), "nack C again")
	require.Equal(t, []claimed{{C, 3}}, handed(s.claim(W1, 10, time.Second)), "claim after C was nacked: the nack did not count as a failure")
	require.Equal(t, applied, s.report(W1, failed(C, 3, "second failure", false)), "fail C again")
	require.Empty(t, s.claim(W1, 10, 50*time.Millisecond), "C is dead: nothing to claim")

	// A permanent failure is Dead at once.
	require.Equal(t, applied, s.report(W2, failed(B, 2, "permanent failure", true)), "permanent failure of B")
	require.Equal(t, applied, s.report(W1, nack(D, 3)), "nack D again")
	s.counters("before cancel", &rolloutv1.RunCounters{Total: numItems, ExpectedTotal: numItems, Done: 1, Dead: 2, Running: 2, Pending: 2, Blocked: 1, Failures: 3})
}

// cancel: a cancelled run's pending items are Cancelled at once, its
// running ones may still finish (a nack cancels them), it takes no new
// items and no claims, and a second cancel is a no-op that succeeds.
func (s *scenario) cancel() {
	t := s.t
	ctx, cancel := s.ctx()
	defer cancel()
	if s.caps.Has(Delete) {
		_, err := s.cl.DeleteRun(ctx, &rolloutv1.DeleteRunRequest{Run: Run})
		require.Equal(t, codes.FailedPrecondition, status.Code(err), "delete of an active run: %v", err)
	}
	_, err := s.cl.CancelRun(ctx, &rolloutv1.CancelRunRequest{Run: "no-such-run"})
	require.Equal(t, codes.NotFound, status.Code(err), "cancel of an unknown run: %v", err)

	wantCancelled, wantRunning := uint64(numItems), uint64(0)
	after := &rolloutv1.RunCounters{Total: numItems, ExpectedTotal: numItems, CancelledItems: numItems, Cancelled: true}
	if s.caps.Has(Worker) {
		wantCancelled, wantRunning = 2, 2 // D and G; E and F run on
		after = &rolloutv1.RunCounters{Total: numItems, ExpectedTotal: numItems, Done: 1, Dead: 2, Running: 2, Failures: 3,
			CancelledItems: 2, Cancelled: true}
	}
	resp, err := s.cl.CancelRun(ctx, &rolloutv1.CancelRunRequest{Run: Run})
	require.NoError(t, err, "cancel")
	require.Equal(t, [2]uint64{wantCancelled, wantRunning}, [2]uint64{resp.GetCancelled(), resp.GetRunning()}, "cancel: cancelled and running")
	s.counters("after cancel", after)
	resp, err = s.cl.CancelRun(ctx, &rolloutv1.CancelRunRequest{Run: Run})
	require.NoError(t, err, "cancel again")
	require.Equal(t, [2]uint64{0, wantRunning}, [2]uint64{resp.GetCancelled(), resp.GetRunning()}, "cancel again: cancelled and running")

	_, err = s.cl.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: Run, Items: Items()})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "submit to a cancelled run: %v", err)
	if !s.caps.Has(Worker) {
		return
	}
	require.Empty(t, s.claim(W2, 10, 50*time.Millisecond), "claim from a cancelled run")
	require.Equal(t, applied, s.report(W2, done(E, 2, result(E))), "done of a running item of a cancelled run")
	require.Equal(t, applied, s.report(W1, nack(F, 1)), "nack of a running item of a cancelled run")
	s.counters("after the cancelled run's last items", &rolloutv1.RunCounters{Total: numItems, ExpectedTotal: numItems, Done: 2, Dead: 2,
		Failures: 3, CancelledItems: 3, Cancelled: true})
}

// results pages through the run (three items a page) and checks every
// item's record.
func (s *scenario) results() {
	t := s.t
	ctx, cancel := s.ctx()
	defer cancel()
	cancelled := rolloutv1.ItemState_ITEM_STATE_CANCELLED
	var wants [numItems]want
	for i := range wants {
		wants[i] = want{state: cancelled}
	}
	if s.caps.Has(Worker) {
		dead, isDone := rolloutv1.ItemState_ITEM_STATE_DEAD, rolloutv1.ItemState_ITEM_STATE_DONE
		wants = [numItems]want{
			A: {state: isDone, attempt: 1, owner: W1, result: result(A)},
			B: {state: dead, attempt: 2, owner: W2, reason: "permanent failure"},
			C: {state: dead, attempt: 3, owner: W1, reason: "second failure"},
			D: {state: cancelled, attempt: 3},
			E: {state: isDone, attempt: 2, owner: W2, result: result(E)},
			F: {state: cancelled, attempt: 1},
			G: {state: cancelled},
		}
	}
	type page struct {
		indexes []uint64
		next    uint64
		done    bool
	}
	var pages []page
	var items []*rolloutv1.ResultItem
	from := uint64(0)
	for range numItems {
		resp, err := s.cl.Results(ctx, &rolloutv1.ResultsRequest{Run: Run, FromIndex: from, Limit: 3})
		require.NoError(t, err, "results from %d", from)
		p := page{next: resp.GetNextIndex(), done: resp.GetDone()}
		for _, it := range resp.GetItems() {
			p.indexes = append(p.indexes, it.GetIndex())
		}
		pages = append(pages, p)
		items = append(items, resp.GetItems()...)
		if resp.GetDone() {
			break
		}
		from = resp.GetNextIndex()
	}
	require.Equal(t, []page{{[]uint64{0, 1, 2}, 3, false}, {[]uint64{3, 4, 5}, 6, false}, {[]uint64{6}, 7, true}}, pages, "results pages")
	all, err := s.cl.Results(ctx, &rolloutv1.ResultsRequest{Run: Run})
	require.NoError(t, err, "results with no limit")
	require.Len(t, all.GetItems(), numItems, "results with no limit: the largest page")
	require.Equal(t, [2]any{uint64(numItems), true}, [2]any{all.GetNextIndex(), all.GetDone()}, "results with no limit: next index and done")
	sub := Items()
	for i, it := range items {
		require.Equal(t, sub[i].GetId(), it.GetId(), "item %d id", i)
		require.Equal(t, sub[i].GetPayload(), it.GetPayload(), "item %d payload", i)
		require.Equal(t, sub[i].GetDependsOn(), it.GetDependsOn(), "item %d depends_on", i)
		got := want{state: it.GetState(), attempt: it.GetAttempt(), owner: it.GetOwner(), result: it.GetResult(), reason: it.GetReason()}
		require.Equal(t, wants[i], got, "item %d (%s) in the results", i, names[i])
	}
}

// delete removes the cancelled run: it is unknown afterwards.
func (s *scenario) delete() {
	t := s.t
	ctx, cancel := s.ctx()
	defer cancel()
	resp, err := s.cl.DeleteRun(ctx, &rolloutv1.DeleteRunRequest{Run: Run})
	require.NoError(t, err, "delete")
	require.EqualValues(t, numItems, resp.GetItems(), "delete: items removed")
	_, err = s.cl.RunStatus(ctx, &rolloutv1.RunStatusRequest{Run: Run})
	require.Equal(t, codes.NotFound, status.Code(err), "status of a deleted run: %v", err)
	_, err = s.cl.Results(ctx, &rolloutv1.ResultsRequest{Run: Run, Limit: 10})
	require.Equal(t, codes.NotFound, status.Code(err), "results of a deleted run: %v", err)
}
