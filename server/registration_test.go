package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/worker"
	"github.com/rollout/rollout/worker/mock"
)

// registerWorkers registers each worker id through the API.
func registerWorkers(t testing.TB, cl *coordclient.Client, ids ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, id := range ids {
		_, err := cl.Register(ctx, &rolloutv1.RegisterRequest{WorkerId: id})
		require.NoError(t, err, "register %s", id)
	}
}

// requireNotRegistered checks the refusal an unregistered worker gets.
func requireNotRegistered(t *testing.T, err error, what string) {
	t.Helper()
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%s: %v", what, err)
	require.ErrorIs(t, err, coordclient.ErrNotRegistered, what)
	require.True(t, rolloutv1.IsNotRegistered(err), what)
	require.Contains(t, err.Error(), "Register", what)
}

// workerIDs lists the workers a RunStatus reply shows.
func workerIDs(t *testing.T, cl *coordclient.Client) map[string]*rolloutv1.WorkerStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cl.RunStatus(ctx, &rolloutv1.RunStatusRequest{})
	require.NoError(t, err)
	out := map[string]*rolloutv1.WorkerStatus{}
	for _, w := range resp.GetWorkers() {
		out[w.GetId()] = w
	}
	return out
}

// TestUnknownWorkerIsNotRegistered: Claim, Steal and Heartbeat from ids
// that never registered, over gRPC against a real three-replica cluster,
// are FailedPrecondition telling the worker to Register; they create no
// worker record (status lists none) and claim nothing. After Register the
// same calls work.
func TestUnknownWorkerIsNotRegistered(t *testing.T) {
	const run = "unknown"
	c := newTestCluster(t, 3, clusterOpts{})
	c.submit(run, 4)
	cl := c.client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	for i := range 10 {
		id := fmt.Sprintf("ghost-%d", i)
		_, err := cl.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: id, MaxItems: 4, WaitMs: 100})
		requireNotRegistered(t, err, "claim "+id)
		_, err = cl.Steal(ctx, &rolloutv1.StealRequest{WorkerId: id})
		requireNotRegistered(t, err, "steal "+id)
		_, err = cl.Heartbeat(ctx, &rolloutv1.HeartbeatRequest{WorkerId: id, Backlog: 1,
			Held: []*rolloutv1.ItemKey{{Run: run, Id: []byte(run + "-00000"), Attempt: 1}}})
		requireNotRegistered(t, err, "heartbeat "+id)
	}
	require.Empty(t, workerIDs(t, cl), "status lists no worker")
	for _, r := range c.replicas() {
		require.Empty(t, r.ledger.Workers(), "replica %s holds a worker record", r.id)
	}
	rc, err := c.runStatus(run)
	require.NoError(t, err)
	require.Equal(t, uint64(4), rc.GetPending(), "nothing was claimed")

	registerWorkers(t, cl, "w1", "w2")
	claim, err := cl.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: "w1", MaxItems: 4, WaitMs: 1000})
	require.NoError(t, err)
	require.Len(t, claim.GetItems(), 4)
	stolen, err := cl.Steal(ctx, &rolloutv1.StealRequest{WorkerId: "w2"})
	require.NoError(t, err)
	require.Len(t, stolen.GetItems(), 2)
	_, err = cl.Heartbeat(ctx, &rolloutv1.HeartbeatRequest{WorkerId: "w1"})
	require.NoError(t, err)
	ws := workerIDs(t, cl)
	require.Len(t, ws, 2)
	require.Equal(t, uint64(2), ws["w1"].GetRunning())
	require.Equal(t, uint64(2), ws["w2"].GetRunning())
}

// TestIdleSilentWorkersExpire: registered workers that go silent are marked
// lost after the failure timeout and removed from the ledger after the
// retention (here 2 failure timeouts); a worker that holds items and keeps
// heartbeating stays however long it lives; once it goes silent its items
// are re-pended and it is removed too, and must register again.
func TestIdleSilentWorkersExpire(t *testing.T) {
	const run = "expire"
	const failureTimeout = time.Second
	c := newTestCluster(t, 3, clusterOpts{
		server: func(sc *Config) {
			sc.FailureTimeout = failureTimeout
			sc.ScanInterval = 50 * time.Millisecond
		},
		ledger: func(lc *fsm.Config) { lc.LostWorkerRetention = 2 },
	})
	c.submit(run, 3)
	cl := c.client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	registerWorkers(t, cl, "idle-1", "idle-2", "holder")
	claim, err := cl.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: "holder", MaxItems: 3, WaitMs: 1000})
	require.NoError(t, err)
	require.Len(t, claim.GetItems(), 3)
	var held []*rolloutv1.ItemKey
	for _, it := range claim.GetItems() {
		held = append(held, &rolloutv1.ItemKey{Run: it.GetRun(), Id: it.GetId(), Attempt: it.GetAttempt()})
	}

	// The holder heartbeats until told to stop.
	hbCtx, stopHB := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-hbCtx.Done():
				return
			case <-tick.C:
			}
			resp, err := cl.Heartbeat(hbCtx, &rolloutv1.HeartbeatRequest{WorkerId: "holder", Backlog: 3, Held: held})
			if err == nil && len(resp.GetLost()) > 0 {
				t.Errorf("the live holder lost items: %v", resp.GetLost())
			}
		}
	})
	defer func() { stopHB(); wg.Wait() }()

	// Lost first, listed as such...
	require.Eventually(t, func() bool {
		ws := workerIDs(t, cl)
		return ws["idle-1"].GetLost() && ws["idle-2"].GetLost()
	}, 20*time.Second, 20*time.Millisecond, "idle workers marked lost")
	// ...then gone, on every replica, while the holder stays.
	require.Eventually(t, func() bool {
		ws := workerIDs(t, cl)
		return len(ws) == 1 && ws["holder"] != nil
	}, 20*time.Second, 20*time.Millisecond, "idle workers removed")
	for _, r := range c.replicas() {
		require.Eventually(t, func() bool { return len(r.ledger.Workers()) == 1 }, 10*time.Second, 10*time.Millisecond,
			"replica %s still lists removed workers", r.id)
	}
	ws := workerIDs(t, cl)
	require.False(t, ws["holder"].GetLost())
	require.Equal(t, uint64(3), ws["holder"].GetRunning(), "a worker holding items is not removed while it lives")
	_, err = cl.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: "idle-1", MaxItems: 1, WaitMs: 10})
	requireNotRegistered(t, err, "claim by a removed worker")

	// The holder goes silent: its items go back, then it is removed.
	stopHB()
	wg.Wait()
	require.Eventually(t, func() bool {
		rc, err := c.runStatus(run)
		return err == nil && rc.GetPending() == 3
	}, 20*time.Second, 20*time.Millisecond, "the silent holder's items re-pended")
	require.Eventually(t, func() bool { return len(workerIDs(t, cl)) == 0 }, 20*time.Second, 20*time.Millisecond,
		"the silent holder removed")
	_, err = cl.Heartbeat(ctx, &rolloutv1.HeartbeatRequest{WorkerId: "holder"})
	requireNotRegistered(t, err, "heartbeat by a removed worker")
	registerWorkers(t, cl, "holder")
	again, err := cl.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: "holder", MaxItems: 3, WaitMs: 1000})
	require.NoError(t, err)
	require.Len(t, again.GetItems(), 3)
	for _, it := range again.GetItems() {
		require.Equal(t, uint64(2), it.GetAttempt())
	}
}

// clientAs is a coordinator client for every replica with the mutual-TLS
// identity conf, closed at cleanup.
func clientAs(t testing.TB, c *testCluster, conf *tls.Config) *coordclient.Client {
	t.Helper()
	cc := coordclient.DefaultConfig()
	cc.Addrs = c.addrs()
	cc.TLS = conf
	cc.CallTimeout = 3 * time.Second
	cl, err := coordclient.New(cc)
	require.NoError(t, err)
	t.Cleanup(func() { cl.Close() })
	return cl
}

// startWorkerAs runs a worker with its own client until the test ends or
// stop is called.
func startWorkerAs(t *testing.T, id string, cl *coordclient.Client, backend worker.Backend) *runningWorker {
	t.Helper()
	wc := worker.DefaultConfig()
	wc.ID = id
	wc.Concurrency = 4
	wc.HeartbeatInterval = 200 * time.Millisecond
	wc.Logger = testLogger(id)
	w, err := worker.New(wc, cl, backend)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(ctx)
	}()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return &runningWorker{w: w, stop: stop}
}

// TestEvictWorkerReleasesItems: on a mutual-TLS cluster with roles, a
// worker (w1) that heartbeats forever while it holds items keeps them until
// an admin evicts it (a worker or a client may not); EvictWorker re-pends
// them at once, another worker (w2) completes them, w1's late reports are
// CAS misses, every item has exactly one result, and w1 can register again.
func TestEvictWorkerReleasesItems(t *testing.T) {
	const run = "evict"
	const n = 6
	certs := newTestCerts(t)
	c := newTestCluster(t, 3, certs.tlsOpts(t))
	c.submit(run, n)
	admin := c.client() // the cluster's own clients hold the admin certificate
	stuck := clientAs(t, c, certs.tls(t, "w1"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	registerWorkers(t, stuck, "w1")
	claim, err := stuck.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: "w1", MaxItems: n, WaitMs: 1000})
	require.NoError(t, err)
	require.Len(t, claim.GetItems(), n)
	var held []*rolloutv1.ItemKey
	for _, it := range claim.GetItems() {
		held = append(held, &rolloutv1.ItemKey{Run: it.GetRun(), Id: it.GetId(), Attempt: it.GetAttempt()})
	}
	// Stuck: it heartbeats forever and never reports.
	hbCtx, stopHB := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var hbErrs []error
	wg.Go(func() {
		for hbCtx.Err() == nil {
			_, err := stuck.Heartbeat(hbCtx, &rolloutv1.HeartbeatRequest{WorkerId: "w1", Backlog: n, Held: held, Executing: held})
			if err != nil && hbCtx.Err() == nil {
				mu.Lock()
				hbErrs = append(hbErrs, err)
				mu.Unlock()
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	defer func() { stopHB(); wg.Wait() }()

	// Nothing takes its items back on its own (it is alive), and only an
	// admin may evict it.
	rc, err := c.runStatus(run)
	require.NoError(t, err)
	require.Equal(t, uint64(n), rc.GetRunning())
	for _, as := range []string{"w1", "w2", "cli"} {
		_, err = clientAs(t, c, certs.tls(t, as)).EvictWorker(ctx, &rolloutv1.EvictWorkerRequest{WorkerId: "w1"})
		require.Equal(t, codes.PermissionDenied, status.Code(err), "evict as %s: %v", as, err)
	}
	_, err = admin.EvictWorker(ctx, &rolloutv1.EvictWorkerRequest{WorkerId: "nobody"})
	require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
	_, err = admin.EvictWorker(ctx, &rolloutv1.EvictWorkerRequest{WorkerId: ""})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	rc, err = c.runStatus(run)
	require.NoError(t, err)
	require.Equal(t, uint64(n), rc.GetRunning(), "refused evictions changed nothing")

	ev, err := admin.EvictWorker(ctx, &rolloutv1.EvictWorkerRequest{WorkerId: "w1"})
	require.NoError(t, err)
	require.Equal(t, uint64(n), ev.GetRepended())
	rc, err = c.runStatus(run)
	require.NoError(t, err)
	require.Equal(t, uint64(n), rc.GetPending(), "every item pending again at once")
	require.NotContains(t, workerIDs(t, admin), "w1")
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.ContainsFunc(hbErrs, rolloutv1.IsNotRegistered)
	}, 10*time.Second, 10*time.Millisecond, "the evicted worker's heartbeats are refused")
	_, err = admin.EvictWorker(ctx, &rolloutv1.EvictWorkerRequest{WorkerId: "w1"})
	require.Equal(t, codes.NotFound, status.Code(err), "evicting twice: %v", err)

	// Another worker completes every item.
	helper := startWorkerAs(t, "w2", clientAs(t, c, certs.tls(t, "w2")), mockBackend(t, 0))
	l := waitFinishedOn(t, c, run, n)
	stopHB()
	wg.Wait()

	// The evicted worker's late reports, with the very bytes a worker sends,
	// all miss.
	b, err := mock.New(mock.DefaultConfig())
	require.NoError(t, err)
	var late []*rolloutv1.ItemReport
	for _, it := range claim.GetItems() {
		res, err := b.Run(ctx, workerItem(it))
		require.NoError(t, err)
		late = append(late, &rolloutv1.ItemReport{Run: run, Id: it.GetId(), Attempt: it.GetAttempt(),
			Outcome: rolloutv1.Outcome_OUTCOME_DONE, Result: res})
	}
	rep, err := stuck.Report(ctx, &rolloutv1.ReportRequest{WorkerId: "w1", Reports: late})
	require.NoError(t, err)
	for _, r := range rep.GetResults() {
		require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS, r.GetStatus(), "late report of %x: %s", r.GetId(), r.GetMessage())
	}
	helper.stop()
	checkExactlyOnce(t, l.ledger, run, n, helper)
	items, _, _, err := l.ledger.Results(run, 0, n)
	require.NoError(t, err)
	for _, it := range items {
		require.Equal(t, "w2", it.Owner)
	}

	// The evicted worker may come back.
	registerWorkers(t, stuck, "w1")
	ws := workerIDs(t, admin)
	require.Contains(t, ws, "w1")
	require.Zero(t, ws["w1"].GetRunning())
	_, err = stuck.Heartbeat(ctx, &rolloutv1.HeartbeatRequest{WorkerId: "w1"})
	require.NoError(t, err)
}

// workerItem is the worker.Item a worker runs for a claimed item.
func workerItem(it *rolloutv1.Item) worker.Item {
	return worker.Item{Run: it.GetRun(), ID: it.GetId(), Index: it.GetIndex(), Payload: it.GetPayload(), Attempt: it.GetAttempt()}
}
