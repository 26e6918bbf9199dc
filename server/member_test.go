package server

import (
	"context"
	"crypto/tls"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/raftnode"
)

// Membership waits of the tests: shorter than the defaults so that a
// refusal comes in seconds, with margin for a live replica to catch up or
// answer on a busy 2-core machine (1.5 s let a healthy joiner be refused
// under load: TestJoinOverTLSChecksCertificate).
const (
	testCatchUpTimeout = 10 * time.Second
	testProbeTimeout   = 3 * time.Second
)

// fastMembership shortens the membership waits so refusals come quickly.
func fastMembership(c *Config) {
	c.JoinCatchUpTimeout = testCatchUpTimeout
	c.MemberProbeTimeout = testProbeTimeout
}

// raftMembers is the leader's raft configuration as "id/Suffrage", sorted.
func raftMembers(t *testing.T, c *testCluster) []string {
	t.Helper()
	l, _ := c.waitLeader()
	ms, err := l.node.Members()
	require.NoError(t, err)
	var out []string
	for _, m := range ms {
		out = append(out, m.ID+"/"+m.Suffrage)
	}
	slices.Sort(out)
	return out
}

// ledgerMembers is the leader ledger's member ids, sorted.
func ledgerMembers(t *testing.T, c *testCluster) []string {
	t.Helper()
	l, _ := c.waitLeader()
	var out []string
	for _, m := range l.ledger.Members() {
		out = append(out, m.ID)
	}
	slices.Sort(out)
	return out
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	require.NoError(t, lis.Close())
	return addr
}

// patientClient is a client of the cluster whose single attempt outlasts a
// join's catch-up wait.
func patientClient(t *testing.T, c *testCluster) *coordclient.Client {
	t.Helper()
	cc := coordclient.DefaultConfig()
	cc.Addrs = c.addrs()
	cc.CallTimeout = 30 * time.Second
	cl, err := coordclient.New(cc)
	require.NoError(t, err)
	t.Cleanup(func() { cl.Close() })
	return cl
}

// TestJoinInvalidIDChangesNothing sends Joins with a bad id or address: each
// is InvalidArgument and leaves the raft configuration and the ledger's
// members as they were (the old Join added the voter before the ledger
// refused the id).
func TestJoinInvalidIDChangesNothing(t *testing.T) {
	c := newTestCluster(t, 3, clusterOpts{server: fastMembership})
	beforeRaft, beforeLedger := raftMembers(t, c), ledgerMembers(t, c)
	good := deadAddr(t)
	for _, tc := range []struct {
		name               string
		id, raftAddr, grpc string
		want               string
	}{
		{"newline in id", "c9\nc1", "127.0.0.1:7101", good, "whitespace"},
		{"space in id", "c9 x", "127.0.0.1:7102", good, "whitespace"},
		{"tab in id", "c9\t", "127.0.0.1:7103", good, "whitespace"},
		{"control in id", "c9\x00", "127.0.0.1:7104", good, "non-printable"},
		{"long id", strings.Repeat("x", raftnode.MaxServerIDBytes+1), "127.0.0.1:7106", good, "limit"},
		{"empty id", "", "127.0.0.1:7107", good, "empty"},
		{"raft addr no port", "c9", "127.0.0.1", good, "raft_addr"},
		{"raft addr unspecified", "c9", "0.0.0.0:7108", good, "raft_addr"},
		{"raft addr port 0", "c9", "127.0.0.1:0", good, "raft_addr"},
		{"raft addr newline", "c9", "127.0.0.1:7109\n", good, "raft_addr"},
		{"grpc addr empty", "c9", "127.0.0.1:7110", "", "grpc_addr"},
		{"grpc addr unspecified", "c9", "127.0.0.1:7111", "[::]:7000", "grpc_addr"},
		{"raft addr of a member", "c9", c.rs[1].raftAddr, good, "already belongs"},
		{"grpc addr of a member", "c9", "127.0.0.1:7112", c.rs[1].grpcAddr, "already belongs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := c.client().Join(ctx, &rolloutv1.JoinRequest{Id: tc.id, RaftAddr: tc.raftAddr, GrpcAddr: tc.grpc})
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
			require.ErrorContains(t, err, tc.want)
			require.Equal(t, beforeRaft, raftMembers(t, c))
			require.Equal(t, beforeLedger, ledgerMembers(t, c))
		})
	}
}

// TestRemoveUnknownMemberNotFound removes an id that is not a member: it is
// NotFound (the old RemoveMember succeeded) and nothing changes.
func TestRemoveUnknownMemberNotFound(t *testing.T) {
	c := newTestCluster(t, 3, clusterOpts{server: fastMembership})
	before := raftMembers(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.client().RemoveMember(ctx, &rolloutv1.RemoveMemberRequest{Id: "c9"})
	require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
	require.ErrorContains(t, err, `"c9" is not a member`)
	require.ErrorContains(t, err, "c1 (Voter)")
	_, err = c.client().RemoveMember(ctx, &rolloutv1.RemoveMemberRequest{Id: "c9\n"})
	require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
	_, err = c.client().RemoveMember(ctx, &rolloutv1.RemoveMemberRequest{Id: ""})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	require.Equal(t, before, raftMembers(t, c))
}

// TestJoinDeadAddressesCannotWedge is the wedge of the issue: Joins naming
// dead loopback addresses. Each is refused before the configuration
// changes, and one whose gRPC answers but whose Raft address is dead is
// added as a non-voter, never catches up and is removed again. The
// configuration keeps its three voters, so after the leader is killed the
// other two still elect one (the old Join left six voters, three dead, and
// no election could succeed).
func TestJoinDeadAddressesCannotWedge(t *testing.T) {
	c := newTestCluster(t, 3, clusterOpts{server: fastMembership})
	want := []string{"c1/Voter", "c2/Voter", "c3/Voter"}
	require.Equal(t, want, raftMembers(t, c))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := patientClient(t, c)
	for _, id := range []string{"x1", "x2", "x3"} {
		_, err := cl.Join(ctx, &rolloutv1.JoinRequest{Id: id, RaftAddr: deadAddr(t), GrpcAddr: deadAddr(t)})
		require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
		require.ErrorContains(t, err, "does not answer")
		require.ErrorContains(t, err, "nothing was changed")
		require.Equal(t, want, raftMembers(t, c))
	}

	// A replica that answers over gRPC but gave a dead Raft address: added
	// as a non-voter, it never catches up, and is removed again.
	r := &replica{id: "x4", dir: filepath.Join(t.TempDir(), "x4")}
	c.start(r)
	t.Cleanup(r.stop)
	start := time.Now()
	_, err := cl.Join(ctx, &rolloutv1.JoinRequest{Id: "x4", RaftAddr: deadAddr(t), GrpcAddr: r.grpcAddr})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	require.ErrorContains(t, err, "did not catch up")
	require.ErrorContains(t, err, "removed again")
	require.GreaterOrEqual(t, time.Since(start), testCatchUpTimeout, "it waited for the catch-up")
	require.Equal(t, want, raftMembers(t, c))
	require.Equal(t, []string{"c1", "c2", "c3"}, ledgerMembers(t, c))

	l, term := c.waitLeader()
	l.stop()
	nl, nterm := c.waitLeader()
	require.NotEqual(t, l.id, nl.id)
	require.Greater(t, nterm, term)
	c.submit("after", 10)
}

// TestMembershipChangeRefusedBelowQuorum stops one of three replicas:
// removing a live voter (a follower, or the leader) would leave one
// reachable voter of two and is refused, naming the stopped one; removing
// the stopped one is allowed. A Join whose larger voter set would lack a
// reachable quorum (the other voter's gRPC is down too) is refused before
// anything changes.
func TestMembershipChangeRefusedBelowQuorum(t *testing.T) {
	c := newTestCluster(t, 3, clusterOpts{server: fastMembership})
	l, _ := c.waitLeader()
	var fs []*replica
	for _, r := range c.replicas() {
		if r != l {
			fs = append(fs, r)
		}
	}
	dead, live := fs[0], fs[1]
	dead.stop()
	want := []string{"c1/Voter", "c2/Voter", "c3/Voter"}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := patientClient(t, c)

	for _, id := range []string{live.id, l.id} {
		_, err := cl.RemoveMember(ctx, &rolloutv1.RemoveMemberRequest{Id: id})
		require.Equal(t, codes.FailedPrecondition, status.Code(err), "remove %s: %v", id, err)
		require.ErrorContains(t, err, "unreachable: "+dead.id)
		require.Equal(t, want, raftMembers(t, c))
	}
	nl, _ := c.waitLeader()
	require.Equal(t, l.id, nl.id, "a refused removal of the leader did not transfer leadership")

	// The live follower's gRPC goes down (its Raft keeps running): a join
	// would make four voters needing three reachable, with two.
	live.grpc.Stop()
	r := &replica{id: "c4", dir: filepath.Join(t.TempDir(), "c4")}
	c.start(r)
	t.Cleanup(r.stop)
	_, err := cl.Join(ctx, &rolloutv1.JoinRequest{Id: "c4", RaftAddr: r.raftAddr, GrpcAddr: r.grpcAddr})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	require.ErrorContains(t, err, "needing 3 reachable, but only 2")
	require.ErrorContains(t, err, dead.id)
	require.ErrorContains(t, err, live.id)
	require.Equal(t, want, raftMembers(t, c))

	// Removing the stopped replica leaves two voters (the leader and the
	// live one, whose Raft still runs): allowed once its gRPC is back, so
	// here it is refused as well; the leader alone is not a quorum of two.
	_, err = cl.RemoveMember(ctx, &rolloutv1.RemoveMemberRequest{Id: dead.id})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	require.ErrorContains(t, err, "unreachable: "+live.id)
}

// TestRemoveDeadMemberAllowed removes a stopped voter of three: the two
// left are reachable, so it is allowed, and the configuration has two
// voters.
func TestRemoveDeadMemberAllowed(t *testing.T) {
	c := newTestCluster(t, 3, clusterOpts{server: fastMembership})
	l, _ := c.waitLeader()
	var dead *replica
	for _, r := range c.replicas() {
		if r != l {
			dead = r
			break
		}
	}
	dead.stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := patientClient(t, c).RemoveMember(ctx, &rolloutv1.RemoveMemberRequest{Id: dead.id})
	require.NoError(t, err)
	require.Len(t, raftMembers(t, c), 2)
	require.NotContains(t, ledgerMembers(t, c), dead.id)
}

// gate is a gRPC front for a replica's Cluster RPC: it forwards the first
// call at once and holds every later one until open is called, so a test
// can see a joining replica while the leader waits for it.
type gate struct {
	rolloutv1.UnimplementedCoordinatorServer
	addr   string
	target rolloutv1.CoordinatorClient
	calls  atomic.Int64
	opened chan struct{}
}

func startGate(t *testing.T, target string) *gate {
	t.Helper()
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { cc.Close() })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g := &gate{addr: lis.Addr().String(), target: rolloutv1.NewCoordinatorClient(cc), opened: make(chan struct{})}
	gs := grpc.NewServer()
	rolloutv1.RegisterCoordinatorServer(gs, g)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return g
}

func (g *gate) Cluster(ctx context.Context, req *rolloutv1.ClusterRequest) (*rolloutv1.ClusterResponse, error) {
	if g.calls.Add(1) > 1 {
		select {
		case <-g.opened:
		case <-ctx.Done():
			return nil, status.Error(codes.DeadlineExceeded, "gate closed")
		}
	}
	return g.target.Cluster(ctx, req)
}

func (g *gate) open() { close(g.opened) }

// TestJoinPromotesAfterCatchUp joins a real new replica: it enters as a
// non-voter, receives the log, and is promoted to voter only once the
// leader has seen it caught up (the old Join made it a voter at once).
func TestJoinPromotesAfterCatchUp(t *testing.T) {
	c := newTestCluster(t, 3, clusterOpts{server: func(c *Config) { c.JoinCatchUpTimeout = 20 * time.Second }})
	c.submit("before", 300)
	r := &replica{id: "c4", dir: filepath.Join(t.TempDir(), "c4")}
	c.start(r)
	t.Cleanup(r.stop)
	g := startGate(t, r.grpcAddr)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	joined := make(chan error, 1)
	go func() {
		_, err := patientClient(t, c).Join(ctx, &rolloutv1.JoinRequest{Id: "c4", RaftAddr: r.raftAddr, GrpcAddr: g.addr})
		joined <- err
	}()
	suffrage := func() string {
		l, _ := c.waitLeader()
		ms, err := l.node.Members()
		require.NoError(t, err)
		for _, m := range ms {
			if m.ID == "c4" {
				return m.Suffrage
			}
		}
		return ""
	}
	require.Eventually(t, func() bool { return suffrage() != "" }, 20*time.Second, time.Millisecond)
	require.Equal(t, "Nonvoter", suffrage(), "the joining replica entered as a voter")
	l, _ := c.waitLeader()
	require.Eventually(t, func() bool { return r.node.Stats().AppliedIndex >= l.node.Stats().CommitIndex }, 20*time.Second, 10*time.Millisecond,
		"the non-voter did not receive the log")
	require.Equal(t, "Nonvoter", suffrage(), "promoted before the leader saw it caught up")
	select {
	case err := <-joined:
		t.Fatalf("Join returned before the leader saw the replica caught up: %v", err)
	default:
	}

	g.open()
	require.NoError(t, <-joined)
	require.Equal(t, "Voter", suffrage())
	resp, err := c.client().Cluster(ctx, l.grpcAddr)
	require.NoError(t, err)
	var c4 *rolloutv1.Member
	for _, m := range resp.GetMembers() {
		if m.GetId() == "c4" {
			c4 = m
		}
	}
	require.NotNil(t, c4)
	require.Equal(t, rolloutv1.Suffrage_SUFFRAGE_VOTER, c4.GetSuffrage())
	require.Equal(t, g.addr, c4.GetGrpcAddr())
	run, err := r.ledger.Run("before")
	require.NoError(t, err)
	require.Equal(t, uint64(300), run.Total)

	// A rejoin of the voter at the same address changes nothing.
	_, err = patientClient(t, c).Join(ctx, &rolloutv1.JoinRequest{Id: "c4", RaftAddr: r.raftAddr, GrpcAddr: g.addr})
	require.NoError(t, err)
	require.Equal(t, []string{"c1/Voter", "c2/Voter", "c3/Voter", "c4/Voter"}, raftMembers(t, c))
	// The same id at another address is refused: remove it first.
	_, err = patientClient(t, c).Join(ctx, &rolloutv1.JoinRequest{Id: "c4", RaftAddr: deadAddr(t), GrpcAddr: g.addr})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	require.ErrorContains(t, err, "already a voter")
}

// TestJoinOverTLSChecksCertificate runs a mutual-TLS cluster: a replica
// that answers as c8 but presents c9's certificate is refused before
// anything changes; c9 with its own certificate joins and is promoted.
func TestJoinOverTLSChecksCertificate(t *testing.T) {
	certs := newTestCerts(t)
	opts := certs.tlsOpts(t)
	tlsServer := opts.server
	opts.server = func(sc *Config) { tlsServer(sc); fastMembership(sc) }
	opts.tls = func(id string) *tls.Config {
		if id == "c8" {
			return certs.tls(t, "c9") // an impostor
		}
		return certs.tls(t, id)
	}
	c := newTestCluster(t, 3, opts)
	want := []string{"c1/Voter", "c2/Voter", "c3/Voter"}
	require.Equal(t, want, raftMembers(t, c))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	impostor := &replica{id: "c8", dir: filepath.Join(t.TempDir(), "c8")}
	c.start(impostor)
	t.Cleanup(impostor.stop)
	_, err := c.client().Join(ctx, &rolloutv1.JoinRequest{Id: "c8", RaftAddr: impostor.raftAddr, GrpcAddr: impostor.grpcAddr})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	require.ErrorContains(t, err, `not a replica certificate for "c8"`)
	require.Equal(t, want, raftMembers(t, c))

	r := &replica{id: "c9", dir: filepath.Join(t.TempDir(), "c9")}
	c.start(r)
	t.Cleanup(r.stop)
	_, err = c.client().Join(ctx, &rolloutv1.JoinRequest{Id: "c9", RaftAddr: r.raftAddr, GrpcAddr: r.grpcAddr})
	require.NoError(t, err)
	require.Equal(t, append(want, "c9/Voter"), raftMembers(t, c))
}
