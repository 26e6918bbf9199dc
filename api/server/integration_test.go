package server

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/raftnode"
	"github.com/rollout/rollout/worker"
	"github.com/rollout/rollout/worker/coordclient"
	"github.com/rollout/rollout/worker/mock"
)

// replica is one in-process coordinator: a Raft node, its ledger and the
// gRPC service on loopback.
type replica struct {
	id       string
	raftAddr string
	grpcAddr string
	dir      string
	node     *raftnode.Node
	ledger   *fsm.Ledger
	srv      *Server
	grpc     *grpc.Server
	cancel   context.CancelFunc
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

func startReplica(t *testing.T, id, dir, raftAddr, grpcAddr string) *replica {
	t.Helper()
	r := &replica{id: id, dir: dir, raftAddr: raftAddr, grpcAddr: grpcAddr}
	var err error
	r.ledger, err = fsm.New(fsm.DefaultConfig())
	require.NoError(t, err)
	rc := raftnode.DefaultConfig()
	rc.ID, rc.DataDir, rc.RaftAddr = id, dir, raftAddr
	rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = 300*time.Millisecond, 300*time.Millisecond, 200*time.Millisecond
	rc.Logger = hclog.New(&hclog.LoggerOptions{Name: id, Level: hclog.Warn})
	rc.EncodeBatch = fsm.EncodeEntry
	rc.EpochCommand = func(uint64) ([]byte, error) {
		return fsm.EncodeCommand(&fsmpb.Command{Cmd: &fsmpb.Command_Epoch{Epoch: &fsmpb.EpochCmd{LeaderId: id, LeaderGrpcAddr: grpcAddr}}})
	}
	r.node, err = raftnode.New(rc, r.ledger)
	require.NoError(t, err)
	sc := DefaultConfig()
	sc.ReplicaID, sc.GRPCAddr = id, grpcAddr
	sc.FailureTimeout = 5 * time.Second
	sc.Logger = rc.Logger
	r.srv, err = New(sc, r.node, r.ledger)
	require.NoError(t, err)
	lis, err := net.Listen("tcp", grpcAddr)
	require.NoError(t, err)
	r.grpc = grpc.NewServer()
	r.srv.Register(r.grpc)
	go r.grpc.Serve(lis)
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go r.srv.RunFailureScan(ctx)
	return r
}

// stop kills the replica abruptly: no leadership transfer.
func (r *replica) stop() {
	r.cancel()
	r.grpc.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_ = r.node.Shutdown(ctx)
}

func startInProcessCluster(t *testing.T) []*replica {
	t.Helper()
	base := t.TempDir()
	var rs []*replica
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("c%d", i)
		rs = append(rs, startReplica(t, id, filepath.Join(base, id), freeAddr(t), freeAddr(t)))
	}
	t.Cleanup(func() {
		for _, r := range rs {
			r.stop()
		}
	})
	require.NoError(t, rs[0].node.Bootstrap())
	require.Eventually(t, func() bool { _, ok := rs[0].node.ServingTerm(); return ok }, 15*time.Second, 20*time.Millisecond)
	client := newClient(t, rs)
	for _, r := range rs[1:] {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		_, err := client.Join(ctx, &rolloutv1.JoinRequest{Id: r.id, RaftAddr: r.raftAddr, GrpcAddr: r.grpcAddr})
		cancel()
		require.NoError(t, err)
	}
	return rs
}

func newClient(t *testing.T, rs []*replica) *coordclient.Client {
	t.Helper()
	cc := coordclient.DefaultConfig()
	for _, r := range rs {
		cc.Addrs = append(cc.Addrs, r.grpcAddr)
	}
	cc.CallTimeout = 3 * time.Second
	c, err := coordclient.New(cc)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func leaderOf(rs []*replica) *replica {
	for _, r := range rs {
		if _, ok := r.node.ServingTerm(); ok {
			return r
		}
	}
	return nil
}

// TestInProcessClusterLeaderLossExactlyOnce runs a batch through three
// in-process replicas and two workers, stops the leader abruptly mid-run,
// and checks that every item ends Done exactly once with the mock result,
// that a new leader with a higher term took over, and that the surviving
// replicas' ledgers agree.
func TestInProcessClusterLeaderLossExactlyOnce(t *testing.T) {
	const n = 400
	rs := startInProcessCluster(t)
	client := newClient(t, rs)

	items := make([]*rolloutv1.SubmitItem, n)
	for i := range items {
		items[i] = &rolloutv1.SubmitItem{
			Id: []byte(fmt.Sprintf("item-%04d", i)), Index: uint64(i),
			Payload: []byte(fmt.Sprintf(`{"prompt":"p%d"}`, i)),
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for start := 0; start < n; start += 100 {
		resp, err := client.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{
			Run: "it", Spec: &rolloutv1.RunSpec{Total: n}, Items: items[start : start+100]})
		require.NoError(t, err)
		require.EqualValues(t, 100, resp.GetCreated())
	}
	// Resubmitting is a no-op per item.
	resp, err := client.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "it", Items: items[:100]})
	require.NoError(t, err)
	require.Zero(t, resp.GetCreated())

	var wg sync.WaitGroup
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	for i := 1; i <= 2; i++ {
		backend, err := mock.New(mock.Config{Latency: 10 * time.Millisecond})
		require.NoError(t, err)
		wcfg := worker.DefaultConfig()
		wcfg.ID = fmt.Sprintf("w%d", i)
		wcfg.Concurrency = 4
		wcfg.Logger = hclog.New(&hclog.LoggerOptions{Name: wcfg.ID, Level: hclog.Warn})
		w, err := worker.New(wcfg, newClient(t, rs), backend)
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = w.Run(wctx)
		}()
	}

	old := leaderOf(rs)
	require.NotNil(t, old)
	oldTerm, _ := old.node.ServingTerm()
	require.Eventually(t, func() bool {
		r, err := old.ledger.Run("it")
		return err == nil && r.Done >= n/4
	}, time.Minute, 10*time.Millisecond)
	old.stop()

	var survivors []*replica
	for _, r := range rs {
		if r != old {
			survivors = append(survivors, r)
		}
	}
	var newLeader *replica
	require.Eventually(t, func() bool { newLeader = leaderOf(survivors); return newLeader != nil }, 20*time.Second, 20*time.Millisecond)
	newTerm, _ := newLeader.node.ServingTerm()
	require.Greater(t, newTerm, oldTerm)

	require.Eventually(t, func() bool {
		r, err := newLeader.ledger.Run("it")
		return err == nil && r.Done == n
	}, 90*time.Second, 20*time.Millisecond)
	wcancel()
	wg.Wait()

	got, _, done, err := newLeader.ledger.Results("it", 0, n+10)
	require.NoError(t, err)
	require.True(t, done)
	require.Len(t, got, n)
	for i, it := range got {
		require.Equal(t, uint64(i), it.Index)
		require.Equal(t, fsm.StateDone, it.State)
		require.JSONEq(t, fmt.Sprintf(`{"completion":"MOCK:p%d","finish_reason":"stop"}`, i), string(it.Result))
	}

	// Both survivors converge on the same ledger.
	other := survivors[0]
	if other == newLeader {
		other = survivors[1]
	}
	require.Eventually(t, func() bool {
		return other.node.Stats().AppliedIndex >= newLeader.node.Stats().CommitIndex
	}, 10*time.Second, 20*time.Millisecond)
	a, _, _, err := other.ledger.Results("it", 0, n+10)
	require.NoError(t, err)
	require.Equal(t, got, a)
}
