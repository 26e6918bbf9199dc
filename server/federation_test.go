package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/internal/peers"
	"github.com/rollout/rollout/worker"
)

// fedPair is two real 3-replica clusters over mutual TLS, each with its
// own CA: a (the parent, --cluster-name a --peers naming b) and b (the
// callee, --cluster-name b, no peers). a's peer certificate "a" is issued
// by b's CA.
type fedPair struct {
	a, b           *testCluster
	certsA, certsB testCerts
	peersFile      string
	watcher        *peers.Watcher
}

func newFedPair(t *testing.T) *fedPair { return newFedPairPolling(t, 100*time.Millisecond) }

// newFedPairPolling is newFedPair with a's leader polling b every poll.
func newFedPairPolling(t *testing.T, poll time.Duration) *fedPair {
	t.Helper()
	p := &fedPair{certsA: newTestCerts(t), certsB: newTestCerts(t)}
	optsB := p.certsB.tlsOpts(t)
	optsB.server = func(sc *Config) { sc.FailureTimeout, sc.ClusterName = time.Hour, "b" }
	p.b = newTestCluster(t, 3, optsB)
	p.b.waitLeader()
	p.peersFile = filepath.Join(t.TempDir(), "peers.toml")
	p.writePeers(t)
	w, err := peers.NewWatcher(p.peersFile, "a")
	require.NoError(t, err)
	p.watcher = w
	optsA := p.certsA.tlsOpts(t)
	optsA.server = func(sc *Config) {
		sc.FailureTimeout, sc.ClusterName, sc.Peers, sc.PeerPollInterval = time.Hour, "a", w, poll
	}
	p.a = newTestCluster(t, 3, optsA)
	p.a.waitLeader()
	return p
}

// writePeers writes a's peers file: peer b at b's replicas, presenting the
// peer certificate "a" from b's CA.
func (p *fedPair) writePeers(t *testing.T) {
	t.Helper()
	f := mtls.FilesFor(p.certsB.dir, "a")
	var coord []string
	for _, a := range p.b.addrs() {
		coord = append(coord, fmt.Sprintf("%q", a))
	}
	body := fmt.Sprintf("[[peer]]\nname = \"b\"\ncoord = [%s]\ntls_ca = %q\ntls_cert = %q\ntls_key = %q\nstores = [\"file:///fed-store\"]\n",
		strings.Join(coord, ", "), f.CA, f.Cert, f.Key)
	require.NoError(t, os.WriteFile(p.peersFile, []byte(body), 0o600))
}

// worker starts a worker on b serving models (none: every model).
func (p *fedPair) worker(t *testing.T, id string, models ...string) *runningWorker {
	t.Helper()
	wc := worker.DefaultConfig()
	wc.ID, wc.Concurrency, wc.HeartbeatInterval, wc.Logger, wc.Models = id, 4, 200*time.Millisecond, testLogger(id), models
	w, err := worker.New(wc, clientAs(t, p.b, p.certsB.tls(t, id)), mockBackend(t, time.Millisecond))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return &runningWorker{w: w, stop: stop}
}

// waitPeerServes waits until a's leader has polled b and seen a live worker
// for model.
func (p *fedPair) waitPeerServes(t *testing.T, model string) {
	t.Helper()
	admin := p.a.client()
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		l := p.a.leader()
		if l == nil {
			return false
		}
		resp, err := admin.Cluster(ctx, l.grpcAddr)
		if err != nil || len(resp.GetPeers()) != 1 {
			return false
		}
		ps := resp.GetPeers()[0]
		return ps.GetReachable() && (ps.GetAllModels() || slicesContains(ps.GetModels(), model))
	}, 30*time.Second, 50*time.Millisecond, "a never saw b serve model %q", model)
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// fedItems are n inline items of run.
func fedItems(run string, from, n int) []*rolloutv1.SubmitItem {
	out := make([]*rolloutv1.SubmitItem, 0, n)
	for i := from; i < from+n; i++ {
		out = append(out, &rolloutv1.SubmitItem{Id: testID(fmt.Sprintf("%s-%04d", run, i)), Index: uint64(i),
			Payload: []byte(fmt.Sprintf(`{"prompt":"p%d"}`, i))})
	}
	return out
}

// remoteRuns returns b's runs named "a/...", read from b's leader's ledger.
func (p *fedPair) remoteRuns(t *testing.T) []fsm.RunStatus {
	t.Helper()
	l, _ := p.b.waitLeader()
	var out []fsm.RunStatus
	for _, r := range l.ledger.Runs() {
		if strings.HasPrefix(r.Name, "a/") {
			out = append(out, r)
		}
	}
	return out
}

// statusOn reads run's counters from c as admin.
func statusOn(t *testing.T, cl *coordclient.Client, run string) *rolloutv1.RunCounters {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cl.RunStatus(ctx, &rolloutv1.RunStatusRequest{Run: run})
	require.NoError(t, err)
	require.Len(t, resp.GetRuns(), 1)
	return resp.GetRuns()[0]
}

// TestFederationHandsOffByModel: a run whose model no local worker serves
// goes to the peer that serves it, runs there exactly once under the
// deterministic remote name (marked with its origin, as tenant a), its
// status on the parent converges to the peer's and finishes only once the
// peer's did, its results read through the parent equal the peer's, and a
// later submit naming another cluster is refused naming both.
func TestFederationHandsOffByModel(t *testing.T) {
	const n = 20
	p := newFedPair(t)
	p.worker(t, "w1", "m")
	p.waitPeerServes(t, "m")
	cli := clientAs(t, p.a, p.certsA.tls(t, "cli"))
	admin := p.a.client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	resp, err := cli.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "r1", Spec: &rolloutv1.RunSpec{Model: "m", Total: n},
		Items: fedItems("r1", 0, n/2)})
	require.NoError(t, err)
	require.EqualValues(t, n/2, resp.GetCreated())
	_, err = cli.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "r1", Spec: &rolloutv1.RunSpec{Cluster: "b"},
		Items: fedItems("r1", n/2, n/2)})
	require.NoError(t, err)
	again, err := cli.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "r1", Items: fedItems("r1", 0, 3)})
	require.NoError(t, err, "a resubmitted chunk is idempotent on the peer")
	require.Zero(t, again.GetCreated())
	_, err = cli.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "r1", Spec: &rolloutv1.RunSpec{Cluster: "local"},
		Items: fedItems("r1", 0, 1)})
	requireCode(t, err, codes.FailedPrecondition, `names cluster "local"`, `routed to peer "b"`)

	var rc *rolloutv1.RunCounters
	require.Eventually(t, func() bool {
		rc = statusOn(t, admin, "r1")
		return rc.GetHandleState() == fsm.HandleFinished
	}, 30*time.Second, 50*time.Millisecond, "the handle never finished: %v", rc)
	require.Equal(t, "b", rc.GetCluster())
	require.Regexp(t, regexp.MustCompile(`^a/r1\.[0-9a-f]{8}$`), rc.GetRemoteRun())
	require.EqualValues(t, n, rc.GetDone())
	require.EqualValues(t, n, rc.GetTotal())
	require.NotZero(t, rc.GetFinishedUnixMs())
	require.Equal(t, "cli", rc.GetTenant())

	remote := p.remoteRuns(t)
	require.Len(t, remote, 1, "exactly one remote run")
	require.Equal(t, rc.GetRemoteRun(), remote[0].Name)
	require.Equal(t, "a", remote[0].Spec.GetOrigin(), "the peer marks the run's origin (one hop)")
	require.Equal(t, "a", remote[0].Spec.GetTenant(), "the peer runs it as tenant a")
	require.EqualValues(t, n, remote[0].Done)

	// Results through the parent equal the peer's own, item for item.
	viaA, err := cli.Results(ctx, &rolloutv1.ResultsRequest{Run: "r1", Limit: 1000})
	require.NoError(t, err)
	onB, err := p.b.client().Results(ctx, &rolloutv1.ResultsRequest{Run: rc.GetRemoteRun(), Limit: 1000})
	require.NoError(t, err)
	require.Len(t, viaA.GetItems(), n)
	require.Equal(t, len(onB.GetItems()), len(viaA.GetItems()))
	for i := range onB.GetItems() {
		require.True(t, proto.Equal(onB.GetItems()[i], viaA.GetItems()[i]), "item %d", i)
	}

	// The parent's event history says where the run went.
	ev, err := admin.Events(ctx, &rolloutv1.EventsRequest{Run: "r1"})
	require.NoError(t, err)
	var kinds []rolloutv1.EventKind
	for _, e := range ev.GetEvents() {
		kinds = append(kinds, e.GetKind())
	}
	require.Contains(t, kinds, rolloutv1.EventKind_EVENT_KIND_RUN_HANDED_OFF)
	require.Contains(t, kinds, rolloutv1.EventKind_EVENT_KIND_HANDLE_CHANGED)

	// An idle federation writes no log entry: three more polls, same index.
	l, _ := p.a.waitLeader()
	idx := l.node.Stats().LastLogIndex
	polls := 0
	var last time.Time
	require.Eventually(t, func() bool {
		if v := l.srv.fed.view("b"); v != nil && v.lastPoll.After(last) {
			last = v.lastPoll
			polls++
		}
		return polls >= 4
	}, 20*time.Second, 20*time.Millisecond)
	require.Equal(t, idx, l.node.Stats().LastLogIndex, "polls of an idle federation wrote log entries")
	figs := l.srv.PeerFigures()
	require.Len(t, figs, 1)
	require.True(t, figs[0].Reachable)
	require.Equal(t, map[string]int{fsm.HandleFinished: 1}, figs[0].Handles)
	require.GreaterOrEqual(t, figs[0].LastPollAge, time.Duration(0))

	// Deleting the handle deletes the remote run; the name is free again.
	_, err = cli.DeleteRun(ctx, &rolloutv1.DeleteRunRequest{Run: "r1"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, herr := l.ledger.Handle("r1")
		return len(p.remoteRuns(t)) == 0 && herr != nil
	}, 20*time.Second, 50*time.Millisecond, "the remote run or the handle survived the delete")
}

// TestFederationPinsAndRefusals: a pin to this cluster stays local; a pin
// to an unknown cluster is INVALID_ARGUMENT and changes nothing; a peer's
// permanent refusal (its tenant quota) passes through as
// RESOURCE_EXHAUSTED, leaves the run nowhere (refused, with the reason)
// and is answered again to a retry.
func TestFederationPinsAndRefusals(t *testing.T) {
	p := newFedPair(t)
	cli := clientAs(t, p.a, p.certsA.tls(t, "cli"))
	admin := p.a.client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	_, err := cli.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "here", Spec: &rolloutv1.RunSpec{Model: "m", Cluster: "local"},
		Items: fedItems("here", 0, 2)})
	require.NoError(t, err)
	rc := statusOn(t, admin, "here")
	require.Equal(t, ClusterLocal, rc.GetCluster())
	require.Empty(t, rc.GetRemoteRun())
	_, err = cli.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "here", Spec: &rolloutv1.RunSpec{Cluster: "b"}, Items: fedItems("here", 0, 1)})
	requireCode(t, err, codes.FailedPrecondition, `names cluster "b"`, `runs on cluster "local"`)

	l, _ := p.a.waitLeader()
	before := l.node.Stats().LastLogIndex
	_, err = cli.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "x", Spec: &rolloutv1.RunSpec{Cluster: "zz"}, Items: fedItems("x", 0, 1)})
	requireCode(t, err, codes.InvalidArgument, `names cluster "zz"`, "nothing was changed")
	_, err = cli.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "x", Spec: &rolloutv1.RunSpec{Cluster: "b", Store: "file:///elsewhere"},
		Items: fedItems("x", 0, 1)})
	requireCode(t, err, codes.InvalidArgument, "do not reach the run's store")
	require.Equal(t, before, l.node.Stats().LastLogIndex, "a refused submit changed the ledger")

	// b's operator lets tenant a queue one item: a's run of three is refused.
	one := uint64(1)
	_, err = p.b.client().SetTenant(ctx, &rolloutv1.SetTenantRequest{Name: "a", MaxQueued: &one})
	require.NoError(t, err)
	_, err = cli.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "big", Spec: &rolloutv1.RunSpec{Cluster: "b", Total: 3},
		Items: fedItems("big", 0, 3)})
	requireCode(t, err, codes.ResourceExhausted, `peer "b" refused run "big"`, "max_queued")
	var qf *errdetails.QuotaFailure
	for _, d := range status.Convert(err).Details() {
		if x, ok := d.(*errdetails.QuotaFailure); ok {
			qf = x
		}
	}
	require.NotNil(t, qf, "the peer's QuotaFailure passes through (the gateway's 429)")
	require.Equal(t, "tenant:a", qf.GetViolations()[0].GetSubject())
	rc = statusOn(t, admin, "big")
	require.Equal(t, fsm.HandleRefused, rc.GetHandleState())
	require.Contains(t, rc.GetHandleReason(), "max_queued")
	require.Empty(t, p.remoteRuns(t), "a refused run is nowhere")
	_, err = cli.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "big", Items: fedItems("big", 0, 1)})
	requireCode(t, err, codes.ResourceExhausted, "refused by peer")
	_, err = cli.DeleteRun(ctx, &rolloutv1.DeleteRunRequest{Run: "big"})
	require.NoError(t, err)
	_, err = admin.RunStatus(ctx, &rolloutv1.RunStatusRequest{Run: "big"})
	requireCode(t, err, codes.NotFound)
}

// TestFederationRangesAndReload: a range run pinned to the peer is
// forwarded with the parent's prefix ("runs/NAME/" for a run without one,
// where the client put its input chunks) and its chunks land once; a
// payload outside the run's inputs is refused here, before anything is
// forwarded; a peers file reloaded without the peer takes it out of
// routing and of Cluster.
func TestFederationRangesAndReload(t *testing.T) {
	p := newFedPair(t)
	cli := clientAs(t, p.a, p.certsA.tls(t, "cli"))
	admin := p.a.client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := &rolloutv1.SubmitRangesRequest{Run: "rr", Spec: &rolloutv1.RunSpec{Cluster: "b", Store: "file:///fed-store", Total: 8},
		Ranges: []*rolloutv1.InputRange{{Index: 0, Count: 5, PayloadRef: &rolloutv1.DataRef{Object: "runs/rr/inputs/chunk-0", Length: 50}}}}
	resp, err := cli.SubmitRanges(ctx, req)
	require.NoError(t, err)
	require.EqualValues(t, 5, resp.GetCreated())
	resp, err = cli.SubmitRanges(ctx, req)
	require.NoError(t, err)
	require.Zero(t, resp.GetCreated(), "a repeated chunk is idempotent")
	_, err = cli.SubmitRanges(ctx, &rolloutv1.SubmitRangesRequest{Run: "rr", Ranges: []*rolloutv1.InputRange{
		{Index: 5, Count: 3, PayloadRef: &rolloutv1.DataRef{Object: "runs/other/inputs/x", Length: 9}}}})
	requireCode(t, err, codes.InvalidArgument, "input prefix")
	remote := p.remoteRuns(t)
	require.Len(t, remote, 1)
	require.EqualValues(t, 5, remote[0].Total)
	require.Equal(t, "runs/rr/", remote[0].Spec.GetDataPrefix(), "the parent's effective prefix")
	require.Equal(t, "rr", statusOn(t, admin, "rr").GetName())

	// Reload the peers file without b.
	require.NoError(t, os.WriteFile(p.peersFile, nil, 0o600))
	require.NoError(t, p.watcher.Reload())
	_, err = cli.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "late", Spec: &rolloutv1.RunSpec{Cluster: "b"}, Items: fedItems("late", 0, 1)})
	requireCode(t, err, codes.InvalidArgument, `names cluster "b"`)
	l, _ := p.a.waitLeader()
	cr, err := admin.Cluster(ctx, l.grpcAddr)
	require.NoError(t, err)
	require.Empty(t, cr.GetPeers())
	_, err = cli.SubmitRanges(ctx, &rolloutv1.SubmitRangesRequest{Run: "rr", Ranges: []*rolloutv1.InputRange{
		{Index: 5, Count: 3, PayloadRef: &rolloutv1.DataRef{Object: "runs/rr/inputs/chunk-1", Length: 30}}}})
	requireCode(t, err, codes.FailedPrecondition, `peer "b" is not in the peers file`)
}

// TestFederationCrashBetweenHandleAndForward: the parent's leader records a
// handle and dies before it forwards anything; the client's retry goes to
// the new leader, which forwards under the same remote name; a late
// forward from the deposed leader creates nothing more: exactly one remote
// run, each item once.
func TestFederationCrashBetweenHandleAndForward(t *testing.T) {
	const n = 6
	p := newFedPairPolling(t, time.Hour) // no poll but those a request makes
	cli := clientAs(t, p.a, p.certsA.tls(t, "cli"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	old, _ := p.a.waitLeader()
	spec := &fsmpb.RunSpec{Model: "m", Total: n, Tenant: "cli"}
	h, _, err := old.srv.handleFor(ctx, "crash", "b", "cli", spec) // the handle, and no forward
	require.NoError(t, err)
	require.Equal(t, fsm.HandlePending, h.State)
	old.stop()
	nl, _ := p.a.waitLeader()
	require.NotEqual(t, old.id, nl.id)
	got, err := nl.ledger.Handle("crash")
	require.NoError(t, err)
	require.Equal(t, h.RemoteRun, got.RemoteRun, "every replica computed the same remote name")

	req := &rolloutv1.SubmitItemsRequest{Run: "crash", Spec: &rolloutv1.RunSpec{Model: "m", Total: n}, Items: fedItems("crash", 0, n)}
	resp, err := cli.SubmitItems(ctx, req)
	require.NoError(t, err)
	require.EqualValues(t, n, resp.GetCreated())

	// The deposed leader's forward of the same chunk, arriving late.
	stale := proto.Clone(req).(*rolloutv1.SubmitItemsRequest)
	err = old.srv.forward(ctx, h, func(ctx context.Context, c *coordclient.Client) error {
		fr := proto.Clone(stale).(*rolloutv1.SubmitItemsRequest)
		fr.Run, fr.Spec = h.RemoteRun, apiSpec(h, nil)
		r, err := c.SubmitItems(ctx, fr)
		if err == nil && r.GetCreated() != 0 {
			return fmt.Errorf("the late forward created %d items", r.GetCreated())
		}
		return err
	})
	require.NoError(t, err)
	remote := p.remoteRuns(t)
	require.Len(t, remote, 1, "exactly one remote run")
	require.Equal(t, h.RemoteRun, remote[0].Name)
	require.EqualValues(t, n, remote[0].Total, "each item once")
	require.Eventually(t, func() bool {
		hs, err := nl.ledger.Handle("crash")
		return err == nil && hs.State == fsm.HandleAcknowledged
	}, 20*time.Second, 50*time.Millisecond)

	// Another leader change: the next leader's first answer is the peer's
	// counters, not the ledger's floor (which holds none for a live run).
	p.a.start(old) // back, so that two of three remain
	nl.stop()
	third, _ := p.a.waitLeader()
	require.Nil(t, third.srv.fed.view("b"))
	rc := statusOn(t, p.a.client(), "crash")
	require.EqualValues(t, n, rc.GetTotal(), "status went backwards across a leader change: %v", rc)
	require.EqualValues(t, n, rc.GetPending())
}

// TestFederationCancelWhilePeerDown: a cancel of a handed-off run while the
// peer is down is a durable intent (the call answers at once); once the
// peer is back, the leader has it cancel the remote run and records the
// confirmation.
func TestFederationCancelWhilePeerDown(t *testing.T) {
	p := newFedPair(t)
	cli := clientAs(t, p.a, p.certsA.tls(t, "cli"))
	admin := p.a.client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := cli.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "c", Spec: &rolloutv1.RunSpec{Model: "m", Cluster: "b", Total: 4},
		Items: fedItems("c", 0, 4)})
	require.NoError(t, err)
	down := p.b.replicas()
	for _, r := range down {
		r.stop()
	}
	start := time.Now()
	_, err = cli.CancelRun(ctx, &rolloutv1.CancelRunRequest{Run: "c"})
	require.NoError(t, err)
	require.Less(t, time.Since(start), 15*time.Second)
	rc := statusOn(t, admin, "c")
	require.True(t, rc.GetCancelled(), "the intent shows")
	require.NotEqual(t, fsm.HandleCancelled, rc.GetHandleState(), "not confirmed while the peer is down")
	_, err = cli.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "c", Items: fedItems("c", 4, 1)})
	requireCode(t, err, codes.FailedPrecondition, "cancelled")

	for _, r := range down {
		p.b.start(r)
	}
	require.Eventually(t, func() bool {
		return statusOn(t, admin, "c").GetHandleState() == fsm.HandleCancelled
	}, 60*time.Second, 100*time.Millisecond, "the cancel never landed on the peer")
	remote := p.remoteRuns(t)
	require.Len(t, remote, 1)
	require.True(t, remote[0].IsCancelled, "the remote run is cancelled")
	rc = statusOn(t, admin, "c")
	require.EqualValues(t, 4, rc.GetTotal(), "the cancelled run's counters are the peer's")
	require.EqualValues(t, 4, rc.GetCancelledItems())
	require.NotZero(t, rc.GetFinishedUnixMs())
}

// TestFederationInertWithoutPeers: a cluster without peers has no
// federation: no peers in Cluster, a pin to a peer is refused, RunStatus
// says local, and its snapshot is the version written before federation.
func TestFederationInertWithoutPeers(t *testing.T) {
	certs := newTestCerts(t)
	c := newTestCluster(t, 1, certs.tlsOpts(t))
	l, _ := c.waitLeader()
	require.Nil(t, l.srv.fed)
	admin := c.client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cr, err := admin.Cluster(ctx, l.grpcAddr)
	require.NoError(t, err)
	require.Empty(t, cr.GetPeers())
	require.Empty(t, cr.GetClusterName())
	_, err = admin.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "p", Spec: &rolloutv1.RunSpec{Cluster: "b"}, Items: fedItems("p", 0, 1)})
	requireCode(t, err, codes.InvalidArgument, "no peers")
	_, err = admin.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "p", Spec: &rolloutv1.RunSpec{Model: "nobody"}, Items: fedItems("p", 0, 1)})
	require.NoError(t, err)
	rc := statusOn(t, admin, "p")
	require.Equal(t, ClusterLocal, rc.GetCluster())
	require.True(t, rc.GetUnservedModel(), "it waits here as it always did")
	require.Empty(t, l.ledger.Handles())
	snap, err := l.ledger.Snapshot()
	require.NoError(t, err)
	sink := &memSink{}
	require.NoError(t, snap.Persist(sink))
	require.Equal(t, []byte("RLDG\x00\x00\x00\x09"), sink.Bytes()[:8], "snapshot version 9, as before federation")
}

// memSink is a raft.SnapshotSink in memory.
type memSink struct{ bytes.Buffer }

func (*memSink) ID() string    { return "mem" }
func (*memSink) Cancel() error { return nil }
func (*memSink) Close() error  { return nil }

var (
	_ raft.SnapshotSink = (*memSink)(nil)
	_ io.Writer         = (*memSink)(nil)
)

// TestFederationLostOrphansPendingCancel: an acknowledged run the peer no
// longer lists is lost, never done; a run under a's prefix on b that no
// handle names (a deposed leader's late forward) is cancelled and deleted
// by a's leader; a cancel of a handle the peer never received is confirmed
// at once, and no later submit can create it there.
func TestFederationLostOrphansPendingCancel(t *testing.T) {
	p := newFedPair(t)
	cli := clientAs(t, p.a, p.certsA.tls(t, "cli"))
	admin := p.a.client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	_, err := cli.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "gone", Spec: &rolloutv1.RunSpec{Cluster: "b", Total: 2},
		Items: fedItems("gone", 0, 2)})
	require.NoError(t, err)
	l, _ := p.a.waitLeader()
	h, err := l.ledger.Handle("gone")
	require.NoError(t, err)
	require.Equal(t, fsm.HandleAcknowledged, h.State)
	pc, err := l.srv.fed.conn("b")
	require.NoError(t, err)
	// A poll answered without the run (as the peer answers once its
	// operator deleted it).
	l.srv.reconcile(ctx, pc, "b", map[string]fsm.HandleStatus{h.Run: h}, map[string]*rolloutv1.RunCounters{})
	rc := statusOn(t, admin, "gone")
	require.Equal(t, fsm.HandleLost, rc.GetHandleState())
	require.Contains(t, rc.GetHandleReason(), "no longer holds")
	require.Zero(t, rc.GetFinishedUnixMs(), "lost is not done")
	require.Zero(t, rc.GetDone())

	// An orphan: a run under a's prefix created with a's peer certificate,
	// named by no handle.
	asA := clientAs(t, p.b, p.certsB.tls(t, "a"))
	_, err = asA.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "a/orphan.00000000", Spec: &rolloutv1.RunSpec{Total: 1},
		Items: fedItems("orphan", 0, 1)})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		for _, r := range p.remoteRuns(t) {
			if r.Name == "a/orphan.00000000" {
				return false
			}
		}
		return true
	}, 30*time.Second, 50*time.Millisecond, "the orphan was not reaped")
	require.Len(t, p.remoteRuns(t), 1, "the handle's own remote run stays")

	// A handle whose forward never happened, cancelled: confirmed at once.
	spec := &fsmpb.RunSpec{Total: 1, Tenant: "cli"}
	ph, _, err := l.srv.handleFor(ctx, "never", "b", "cli", spec)
	require.NoError(t, err)
	_, err = cli.CancelRun(ctx, &rolloutv1.CancelRunRequest{Run: "never"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return statusOn(t, admin, "never").GetHandleState() == fsm.HandleCancelled
	}, 20*time.Second, 50*time.Millisecond, "the cancel of a run the peer never received was not confirmed")
	_, err = cli.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "never", Items: fedItems("never", 0, 1)})
	requireCode(t, err, codes.FailedPrecondition, "cancelled")
	for _, r := range p.remoteRuns(t) {
		require.NotEqual(t, ph.RemoteRun, r.Name, "a cancelled handle reached the peer")
	}
	// A deposed leader's forward of it, landing after the cancel: the
	// leader cancels that copy as well.
	_, err = asA.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: ph.RemoteRun, Spec: &rolloutv1.RunSpec{Total: 1}, Items: fedItems("never", 0, 1)})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		for _, r := range p.remoteRuns(t) {
			if r.Name == ph.RemoteRun {
				return r.IsCancelled
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond, "a late copy of a cancelled run stayed live on the peer")
}

// TestFederationRoutesBeforeFirstPoll: a leader that has not polled a peer
// yet (just elected; here the loop's interval is an hour) polls it when an
// auto run needs it, so the run, whose cluster is final, goes where its
// model is served, under the first leader and under the next.
func TestFederationRoutesBeforeFirstPoll(t *testing.T) {
	p := newFedPairPolling(t, time.Hour)
	p.worker(t, "w1", "m")
	require.Eventually(t, func() bool {
		l := p.b.leader()
		return l != nil && len(l.ledger.Workers()) == 1
	}, 20*time.Second, 20*time.Millisecond)
	cli := clientAs(t, p.a, p.certsA.tls(t, "cli"))
	admin := p.a.client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := cli.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "first", Spec: &rolloutv1.RunSpec{Model: "m", Total: 1}, Items: fedItems("first", 0, 1)})
	require.NoError(t, err)
	require.Equal(t, "b", statusOn(t, admin, "first").GetCluster())

	old, _ := p.a.waitLeader()
	old.stop()
	nl, _ := p.a.waitLeader()
	require.Nil(t, nl.srv.fed.view("b"), "the new leader has not polled b")
	_, err = cli.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "second", Spec: &rolloutv1.RunSpec{Model: "m", Total: 1}, Items: fedItems("second", 0, 1)})
	require.NoError(t, err)
	require.Equal(t, "b", statusOn(t, admin, "second").GetCluster())
	_, err = cli.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "third", Spec: &rolloutv1.RunSpec{Model: "other", Total: 1}, Items: fedItems("third", 0, 1)})
	require.NoError(t, err)
	require.Equal(t, ClusterLocal, statusOn(t, admin, "third").GetCluster(), "a model no one serves waits here")
}

// TestFederationRetention: a handed-off run's retain_ms holds on both
// sides: once it finished and the retention passed, the peer's run and the
// parent's handle are both gone.
func TestFederationRetention(t *testing.T) {
	p := newFedPair(t)
	p.worker(t, "w1")
	cli := clientAs(t, p.a, p.certsA.tls(t, "cli"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := cli.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "ret", Spec: &rolloutv1.RunSpec{Cluster: "b", Total: 2, RetainMs: 300},
		Items: fedItems("ret", 0, 2)})
	require.NoError(t, err)
	l, _ := p.a.waitLeader()
	require.Eventually(t, func() bool {
		_, err := l.ledger.Handle("ret")
		return err != nil && len(p.remoteRuns(t)) == 0
	}, 30*time.Second, 50*time.Millisecond, "the handle or the remote run outlived its retention")
	ev, err := p.a.client().Events(ctx, &rolloutv1.EventsRequest{Run: "ret"})
	require.NoError(t, err)
	last := ev.GetEvents()[len(ev.GetEvents())-1]
	require.Equal(t, rolloutv1.EventKind_EVENT_KIND_RUN_DELETED, last.GetKind())
	require.Contains(t, last.GetDetail(), "retention")
}
