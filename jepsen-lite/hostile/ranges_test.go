package hostile_test

import (
	"context"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"math"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/jepsen-lite/history"
	"github.com/rollout/rollout/jepsen-lite/hostile"
	"github.com/rollout/rollout/raftnode"
	"github.com/rollout/rollout/server"
	"github.com/rollout/rollout/store"
)

// liveReplica is one real coordinator replica (Raft on bolt files, the
// ledger, the gRPC service behind the real Authz over mutual TLS), as
// rollout-coord wires it, with certificates for two workers, a worker that
// never registers, a client and an admin.
type liveReplica struct {
	addr   string
	tlsFor func(name string) (*tls.Config, error)
}

func startLiveReplica(t *testing.T) *liveReplica {
	t.Helper()
	dir := t.TempDir()
	var certs []mtls.Cert
	for _, c := range []string{"c1:replica", "w1:worker", "w2:worker", "ghost:worker", "cli:client", "admin:admin"} {
		cert, err := mtls.ParseCert(c)
		require.NoError(t, err)
		certs = append(certs, cert)
	}
	require.NoError(t, mtls.GenerateDevCAHosts(dir, certs, []string{"127.0.0.1"}, time.Hour))
	tlsFor := func(name string) (*tls.Config, error) { return mtls.FilesFor(dir, name).Load() }
	tlsConf, err := tlsFor("c1")
	require.NoError(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	ledger, err := fsm.New(fsm.DefaultConfig())
	require.NoError(t, err)
	rc := raftnode.DefaultConfig()
	rc.ID, rc.DataDir, rc.RaftAddr, rc.TLS = "c1", filepath.Join(dir, "data"), "127.0.0.1:0", tlsConf
	rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = 300*time.Millisecond, 300*time.Millisecond, 200*time.Millisecond
	rc.Logger = hclog.NewNullLogger()
	rc.EncodeBatch = fsm.EncodeEntry
	rc.EpochCommand = func(uint64) ([]byte, error) {
		return fsm.EpochCommand("c1", addr)
	}
	node, err := raftnode.New(rc, ledger)
	require.NoError(t, err)
	sc := server.DefaultConfig()
	sc.ReplicaID, sc.GRPCAddr, sc.Logger = "c1", addr, hclog.NewNullLogger()
	sc.FailureTimeout = time.Hour // no expiry re-pends a range during the test
	svc, err := server.New(sc, node, ledger)
	require.NoError(t, err)
	g := grpc.NewServer(append(append(server.NewAuthz(false).ServerOptions(), svc.GRPCOptions()...), grpc.Creds(credentials.NewTLS(tlsConf)))...)
	svc.RegisterOn(g)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(func() {
		g.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = node.Shutdown(ctx)
	})
	require.NoError(t, node.Bootstrap())
	require.Eventually(t, func() bool { _, ok := node.ServingTerm(); return ok }, 30*time.Second, 10*time.Millisecond, "no serving leader")
	return &liveReplica{addr: addr, tlsFor: tlsFor}
}

// as returns a raw gRPC client of the replica with name's certificate (no
// client-side checks, no retries).
func (r *liveReplica) as(t *testing.T, name string) rolloutv1.CoordinatorClient {
	t.Helper()
	conf, err := r.tlsFor(name)
	require.NoError(t, err)
	cc, err := grpc.NewClient("passthrough:///"+r.addr, grpc.WithTransportCredentials(credentials.NewTLS(conf)),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cc.Close() })
	return rolloutv1.NewCoordinatorClient(cc)
}

// rangeLedger is a range run "rr" on a live replica: chunks [0, 100) and
// [100, 200); w1 holds [10, 40) of the first (it claimed [0, 40) and
// reported [0, 10) done), the rest is Pending.
type rangeLedger struct {
	*liveReplica
	cli, w1, w2 rolloutv1.CoordinatorClient
	held        *rolloutv1.Item // w1's range, now [10, 40)
	doneSum     []byte          // the blake3 of [0, 10)'s result
}

func inputChunk(run, name string, index, count uint64) *rolloutv1.InputRange {
	sum := store.Hash([]byte(name))
	return &rolloutv1.InputRange{Index: index, Count: count,
		PayloadRef: &rolloutv1.DataRef{Object: store.InputPrefix(run) + hex.EncodeToString(sum[:]), Length: count * 16}}
}

func resultRef(run, name string) *rolloutv1.DataRef {
	sum := store.Hash([]byte(name))
	return &rolloutv1.DataRef{Object: store.ResultPrefix(run) + hex.EncodeToString(sum[:]), Length: 64, Blake3: sum[:]}
}

func newRangeLedger(t *testing.T) *rangeLedger {
	t.Helper()
	r := startLiveReplica(t)
	l := &rangeLedger{liveReplica: r, cli: r.as(t, "cli"), w1: r.as(t, "w1"), w2: r.as(t, "w2")}
	ctx := context.Background()
	_, err := l.cli.SubmitRanges(ctx, &rolloutv1.SubmitRangesRequest{Run: "rr", Spec: &rolloutv1.RunSpec{Store: "file:///srv/store", MaxFailures: 3},
		Ranges: []*rolloutv1.InputRange{inputChunk("rr", "a", 0, 100), inputChunk("rr", "b", 100, 100)}})
	require.NoError(t, err)
	_, err = l.w1.Register(ctx, &rolloutv1.RegisterRequest{WorkerId: "w1"})
	require.NoError(t, err)
	_, err = l.w2.Register(ctx, &rolloutv1.RegisterRequest{WorkerId: "w2"})
	require.NoError(t, err)
	claim, err := l.w1.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: "w1", MaxItems: 1, MaxIndexes: 40})
	require.NoError(t, err)
	require.Len(t, claim.GetItems(), 1)
	l.held = claim.GetItems()[0]
	require.EqualValues(t, 40, l.held.GetCount())
	ref := resultRef("rr", "done 0-10")
	l.doneSum = ref.GetBlake3()
	res := l.report(t, l.w1, "w1", &rolloutv1.RangeReport{Run: "rr", Id: l.held.GetId(), Attempt: l.held.GetAttempt(), Lo: 0, DoneTo: 10, ResultRef: ref})
	require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_APPLIED, res.GetStatus(), res.GetMessage())
	return l
}

// report sends one range report that the edge lets through and returns
// its result.
func (l *rangeLedger) report(t *testing.T, c rolloutv1.CoordinatorClient, worker string, rep *rolloutv1.RangeReport) *rolloutv1.RangeReportResult {
	t.Helper()
	resp, err := c.ReportRange(context.Background(), &rolloutv1.ReportRangeRequest{WorkerId: worker, Reports: []*rolloutv1.RangeReport{rep}})
	require.NoError(t, err)
	require.Len(t, resp.GetResults(), 1)
	return resp.GetResults()[0]
}

// state is everything the ledger says about the runs it holds: each run's
// counters and every record of run "rr" (bounds, state, owner, attempt,
// result), and the runs RunStatus lists.
func (l *rangeLedger) state(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	st, err := l.cli.RunStatus(ctx, &rolloutv1.RunStatusRequest{})
	require.NoError(t, err)
	for _, rc := range st.GetRuns() {
		fmt.Fprintf(&b, "run %s total %d pending %d running %d done %d dead %d failures %d cancelled %d\n", rc.GetName(), rc.GetTotal(),
			rc.GetPending(), rc.GetRunning(), rc.GetDone(), rc.GetDead(), rc.GetFailures(), rc.GetCancelledItems())
	}
	res, err := l.cli.Results(ctx, &rolloutv1.ResultsRequest{Run: "rr", Limit: 1000})
	require.NoError(t, err)
	for _, it := range res.GetItems() {
		fmt.Fprintf(&b, "[%d, +%d) base %d %s owner %q attempt %d result %s %x reason %q\n", it.GetIndex(), it.GetCount(), it.GetBase(), it.GetState(),
			it.GetOwner(), it.GetAttempt(), it.GetResultRef().GetObject(), it.GetResultRef().GetBlake3(), it.GetReason())
	}
	return b.String()
}

// TestRangeAttacksRealReplica runs the hostile nemesis' range attacks
// against a real replica over mutual TLS holding a range run some of
// which w1 holds: each gets the outcome that refuses it, with a message
// that names what was wrong, and the ledger is exactly as before.
func TestRangeAttacksRealReplica(t *testing.T) {
	l := newRangeLedger(t)
	before := l.state(t)
	path := filepath.Join(t.TempDir(), "hostile.jsonl")
	h, err := history.Create(path, "hostile")
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	n, err := hostile.New(hostile.Config{Seed: 5, Replicas: []hostile.Replica{{ID: "c1", GRPCAddr: l.addr, RaftAddr: "127.0.0.1:1"}},
		Workers: []string{"w1", "w2"}, Runs: []string{"rr"}, Ghost: "ghost", TLS: l.tlsFor, History: h, Window: 3 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = n.Close() })

	// What each attack's detail must say (the malformed ones in the order
	// their variants run).
	type want struct {
		attack hostile.Attack
		got    string
		says   string
	}
	wants := []want{
		{hostile.RangeSubmitMalformed, "InvalidArgument", "ranges[1] [5, 15) overlaps ranges[0] [0, 10)"},
		{hostile.RangeSubmitMalformed, "InvalidArgument", "ranges[1].count is 0"},
		{hostile.RangeSubmitMalformed, "InvalidArgument", "ranges[0]: index 18446744073709551614 + count 3 overflows"},
		{hostile.RangeSubmitMalformed, "InvalidArgument", "ranges[0].count is 4294967297"},
		{hostile.RangeSubmitMalformed, "InvalidArgument", `payload_ref object "secret/keys" is not under run "hostile-ranges-5"'s input prefix`},
		{hostile.RangeSubmitMalformed, "InvalidArgument", `-other/inputs/chunk" is not under run "hostile-ranges-6"'s input prefix "runs/hostile-ranges-6/inputs/"`},
		{hostile.RangeSubmitMalformed, "InvalidArgument", "spec.store is empty"},
		{hostile.RangeSubmitWorker, "PermissionDenied", "needs role client or admin"},
		{hostile.RangeReportOwner, "PermissionDenied", "may act only as itself"},
		{hostile.RangeReportClient, "PermissionDenied", "needs role worker"},
		{hostile.RangeReportCAS, "CAS_MISS", "not its owner or attempt"},
		{hostile.RangeReportMalformed, "InvalidArgument", "reports[0].done_to 100 is below reports[0].lo 110"},
		{hostile.RangeReportMalformed, "InvalidArgument", "reports[0].failed[0].index 110 is outside [lo, done_to)"},
		{hostile.RangeReportMalformed, "InvalidArgument", "reports[0].failed[1].index 104 does not follow failed[0].index 104"},
		{hostile.RangeReportMalformed, "InvalidArgument", "reports[0].release_from 100 is not above lo 100"},
		{hostile.RangeReportMalformed, "InvalidArgument", "reports[0].result_ref is missing"},
		{hostile.RangeReportManyFailed, "InvalidArgument", "reports[0].failed names 1048576 indexes, the limit is 4096"},
		{hostile.RangeReportGoneRun, "NOT_FOUND", "report_range names run \"hostile-gone-"},
	}
	for _, w := range wants {
		n.Attack(context.Background(), w.attack)
	}
	evs, err := history.ReadFile(path)
	require.NoError(t, err)
	require.Len(t, evs, len(wants))
	for i, w := range wants {
		e := evs[i]
		require.Equal(t, string(w.attack), e.Op)
		require.True(t, hostile.Expected(e.Expect, e.Got), "%s: expected %s, got %s (%s)", e.Op, e.Expect, e.Got, e.Detail)
		require.Equal(t, w.got, e.Got, "%s: %s", e.Op, e.Detail)
		require.Contains(t, e.Detail, w.says, e.Op)
		require.Empty(t, e.Changed, e.Op)
	}
	require.Equal(t, before, l.state(t), "the ledger is as it was")
}

// TestRangeLedgerAttacks sends, over mutual TLS to a real replica, the
// range calls only the ledger can judge (the edge lets them through): each
// is refused with the status that says why, naming what was wrong, and the
// ledger is exactly as before. Then the calls a hostile client may make
// that do change the ledger (a chunk naming an object nobody stored, claims
// of 0 and 2^64-1 indexes) keep its counters whole.
func TestRangeLedgerAttacks(t *testing.T) {
	l := newRangeLedger(t)
	ctx := context.Background()
	h := l.held
	before := l.state(t)
	for _, tc := range []struct {
		name   string
		worker string
		rep    *rolloutv1.RangeReport
		want   rolloutv1.ReportStatus
		says   string
	}{
		{"stale attempt", "w1", &rolloutv1.RangeReport{Run: "rr", Id: h.GetId(), Attempt: h.GetAttempt() + 1, Lo: 10, DoneTo: 20, ResultRef: resultRef("rr", "x")},
			rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS, "not its owner or attempt"},
		{"older attempt", "w1", &rolloutv1.RangeReport{Run: "rr", Id: h.GetId(), Attempt: h.GetAttempt() - 1, Lo: 10, DoneTo: 20, ResultRef: resultRef("rr", "x")},
			rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS, "not its owner or attempt"},
		{"not the owner", "w2", &rolloutv1.RangeReport{Run: "rr", Id: h.GetId(), Attempt: h.GetAttempt(), Lo: 10, DoneTo: 20, ResultRef: resultRef("rr", "x")},
			rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS, "not its owner or attempt"},
		{"progress past hi", "w1", &rolloutv1.RangeReport{Run: "rr", Id: h.GetId(), Attempt: h.GetAttempt(), Lo: 10, DoneTo: 41, ResultRef: resultRef("rr", "x")},
			rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS, "indexes from 40 are not its: the range ends there"},
		{"progress far past hi", "w1", &rolloutv1.RangeReport{Run: "rr", Id: h.GetId(), Attempt: h.GetAttempt(), Lo: 10, DoneTo: math.MaxUint64, ResultRef: resultRef("rr", "x")},
			rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS, "indexes from 40 are not its: the range ends there"},
		{"lo below the range", "w1", &rolloutv1.RangeReport{Run: "rr", Id: h.GetId(), Attempt: h.GetAttempt(), Lo: 5, DoneTo: 20, ResultRef: resultRef("rr", "x")},
			rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS, "lo is not the range's first index 10"},
		{"lo above the range start", "w1", &rolloutv1.RangeReport{Run: "rr", Id: h.GetId(), Attempt: h.GetAttempt(), Lo: 12, DoneTo: 20, ResultRef: resultRef("rr", "x")},
			rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS, "lo is not the range's first index 10"},
		{"done again with another result", "w1", &rolloutv1.RangeReport{Run: "rr", Id: h.GetId(), Attempt: h.GetAttempt(), Lo: 0, DoneTo: 10, ResultRef: resultRef("rr", "other")},
			rolloutv1.ReportStatus_REPORT_STATUS_CONFLICT, "with another result; the first result stands"},
		{"longer than the report applied, same result", "w1", &rolloutv1.RangeReport{Run: "rr", Id: h.GetId(), Attempt: h.GetAttempt(), Lo: 0, DoneTo: 30, ResultRef: resultRef("rr", "done 0-10")},
			rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS, "lo is not the range's first index 10"},
		{"another run's record id", "w1", &rolloutv1.RangeReport{Run: "rr", Id: []byte("R\xff\xff\xff\xff\xff\xff\xff\xff"), Attempt: 1, Lo: 10, DoneTo: 20, ResultRef: resultRef("rr", "x")},
			rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS, "holds no such range"},
		{"gone run", "w1", &rolloutv1.RangeReport{Run: "nope", Id: h.GetId(), Attempt: h.GetAttempt(), Lo: 10, DoneTo: 20, ResultRef: resultRef("nope", "x")},
			rolloutv1.ReportStatus_REPORT_STATUS_NOT_FOUND, "names run \"nope\""},
		{"result outside the run's prefix", "w1", &rolloutv1.RangeReport{Run: "rr", Id: h.GetId(), Attempt: h.GetAttempt(), Lo: 10, DoneTo: 20, ResultRef: resultRef("other", "x")},
			rolloutv1.ReportStatus_REPORT_STATUS_INVALID, "is not under the run's result prefix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := l.w1
			if tc.worker == "w2" {
				c = l.w2
			}
			res := l.report(t, c, tc.worker, tc.rep)
			require.Equal(t, tc.want, res.GetStatus(), res.GetMessage())
			require.Contains(t, res.GetMessage(), tc.says)
			require.Equal(t, before, l.state(t), "the ledger is as it was")
		})
	}
	// Calls the ledger refuses as a whole.
	for _, tc := range []struct {
		name string
		call func() error
		code codes.Code
		says string
	}{
		{"a chunk over the run's chunk", func() error {
			_, err := l.cli.SubmitRanges(ctx, &rolloutv1.SubmitRangesRequest{Run: "rr", Ranges: []*rolloutv1.InputRange{inputChunk("rr", "c", 50, 100)}})
			return err
		}, codes.InvalidArgument, "submit_ranges chunk at index 50 of object \"runs/rr/inputs/"},
		{"the same chunk, another count", func() error {
			_, err := l.cli.SubmitRanges(ctx, &rolloutv1.SubmitRangesRequest{Run: "rr", Ranges: []*rolloutv1.InputRange{inputChunk("rr", "a", 0, 50)}})
			return err
		}, codes.InvalidArgument, "count 50 differs from the chunk run \"rr\" holds"},
		{"another store", func() error {
			_, err := l.cli.SubmitRanges(ctx, &rolloutv1.SubmitRangesRequest{Run: "rr", Spec: &rolloutv1.RunSpec{Store: "file:///elsewhere"},
				Ranges: []*rolloutv1.InputRange{inputChunk("rr", "a", 0, 100)}})
			return err
		}, codes.InvalidArgument, "names store \"file:///elsewhere\" for run \"rr\""},
		{"a replica's certificate submitting", func() error {
			_, err := l.as(t, "c1").SubmitRanges(ctx, &rolloutv1.SubmitRangesRequest{Run: "rr", Ranges: []*rolloutv1.InputRange{inputChunk("rr", "c", 300, 10)}})
			return err
		}, codes.PermissionDenied, "needs role client or admin"},
		{"a worker's certificate submitting", func() error {
			_, err := l.w1.SubmitRanges(ctx, &rolloutv1.SubmitRangesRequest{Run: "rr", Ranges: []*rolloutv1.InputRange{inputChunk("rr", "c", 300, 10)}})
			return err
		}, codes.PermissionDenied, "needs role client or admin"},
		{"w2 claiming as w1", func() error {
			_, err := l.w2.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: "w1", MaxItems: 1, MaxIndexes: 1})
			return err
		}, codes.PermissionDenied, "may act only as itself"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			require.Equal(t, tc.code, status.Code(err), "%v", err)
			require.Contains(t, status.Convert(err).Message(), tc.says)
			require.Equal(t, before, l.state(t), "the ledger is as it was")
		})
	}

	// A range reported as an item (Report's Complete) is INVALID, naming
	// the RPC to use.
	resp, err := l.w1.Report(ctx, &rolloutv1.ReportRequest{WorkerId: "w1", Reports: []*rolloutv1.ItemReport{{Run: "rr", Id: h.GetId(),
		Attempt: h.GetAttempt(), Outcome: rolloutv1.Outcome_OUTCOME_DONE, ResultRef: resultRef("rr", "y")}}})
	require.NoError(t, err)
	require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_INVALID, resp.GetResults()[0].GetStatus())
	require.Contains(t, resp.GetResults()[0].GetMessage(), "a range of 30 indexes: report it with ReportRange")
	require.Equal(t, before, l.state(t), "the ledger is as it was")

	// Calls that change the ledger, within its rules.
	whole := func() {
		t.Helper()
		st, err := l.cli.RunStatus(ctx, &rolloutv1.RunStatusRequest{Run: "rr"})
		require.NoError(t, err)
		rc := st.GetRuns()[0]
		require.Equal(t, rc.GetTotal(), rc.GetPending()+rc.GetRunning()+rc.GetDone()+rc.GetDead()+rc.GetCancelledItems(), "every index counted once: %v", rc)
	}
	// A chunk naming an object nobody stored (or of another length) is
	// accepted: a replica never reads the store. The worker that claims it
	// holds it (the run stalls on the object), see worker's
	// TestRangeChunkDamaged.
	sr, err := l.cli.SubmitRanges(ctx, &rolloutv1.SubmitRangesRequest{Run: "rr", Ranges: []*rolloutv1.InputRange{inputChunk("rr", "never stored", 200, 10)}})
	require.NoError(t, err)
	require.EqualValues(t, 10, sr.GetCreated())
	whole()
	// max_indexes 0 claims by max_items; 2^64-1 takes whole records and
	// overflows nothing.
	c0, err := l.w2.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: "w2", MaxItems: 1, MaxIndexes: 0})
	require.NoError(t, err)
	require.Len(t, c0.GetItems(), 1)
	require.EqualValues(t, 1, c0.GetItems()[0].GetCount(), "max_indexes 0: at most max_items indexes")
	whole()
	big, err := l.w2.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: "w2", MaxItems: 100, MaxIndexes: math.MaxUint64})
	require.NoError(t, err)
	var claimed uint64
	for _, it := range big.GetItems() {
		claimed += it.GetCount()
	}
	require.EqualValues(t, 210-40-1, claimed, "everything Pending, once")
	whole()

	// A run cancelled, then deleted: a late report of w1's range misses
	// or finds no run.
	_, err = l.cli.CancelRun(ctx, &rolloutv1.CancelRunRequest{Run: "rr"})
	require.NoError(t, err)
	whole()
	res := l.report(t, l.w1, "w1", &rolloutv1.RangeReport{Run: "rr", Id: h.GetId(), Attempt: h.GetAttempt(), Lo: 10, DoneTo: 20, ResultRef: resultRef("rr", "late")})
	require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS, res.GetStatus(), "a cancelled range takes no progress: %s", res.GetMessage())
	require.Contains(t, res.GetMessage(), "the record is cancelled")
	whole()
	cancelled := l.state(t)
	_, err = l.cli.DeleteRun(ctx, &rolloutv1.DeleteRunRequest{Run: "rr"})
	require.NoError(t, err, "after: %s", cancelled)
	res = l.report(t, l.w1, "w1", &rolloutv1.RangeReport{Run: "rr", Id: h.GetId(), Attempt: h.GetAttempt(), Lo: 10, DoneTo: 20, ResultRef: resultRef("rr", "later")})
	require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_NOT_FOUND, res.GetStatus(), res.GetMessage())
	require.Contains(t, res.GetMessage(), "names run \"rr\"")
	st, err := l.cli.RunStatus(ctx, &rolloutv1.RunStatusRequest{})
	require.NoError(t, err)
	require.Empty(t, st.GetRuns(), "the late report created nothing")
}
