package server

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/api/validate"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/raftnode"
	"github.com/rollout/rollout/worker"
)

// clusterOpts tunes an in-process test cluster.
type clusterOpts struct {
	raft   func(id string, c *raftnode.Config)
	server func(c *Config)
	ledger func(c *fsm.Config)
	// tls, when set, returns replica id's mutual-TLS config: its Raft
	// transport and gRPC service then run over TLS with Authz enforcing
	// roles. Unset: plaintext, and the service runs Insecure.
	tls func(id string) *tls.Config
	// clientTLS is the config of the cluster's own clients (client(), the
	// joins of newTestCluster); it should carry an admin certificate.
	clientTLS *tls.Config
	// listen, when set, wraps replica id's gRPC listener (as rollout-coord
	// wraps it in connection limits).
	listen func(id string, l net.Listener) net.Listener
	// tlsFiles, when set (instead of tls), gives replica id's TLS files:
	// it then serves them from a reloading mtls.Source and enforces the
	// ledger's revocation list, as rollout-coord does.
	tlsFiles func(id string) mtls.Files
}

// replica is one in-process coordinator: a Raft node, its ledger and the
// gRPC service on loopback, the same wiring as cmd/rollout-coord.
type replica struct {
	id, raftAddr, grpcAddr, dir string

	node   *raftnode.Node
	ledger *fsm.Ledger
	srv    *Server
	grpc   *grpc.Server
	cancel context.CancelFunc

	// revs is the revocation set the replica enforces (clusterOpts.tlsFiles).
	revs   *mtls.Revocations
	tlsSrc *mtls.Source

	// hold, when set, delays every Claim reply of this replica until the
	// channel is closed: a slow network between it and its workers.
	hold atomic.Pointer[chan struct{}]
}

// testCluster is N real replicas in this process.
type testCluster struct {
	t    testing.TB
	opts clusterOpts
	mu   sync.Mutex
	rs   []*replica
}

func testLogger(name string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Warn})
}

// start starts (or restarts, from its data dir) the replica's node and service.
// A new replica binds port 0 and keeps the ports it got (no probe-then-bind
// race); a restarted one binds the same addresses again, retrying while the
// kernel still holds them.
func (c *testCluster) start(r *replica) {
	t := c.t
	t.Helper()
	var lis net.Listener
	var err error
	require.Eventually(t, func() bool {
		lis, err = net.Listen("tcp", cmp.Or(r.grpcAddr, "127.0.0.1:0"))
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "listen %s: %v", r.grpcAddr, err)
	r.grpcAddr = lis.Addr().String()
	if c.opts.listen != nil {
		lis = c.opts.listen(r.id, lis)
	}

	rc := raftnode.DefaultConfig()
	rc.ID, rc.DataDir, rc.RaftAddr = r.id, r.dir, cmp.Or(r.raftAddr, "127.0.0.1:0")
	rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = 300*time.Millisecond, 300*time.Millisecond, 200*time.Millisecond
	rc.Logger = testLogger(r.id)
	rc.EncodeBatch = fsm.EncodeEntry
	id, grpcAddr := r.id, r.grpcAddr
	rc.EpochCommand = func(uint64) ([]byte, error) {
		return fsm.EpochCommand(id, grpcAddr)
	}
	var tlsConf *tls.Config
	if c.opts.tls != nil {
		tlsConf = c.opts.tls(r.id)
		rc.TLS = tlsConf
	}
	var revs *mtls.Revocations
	if c.opts.tlsFiles != nil {
		revs = mtls.NewRevocations(nil)
		src, err := c.opts.tlsFiles(r.id).NewSource(mtls.SourceOptions{Revocations: revs})
		require.NoError(t, err)
		tlsConf = src.Config()
		rc.TLS, rc.Revocations = tlsConf, revs
		r.revs, r.tlsSrc = revs, src
	}
	if c.opts.raft != nil {
		c.opts.raft(r.id, &rc)
	}
	lc := fsm.DefaultConfig()
	if c.opts.ledger != nil {
		c.opts.ledger(&lc)
	}
	require.Eventually(t, func() bool {
		r.ledger, err = fsm.New(lc)
		require.NoError(t, err)
		r.node, err = raftnode.New(rc, r.ledger)
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "raft node %s: %v", r.id, err)
	r.raftAddr = r.node.Addr()
	sc := DefaultConfig()
	sc.ReplicaID, sc.GRPCAddr = r.id, r.grpcAddr
	sc.FailureTimeout = 5 * time.Second
	sc.ScanInterval = 100 * time.Millisecond
	sc.Logger = rc.Logger
	sc.Insecure = tlsConf == nil
	sc.PeerTLS = tlsConf // as rollout-coord: the replica's own certificate
	sc.Revocations, sc.TLSSource = revs, r.tlsSrc
	if c.opts.server != nil {
		c.opts.server(&sc)
	}
	r.srv, err = New(sc, r.node, r.ledger)
	require.NoError(t, err)
	gopts := append(NewAuthz(sc.Insecure).WithRevocations(revs).ServerOptions(), r.srv.GRPCOptions()...)
	switch {
	case revs != nil:
		gopts = append(gopts, grpc.Creds(revs.TrackingCreds(credentials.NewTLS(tlsConf))))
	case tlsConf != nil:
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(tlsConf)))
	}
	r.grpc = grpc.NewServer(append(gopts, grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := h(ctx, req)
		if info.FullMethod == rolloutv1.Coordinator_Claim_FullMethodName {
			if hold := r.hold.Load(); hold != nil {
				<-*hold
			}
		}
		return resp, err
	}))...)
	r.srv.RegisterOn(r.grpc)
	healthpb.RegisterHealthServer(r.grpc, health.NewServer())
	reflection.Register(r.grpc)
	go r.grpc.Serve(lis)
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go r.srv.RunFailureScan(ctx)
	go r.srv.RunRevocations(ctx)
	go r.srv.RunFederation(ctx) // returns at once without Config.Peers
}

// stop kills the replica abruptly: no leadership transfer, connections cut.
func (r *replica) stop() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	if hold := r.hold.Swap(nil); hold != nil {
		close(*hold)
	}
	r.grpc.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_ = r.node.Shutdown(ctx)
}

// newTestCluster starts n replicas: the first bootstraps, the others join
// through the API.
func newTestCluster(t testing.TB, n int, opts clusterOpts) *testCluster {
	t.Helper()
	c := &testCluster{t: t, opts: opts}
	base := t.TempDir()
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("c%d", i)
		r := &replica{id: id, dir: filepath.Join(base, id)}
		c.start(r)
		c.rs = append(c.rs, r)
	}
	t.Cleanup(func() {
		for _, r := range c.replicas() {
			r.stop()
		}
	})
	require.NoError(t, c.rs[0].node.Bootstrap())
	c.waitLeader()
	for _, r := range c.rs[1:] {
		c.join(r)
	}
	return c
}

// join asks the cluster to add r as a voter.
func (c *testCluster) join(r *replica) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := c.client().Join(ctx, &rolloutv1.JoinRequest{Id: r.id, RaftAddr: r.raftAddr, GrpcAddr: r.grpcAddr})
	require.NoError(c.t, err)
}

// add starts a new replica and joins it.
func (c *testCluster) add(id string) *replica {
	c.t.Helper()
	r := &replica{id: id, dir: filepath.Join(c.t.TempDir(), id)}
	c.start(r)
	c.mu.Lock()
	c.rs = append(c.rs, r)
	c.mu.Unlock()
	c.join(r)
	return r
}

func (c *testCluster) replicas() []*replica {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*replica(nil), c.rs...)
}

// leader returns the serving leader among running replicas, or nil.
func (c *testCluster) leader() *replica {
	for _, r := range c.replicas() {
		if r.cancel == nil {
			continue
		}
		if _, ok := r.node.ServingTerm(); ok {
			return r
		}
	}
	return nil
}

// waitLeader waits for a serving leader and returns it with its term.
func (c *testCluster) waitLeader() (*replica, uint64) {
	c.t.Helper()
	var l *replica
	require.Eventually(c.t, func() bool { l = c.leader(); return l != nil }, 20*time.Second, 10*time.Millisecond, "no serving leader")
	term, _ := l.node.ServingTerm()
	return l, term
}

func (c *testCluster) addrs() []string {
	var out []string
	for _, r := range c.replicas() {
		out = append(out, r.grpcAddr)
	}
	return out
}

// client returns a new coordinator client for every replica, closed at
// cleanup.
func (c *testCluster) client() *coordclient.Client {
	c.t.Helper()
	cc := coordclient.DefaultConfig()
	cc.Addrs = c.addrs()
	cc.TLS = c.opts.clientTLS
	cc.CallTimeout = 3 * time.Second
	cl, err := coordclient.New(cc)
	require.NoError(c.t, err)
	c.t.Cleanup(func() { cl.Close() })
	return cl
}

// testID is a readable item id of the length the API requires
// (validate.DefaultIDBytes): s padded with spaces.
func testID(s string) []byte {
	return []byte(fmt.Sprintf("%-*s", validate.DefaultIDBytes, s))
}

// submit creates run with n items whose payload is {"prompt":"p<i>"}.
func (c *testCluster) submit(run string, n int) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := c.client()
	for start := 0; start < n; start += 500 {
		end := min(start+500, n)
		items := make([]*rolloutv1.SubmitItem, 0, end-start)
		for i := start; i < end; i++ {
			items = append(items, &rolloutv1.SubmitItem{
				Id: testID(fmt.Sprintf("%s-%05d", run, i)), Index: uint64(i), Payload: []byte(fmt.Sprintf(`{"prompt":"p%d"}`, i))})
		}
		resp, err := cl.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: run, Spec: &rolloutv1.RunSpec{Total: uint64(n)}, Items: items})
		require.NoError(c.t, err)
		require.EqualValues(c.t, end-start, resp.GetCreated())
	}
}

// runStatus reads a run's counters through the API (linearizable).
func (c *testCluster) runStatus(run string) (*rolloutv1.RunCounters, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.client().RunStatus(ctx, &rolloutv1.RunStatusRequest{Run: run})
	if err != nil {
		return nil, err
	}
	return resp.GetRuns()[0], nil
}

// waitFinished waits until every item of run is Done or Dead.
func (c *testCluster) waitFinished(run string, n int, timeout time.Duration) *rolloutv1.RunCounters {
	c.t.Helper()
	var last *rolloutv1.RunCounters
	require.Eventually(c.t, func() bool {
		rc, err := c.runStatus(run)
		if err != nil {
			return false
		}
		last = rc
		return rc.GetDone()+rc.GetDead() == uint64(n)
	}, timeout, 50*time.Millisecond, "run %s did not finish: %v", run, last)
	return last
}

// runningWorker is a worker loop running in this process.
type runningWorker struct {
	w    *worker.Worker
	stop func()
}

// startWorker runs a worker with backend until the test ends or stop is
// called.
func (c *testCluster) startWorker(id string, backend worker.Backend, tune func(*worker.Config)) *runningWorker {
	c.t.Helper()
	wc := worker.DefaultConfig()
	wc.ID = id
	wc.Concurrency = 4
	wc.HeartbeatInterval = 200 * time.Millisecond
	wc.Logger = testLogger(id)
	if tune != nil {
		tune(&wc)
	}
	w, err := worker.New(wc, c.client(), backend)
	require.NoError(c.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(ctx)
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
	c.t.Cleanup(stop)
	return &runningWorker{w: w, stop: stop}
}

// checkExactlyOnce asserts that every item of run is Done with the mock
// result for its prompt, and that the workers' accepted completions add up
// to exactly one per item.
func checkExactlyOnce(t *testing.T, l *fsm.Ledger, run string, n int, workers ...*runningWorker) {
	t.Helper()
	items, _, done, err := l.Results(run, 0, n+10)
	require.NoError(t, err)
	require.True(t, done)
	require.Len(t, items, n, "items in the ledger")
	for i, it := range items {
		require.Equal(t, uint64(i), it.Index)
		require.Equal(t, fsm.StateDone, it.State, "item %d", i)
		require.JSONEq(t, fmt.Sprintf(`{"completion":"MOCK:p%d","finish_reason":"stop"}`, i), string(it.Result))
	}
	var accepted uint64
	for _, w := range workers {
		accepted += w.w.Stats().Completed
	}
	require.Equal(t, uint64(n), accepted, "accepted completions over all workers")
}

// countingBackend wraps a backend and counts executions per item id.
type countingBackend struct {
	inner worker.Backend
	mu    sync.Mutex
	runs  map[string]int
}

func newCounting(inner worker.Backend) *countingBackend {
	return &countingBackend{inner: inner, runs: map[string]int{}}
}

func (b *countingBackend) Run(ctx context.Context, it worker.Item) ([]byte, error) {
	b.mu.Lock()
	b.runs[string(it.ID)]++
	b.mu.Unlock()
	return b.inner.Run(ctx, it)
}

func (b *countingBackend) count(id string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.runs[id]
}

var _ worker.Backend = (*countingBackend)(nil)
