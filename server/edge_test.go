package server

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/api/validate"
	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/internal/limits"
	"github.com/rollout/rollout/raftnode"
)

// rawClient dials one replica straight over gRPC: no retries, no leader
// following, and a send limit above any server's so that oversized
// requests reach the server (a hostile client's view).
func rawClient(t *testing.T, addr string) rolloutv1.CoordinatorClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20), grpc.MaxCallRecvMsgSize(64<<20)))
	require.NoError(t, err)
	t.Cleanup(func() { cc.Close() })
	return rolloutv1.NewCoordinatorClient(cc)
}

// jsonPayload is a valid payload of exactly n bytes (n >= 16).
func jsonPayload(n int) []byte {
	return []byte(`{"prompt":"` + strings.Repeat("x", n-13) + `"}`)
}

// ledgerView is what a run looks like through the API: its counters and
// every item.
func ledgerView(t *testing.T, cl rolloutv1.CoordinatorClient, run string) (*rolloutv1.RunCounters, []*rolloutv1.ResultItem) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := cl.RunStatus(ctx, &rolloutv1.RunStatusRequest{Run: run})
	require.NoError(t, err)
	res, err := cl.Results(ctx, &rolloutv1.ResultsRequest{Run: run})
	require.NoError(t, err)
	require.True(t, res.GetDone())
	return st.GetRuns()[0], res.GetItems()
}

func requireNoRun(t *testing.T, cl rolloutv1.CoordinatorClient, run string) {
	t.Helper()
	_, err := cl.RunStatus(context.Background(), &rolloutv1.RunStatusRequest{Run: run})
	require.Equal(t, codes.NotFound, status.Code(err), "run %q must not exist: %v", run, err)
}

// TestHostileItemsRefusedAtEdge sends hostile SubmitItems straight over gRPC
// into an existing run: each is INVALID_ARGUMENT naming the item and the
// rule, nothing is proposed (the Raft log does not grow), the run is
// unchanged and every item of it still renders.
func TestHostileItemsRefusedAtEdge(t *testing.T) {
	c := newTestCluster(t, 1, clusterOpts{})
	c.submit("r", 3)
	l, _ := c.waitLeader()
	cl := rawClient(t, l.grpcAddr)
	beforeRun, beforeItems := ledgerView(t, cl, "r")
	lastIndex := l.node.Stats().LastLogIndex
	lim := validate.DefaultLimits()
	good := func(i int) *rolloutv1.SubmitItem {
		return &rolloutv1.SubmitItem{Id: testID(fmt.Sprintf("new-%d", i)), Index: uint64(10 + i), Payload: []byte(`{"prompt":"n"}`)}
	}
	for _, tc := range []struct {
		name string
		run  string
		item *rolloutv1.SubmitItem // placed at items[2] after two good items
		want string
	}{
		{"3-byte id", "r", &rolloutv1.SubmitItem{Id: []byte("abc"), Index: 20, Payload: []byte(`{"prompt":"p"}`)}, `items[2] (index 20, id "616263"): invalid item id: id is 3 bytes, must be exactly 32`},
		{"empty id", "r", &rolloutv1.SubmitItem{Index: 20, Payload: []byte(`{"prompt":"p"}`)}, "id is 0 bytes"},
		{"non-JSON payload", "r", &rolloutv1.SubmitItem{Id: testID("x"), Index: 20, Payload: []byte("hello")}, "items[2] (index 20, id \"78" /* hex of "x" */},
		{"JSON array payload", "r", &rolloutv1.SubmitItem{Id: testID("x"), Index: 20, Payload: []byte(`[1]`)}, "payload is not a JSON object"},
		{"invalid UTF-8 payload", "r", &rolloutv1.SubmitItem{Id: testID("x"), Index: 20, Payload: []byte("{\"p\":\"\xff\"}")}, "not valid UTF-8"},
		{"duplicate key", "r", &rolloutv1.SubmitItem{Id: testID("x"), Index: 20, Payload: []byte(`{"p":1,"p":2}`)}, "twice"},
		{"dead item with a raw line", "r", &rolloutv1.SubmitItem{Id: testID("x"), Index: 20, Payload: []byte("{oops"), DeadReason: "f:1: bad"}, "invalid payload"},
		{"payload over the per-item limit", "r", &rolloutv1.SubmitItem{Id: testID("x"), Index: 20, Payload: jsonPayload(lim.MaxPayloadBytes + 1)}, "exceeds the per-item limit of 1048576 bytes"},
		{"duplicate id", "r", &rolloutv1.SubmitItem{Id: testID("new-0"), Index: 20, Payload: []byte(`{}`)}, "same id as items[0]"},
		{"run name with a newline", "new\nrun", good(2), "invalid run name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &rolloutv1.SubmitItemsRequest{Run: tc.run, Items: []*rolloutv1.SubmitItem{good(0), good(1), tc.item}}
			_, err := cl.SubmitItems(context.Background(), req)
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
			require.Contains(t, status.Convert(err).Message(), tc.want)
			require.Contains(t, status.Convert(err).Message(), "nothing was changed")
		})
	}
	// Too many items in one request.
	many := &rolloutv1.SubmitItemsRequest{Run: "r"}
	for i := range lim.MaxItemsPerRequest + 1 {
		many.Items = append(many.Items, &rolloutv1.SubmitItem{Id: testID(fmt.Sprintf("m%d", i)), Index: uint64(100 + i), Payload: []byte(`{}`)})
	}
	_, err := cl.SubmitItems(context.Background(), many)
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	require.ErrorContains(t, err, "too many items")

	require.Equal(t, lastIndex, l.node.Stats().LastLogIndex, "a refused request proposes nothing")
	afterRun, afterItems := ledgerView(t, cl, "r")
	require.True(t, proto.Equal(beforeRun, afterRun), "run counters changed: %v -> %v", beforeRun, afterRun)
	require.Len(t, afterItems, len(beforeItems))
	for i := range afterItems {
		require.True(t, proto.Equal(beforeItems[i], afterItems[i]))
	}
	requireNoRun(t, cl, "new\nrun")
	// Every item of the run still renders.
	for _, it := range afterItems {
		fi := batch.FinishedItem{Index: it.GetIndex(), ID: it.GetId(), Payload: it.GetPayload(), Reason: "r"}
		copy(fi.SampleID[:], it.GetId())
		_, _, err := batch.OutputLine(fi)
		require.NoError(t, err)
	}
}

// TestEmptySubmitRefused: a SubmitItems with no items is INVALID_ARGUMENT and
// creates no run (it used to create a run stuck "running").
func TestEmptySubmitRefused(t *testing.T) {
	c := newTestCluster(t, 1, clusterOpts{})
	l, _ := c.waitLeader()
	cl := rawClient(t, l.grpcAddr)
	_, err := cl.SubmitItems(context.Background(), &rolloutv1.SubmitItemsRequest{Run: "empty", Spec: &rolloutv1.RunSpec{Total: 5}})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	require.ErrorContains(t, err, "no items")
	requireNoRun(t, cl, "empty")
	// Through the client library too: refused at once, not retried.
	_, err = c.client().SubmitItems(context.Background(), &rolloutv1.SubmitItemsRequest{Run: "empty"})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	requireNoRun(t, cl, "empty")
}

// TestOversizedRequestIsInvalidArgument: with the default limits, a request
// over max_request_bytes (under the message limit) is INVALID_ARGUMENT, one
// over the message limit RESOURCE_EXHAUSTED; neither creates anything, and
// the client library returns them at once instead of retrying.
func TestOversizedRequestIsInvalidArgument(t *testing.T) {
	c := newTestCluster(t, 1, clusterOpts{})
	l, _ := c.waitLeader()
	cl := rawClient(t, l.grpcAddr)
	lim := validate.DefaultLimits()
	request := func(run string, items, size int) *rolloutv1.SubmitItemsRequest {
		req := &rolloutv1.SubmitItemsRequest{Run: run}
		for i := range items {
			req.Items = append(req.Items, &rolloutv1.SubmitItem{Id: testID(fmt.Sprintf("%d", i)), Index: uint64(i), Payload: jsonPayload(size)})
		}
		return req
	}
	// 5 items of just under 1 MiB: every item fits, the request does not.
	overRequest := request("big", 5, lim.MaxPayloadBytes-64)
	require.Greater(t, proto.Size(overRequest), lim.MaxRequestBytes)
	require.Less(t, proto.Size(overRequest), lim.MaxMessageBytes)
	_, err := cl.SubmitItems(context.Background(), overRequest)
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	require.ErrorContains(t, err, "exceeds the per-request limit of 4194304 bytes")

	overMessage := request("huge", 9, lim.MaxPayloadBytes-64)
	require.Greater(t, proto.Size(overMessage), lim.MaxMessageBytes)
	_, err = cl.SubmitItems(context.Background(), overMessage)
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)

	start := time.Now()
	_, err = c.client().SubmitItems(context.Background(), overRequest)
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	require.Less(t, time.Since(start), 5*time.Second, "not retried")
	requireNoRun(t, cl, "big")
	requireNoRun(t, cl, "huge")

	// The largest request that passes is proposed and applied.
	fits := request("fits", 3, lim.MaxPayloadBytes)
	require.LessOrEqual(t, proto.Size(fits), lim.MaxRequestBytes)
	resp, err := cl.SubmitItems(context.Background(), fits)
	require.NoError(t, err)
	require.EqualValues(t, 3, resp.GetCreated())
}

// TestCommandTooLargeForProposerIsInvalidArgument: a request the edge
// accepts but whose ledger command the proposer refuses as too large is
// INVALID_ARGUMENT (it used to be UNAVAILABLE, which clients retry
// forever), and nothing is written.
func TestCommandTooLargeForProposerIsInvalidArgument(t *testing.T) {
	c := newTestCluster(t, 1, clusterOpts{raft: func(_ string, rc *raftnode.Config) { rc.MaxBatchBytes = 64 << 10 }})
	l, term := c.waitLeader()
	cl := rawClient(t, l.grpcAddr)
	req := &rolloutv1.SubmitItemsRequest{Run: "r", Items: []*rolloutv1.SubmitItem{{Id: testID("a"), Payload: jsonPayload(100 << 10)}}}
	_, err := cl.SubmitItems(context.Background(), req)
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	require.ErrorContains(t, err, "MaxBatchBytes")
	requireNoRun(t, cl, "r")
	l2, term2 := c.waitLeader()
	require.Equal(t, l.id, l2.id)
	require.Equal(t, term, term2)
}

// TestLimitsAgreeWithLedgerAndProposer: the limits are stated once and
// agree: the edge's payload and result limits are the ledger's, and the
// ledger command of the largest request the edge accepts fits the
// proposer's command limit (so no valid request is ever refused for its
// size after the edge, and none is left half-done).
func TestLimitsAgreeWithLedgerAndProposer(t *testing.T) {
	lim := validate.DefaultLimits()
	ledger := fsm.DefaultConfig()
	require.Equal(t, ledger.MaxPayloadBytes, lim.MaxPayloadBytes)
	require.LessOrEqual(t, lim.MaxResultBytes, ledger.MaxPayloadBytes)
	proposer := raftnode.DefaultConfig().MaxBatchBytes

	// Many small items with the largest clean dead reasons that fit.
	many := &rolloutv1.SubmitItemsRequest{Run: strings.Repeat("r", lim.MaxRunNameBytes), StaleAfterMs: 1 << 40,
		Spec: &rolloutv1.RunSpec{Model: strings.Repeat("m", limits.MaxModelBytes), Sampling: []byte(`{}`), Total: 1 << 60, MaxFailures: 1 << 30}}
	reason := strings.Repeat("é", (lim.MaxRequestBytes/lim.MaxItemsPerRequest-80)/2)
	for i := range lim.MaxItemsPerRequest {
		many.Items = append(many.Items, &rolloutv1.SubmitItem{Id: testID(fmt.Sprint(i)), Index: 1<<63 + uint64(i), Payload: []byte(`{}`), DeadReason: reason})
	}
	// A few items of the largest payload, with the largest sampling.
	big := &rolloutv1.SubmitItemsRequest{Run: "r", Spec: &rolloutv1.RunSpec{Sampling: jsonPayload(lim.MaxPayloadBytes)}}
	for i := range 2 {
		big.Items = append(big.Items, &rolloutv1.SubmitItem{Id: testID(fmt.Sprint(i)), Index: uint64(i), Payload: jsonPayload(lim.MaxPayloadBytes - 64)})
	}
	big.Items = append(big.Items, &rolloutv1.SubmitItem{Id: testID("last"), Index: 2, Payload: jsonPayload(lim.MaxRequestBytes - proto.Size(big) - 100)})
	for _, req := range []*rolloutv1.SubmitItemsRequest{many, big} {
		require.NoError(t, lim.CheckRequest(req))
		require.Greater(t, proto.Size(req), lim.MaxRequestBytes*9/10, "the case is near the request limit")
		data, err := fsm.EncodeCommand(submitCommand(req))
		require.NoError(t, err)
		require.LessOrEqual(t, len(data), proposer, "a %d-byte request becomes a %d-byte command", proto.Size(req), len(data))
	}
}

// TestClusterAnnouncesLimits: Cluster carries the limits the replica
// enforces.
func TestClusterAnnouncesLimits(t *testing.T) {
	lim := validate.DefaultLimits()
	lim.MaxItemsPerRequest = 7
	c := newTestCluster(t, 1, clusterOpts{server: func(sc *Config) { sc.Limits = lim }})
	l, _ := c.waitLeader()
	resp, err := rawClient(t, l.grpcAddr).Cluster(context.Background(), &rolloutv1.ClusterRequest{})
	require.NoError(t, err)
	got, err := validate.FromProto(resp.GetLimits())
	require.NoError(t, err)
	require.Equal(t, lim, got)
}

// TestConcurrentHugeRequestsBounded sends 16 SubmitItems at once to the
// leader of a 3-replica cluster, near and over its (small) limits: valid
// ones near max_request_bytes, small ones, ones over max_request_bytes and
// ones over the message limit. Each answer is success or a clear refusal
// (RESOURCE_EXHAUSTED for the message limit or a full in-flight budget,
// INVALID_ARGUMENT for the request limit); the bytes admitted never exceed
// the budget; the leader keeps its leadership (same leader, same term); and
// exactly the runs of the accepted requests exist, whole.
func TestConcurrentHugeRequestsBounded(t *testing.T) {
	lim := validate.Limits{MaxMessageBytes: 1 << 20, MaxRequestBytes: 640 << 10, MaxItemsPerRequest: 100,
		MaxPayloadBytes: 256 << 10, MaxResultBytes: 256 << 10, MaxRunNameBytes: 128, IDBytes: 32}
	require.NoError(t, lim.Validate())
	const budget = 2 << 20
	c := newTestCluster(t, 3, clusterOpts{server: func(sc *Config) {
		sc.Limits, sc.InflightBytes, sc.AdmitWait = lim, budget, 200*time.Millisecond
	}})
	l, term := c.waitLeader()
	cl := rawClient(t, l.grpcAddr)

	type kind int
	const (
		nearLimit kind = iota
		small
		overRequest
		overMessage
	)
	const n = 16
	reqs := make([]*rolloutv1.SubmitItemsRequest, n)
	kinds := make([]kind, n)
	for i := range n {
		kinds[i] = kind(i % 4)
		shape := map[kind]struct{ items, size int }{
			nearLimit: {3, 200 << 10}, small: {2, 100}, overRequest: {4, 225 << 10}, overMessage: {6, 250 << 10},
		}[kinds[i]]
		req := &rolloutv1.SubmitItemsRequest{Run: fmt.Sprintf("h%02d", i)}
		for j := range shape.items {
			req.Items = append(req.Items, &rolloutv1.SubmitItem{Id: testID(fmt.Sprintf("%d-%d", i, j)), Index: uint64(j), Payload: jsonPayload(shape.size)})
		}
		reqs[i] = req
	}
	require.LessOrEqual(t, proto.Size(reqs[0]), lim.MaxRequestBytes)
	require.Greater(t, proto.Size(reqs[2]), lim.MaxRequestBytes)
	require.Less(t, proto.Size(reqs[2]), lim.MaxMessageBytes)
	require.Greater(t, proto.Size(reqs[3]), lim.MaxMessageBytes)

	// Watch the admitted bytes while the requests run.
	stop := make(chan struct{})
	var peak int64
	var watch sync.WaitGroup
	watch.Add(1)
	go func() {
		defer watch.Done()
		for {
			peak = max(peak, l.srv.adm.inFlight())
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, errs[i] = cl.SubmitItems(ctx, reqs[i])
		}()
	}
	close(start)
	wg.Wait()
	close(stop)
	watch.Wait()
	require.LessOrEqual(t, peak, int64(budget), "admitted request bytes stay within the budget")

	accepted := 0
	for i, err := range errs {
		code := status.Code(err)
		switch kinds[i] {
		case nearLimit:
			require.Contains(t, []codes.Code{codes.OK, codes.ResourceExhausted}, code, "request %d: %v", i, err)
		case small:
			require.Equal(t, codes.OK, code, "request %d: a small request waits for room: %v", i, err)
		case overRequest:
			require.Contains(t, []codes.Code{codes.InvalidArgument, codes.ResourceExhausted}, code, "request %d: %v", i, err)
		case overMessage:
			require.Equal(t, codes.ResourceExhausted, code, "request %d: %v", i, err)
		}
		if code == codes.ResourceExhausted && kinds[i] != overMessage {
			require.Contains(t, status.Convert(err).Message(), "coordinator busy", "request %d", i)
		}
		if err == nil {
			accepted++
			rc, items := ledgerView(t, cl, reqs[i].GetRun())
			require.EqualValues(t, len(reqs[i].GetItems()), rc.GetTotal())
			for j, it := range items {
				require.True(t, bytes.Equal(reqs[i].GetItems()[j].GetPayload(), it.GetPayload()))
			}
		} else {
			requireNoRun(t, cl, reqs[i].GetRun())
		}
	}
	require.GreaterOrEqual(t, accepted, 4, "at least the small requests are accepted")
	l2, term2 := c.waitLeader()
	require.Equal(t, l.id, l2.id, "the leader keeps its leadership")
	require.Equal(t, term, term2)
}

// TestAdmissionBudget pins the admission rules: what fits is admitted at
// once; a large request waits at most AdmitWait, then is refused as busy;
// large waiters beyond the budget are refused at once; a small request
// waits until its deadline; released bytes wake waiters.
func TestAdmissionBudget(t *testing.T) {
	const mib = 1 << 20
	a := newAdmission(mib, 50*time.Millisecond)
	ctx := context.Background()
	require.NoError(t, a.acquire(ctx, 700<<10))

	err := a.acquire(ctx, 500<<10)
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	require.ErrorContains(t, err, "coordinator busy")

	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = a.acquire(sctx, 400<<10) // 700 + 400 > 1024: waits AdmitWait
	cancel()
	require.Equal(t, codes.ResourceExhausted, status.Code(err))

	tctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	err = a.acquire(tctx, 400<<10) // the caller gives up first
	cancel()
	require.Equal(t, codes.DeadlineExceeded, status.Code(err))

	// Two large waiters whose bytes exceed the budget: the second is
	// refused at once.
	a.wait = 5 * time.Second
	done := make(chan error, 1)
	go func() { done <- a.acquire(ctx, 900<<10) }()
	require.Eventually(t, func() bool { a.mu.Lock(); defer a.mu.Unlock(); return a.waiting > 0 }, 5*time.Second, time.Millisecond)
	begin := time.Now()
	err = a.acquire(ctx, 400<<10)
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	require.Less(t, time.Since(begin), a.wait/2, "refused without waiting (the wait is 5 s)")
	a.release(700 << 10)
	require.NoError(t, <-done, "released bytes admit the waiter")
	require.EqualValues(t, 900<<10, a.inFlight())

	// A small request waits until its deadline.
	require.NoError(t, a.acquire(ctx, 120<<10)) // 1020 KiB in flight
	dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	err = a.acquire(dctx, 5<<10)
	cancel()
	require.Equal(t, codes.DeadlineExceeded, status.Code(err))
	go func() { done <- a.acquire(ctx, 5<<10) }()
	a.release(900 << 10)
	require.NoError(t, <-done)
	require.EqualValues(t, 125<<10, a.inFlight())
}
