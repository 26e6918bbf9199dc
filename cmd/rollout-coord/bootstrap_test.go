package main

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/server"
)

// TestBootstrapExpectFlags: --bootstrap-expect is refused with --bootstrap,
// without --join, below 1, and above the replicas --join names (plus this
// one), each error naming the flags; --min-voters and --dead-server-after
// are refused negative. The effective minimum follows --bootstrap-expect.
func TestBootstrapExpectFlags(t *testing.T) {
	base := func() *options {
		return &options{id: "c1", data: t.TempDir(), raftAddr: "127.0.0.1:0", grpcAddr: "127.0.0.1:0", insecure: true}
	}
	for _, tc := range []struct {
		name string
		set  func(o *options)
		want string
	}{
		{"with --bootstrap", func(o *options) { o.membership.bootstrapExpect, o.bootstrap = 3, true }, "--bootstrap-expect and --bootstrap are mutually exclusive"},
		{"without --join", func(o *options) { o.membership.bootstrapExpect = 3 }, "--bootstrap-expect needs --join"},
		{"zero", func(o *options) { o.membership.expectSet, o.join = true, "a:1,b:1,c:1" }, "--bootstrap-expect must be at least 1, got 0"},
		{"negative", func(o *options) { o.membership.bootstrapExpect, o.join = -2, "a:1,b:1,c:1" }, "--bootstrap-expect must be at least 1, got -2"},
		{"more than listed", func(o *options) { o.membership.bootstrapExpect, o.join = 5, "a:1,b:1,c:1" }, "--bootstrap-expect 5 is more than the replicas --join names (3 addresses"},
		{"not host:port", func(o *options) { o.membership.bootstrapExpect, o.join = 2, "a:1,nocolon" }, `--join: "nocolon" is not host:port`},
		{"min voters", func(o *options) { o.membership.minVoters = -1 }, "--min-voters must be at least 1"},
		{"dead server after", func(o *options) { o.membership.deadServerAfter = -time.Second }, "--dead-server-after must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := base()
			tc.set(o)
			require.ErrorContains(t, o.validate(), tc.want)
		})
	}
	o := base()
	o.membership.bootstrapExpect, o.join = 3, "rollout-0.rollout-raft:7000, rollout-1.rollout-raft:7000,rollout-2.rollout-raft:7000"
	require.NoError(t, o.validate())
	require.Equal(t, 3, o.membership.effectiveMinVoters())
	o.membership.bootstrapExpect, o.join = 3, "a:1,b:1" // this replica is the third
	require.NoError(t, o.validate())
	o.membership.minVoters = 5
	require.Equal(t, 5, o.membership.effectiveMinVoters())
	require.Equal(t, server.DefaultMinVoters, membershipOptions{}.effectiveMinVoters())
}

func info(id, raftAddr string, formed bool) *rolloutv1.ReplicaInfoResponse {
	return &rolloutv1.ReplicaInfoResponse{Header: &rolloutv1.ReplyHeader{ReplicaId: id}, RaftAddr: raftAddr, Formed: formed}
}

// TestDecideExpect covers the rounds of --bootstrap-expect: wait while any
// address is silent; join as soon as any peer is formed (even when others
// are silent, and even when the fresh ones already make N); bootstrap the
// same sorted set whatever the order of answers or whether this replica
// is listed; refuse more or fewer than N, and two replicas with one id or
// one address.
func TestDecideExpect(t *testing.T) {
	down := errors.New("Unavailable: name resolution failed")
	a := func(addr string, i *rolloutv1.ReplicaInfoResponse) peerAnswer { return peerAnswer{addr: addr, info: i} }
	silent := func(addr string) peerAnswer { return peerAnswer{addr: addr, err: down} }

	d, err := decideExpect("c1", "r1:7", 3, []peerAnswer{a("g1", info("c1", "r1:7", false)), silent("g2"), a("g3", info("c3", "r3:7", false))})
	require.NoError(t, err)
	require.Empty(t, d.join)
	require.Nil(t, d.bootstrap)
	require.Contains(t, d.waiting, "no answer from g2 (Unavailable: name resolution failed)")

	d, err = decideExpect("c1", "r1:7", 3, []peerAnswer{silent("g1"), a("g2", info("c2", "r2:7", true)), silent("g3")})
	require.NoError(t, err)
	require.Equal(t, "c2 at g2", d.join)

	d, err = decideExpect("c4", "r4:7", 3, []peerAnswer{a("g1", info("c1", "r1:7", false)), a("g2", info("c2", "r2:7", false)),
		a("g3", info("c3", "r3:7", true)), a("g4", info("c4", "r4:7", false))})
	require.NoError(t, err)
	require.Equal(t, "c3 at g3", d.join, "a formed peer wins over a full set of fresh ones")

	want := []string{"c1=r1:7", "c2=r2:7", "c3=r3:7"}
	for _, tc := range []struct {
		self, addr string
		answers    []peerAnswer
	}{
		{"c1", "r1:7", []peerAnswer{a("g1", info("c1", "r1:7", false)), a("g2", info("c2", "r2:7", false)), a("g3", info("c3", "r3:7", false))}},
		{"c3", "r3:7", []peerAnswer{a("g3", info("c3", "r3:7", false)), a("g2", info("c2", "r2:7", false)), a("g1", info("c1", "r1:7", false))}},
		{"c2", "r2:7", []peerAnswer{a("g1", info("c1", "r1:7", false)), a("g3", info("c3", "r3:7", false))}}, // self unlisted
		{"c2", "r2:7", []peerAnswer{a("g1", info("c1", "r1:7", false)), a("lo", info("c2", "r2:7", false)), a("g3", info("c3", "r3:7", false)), a("g1b", info("c1", "r1:7", false))}},
	} {
		d, err := decideExpect(tc.self, tc.addr, 3, tc.answers)
		require.NoError(t, err)
		var got []string
		for _, m := range d.bootstrap {
			got = append(got, m.ID+"="+m.Address)
		}
		require.Equal(t, want, got, "every replica bootstraps the same set (%s)", tc.self)
	}

	_, err = decideExpect("c1", "r1:7", 3, []peerAnswer{a("g2", info("c2", "r2:7", false)), a("g3", info("c3", "r3:7", false)), a("g4", info("c4", "r4:7", false))})
	require.ErrorIs(t, err, errExpectCount)
	require.ErrorContains(t, err, "as 4 distinct replicas (c1, c2, c3, c4), but --bootstrap-expect is 3")
	_, err = decideExpect("c1", "r1:7", 3, []peerAnswer{a("g1", info("c1", "r1:7", false)), a("g2", info("c2", "r2:7", false))})
	require.ErrorIs(t, err, errExpectCount)

	_, err = decideExpect("c1", "r1:7", 3, []peerAnswer{a("g2", info("c1", "r9:7", false))})
	require.ErrorIs(t, err, errExpectConflict)
	require.ErrorContains(t, err, `answers as this replica's id "c1" with Raft address r9:7`)
	_, err = decideExpect("c1", "r1:7", 3, []peerAnswer{a("g2", info("c2", "r2:7", false)), a("g3", info("c2", "r3:7", false))})
	require.ErrorIs(t, err, errExpectConflict)
	require.ErrorContains(t, err, `replica id "c2" answers with two Raft addresses, r2:7 and r3:7`)
	_, err = decideExpect("c1", "r1:7", 3, []peerAnswer{a("g2", info("c2", "r2:7", false)), a("g3", info("c3", "r2:7", false))})
	require.ErrorIs(t, err, errExpectConflict)
	require.ErrorContains(t, err, `replicas "c2" and "c3" both advertise Raft address r2:7`)
}

// infoServer answers ReplicaInfo as replica id.
type infoServer struct {
	rolloutv1.UnimplementedCoordinatorServer
	id string
}

func (s *infoServer) ReplicaInfo(context.Context, *rolloutv1.ReplicaInfoRequest) (*rolloutv1.ReplicaInfoResponse, error) {
	return info(s.id, "127.0.0.1:7001", false), nil
}

// TestPeerSetRedialsSilentAddresses: an address that answers keeps its
// connection; one that does not (a name that does not resolve, a port
// nobody serves) is dialled afresh for the next round, so a name that
// appears later is resolved at once rather than after gRPC's backoff.
func TestPeerSetRedialsSilentAddresses(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g := grpc.NewServer()
	rolloutv1.RegisterCoordinatorServer(g, &infoServer{id: "c2"})
	go g.Serve(lis)
	defer g.Stop()

	p, err := newPeerSet([]string{lis.Addr().String(), "rollout-9.nonexistent.invalid:7000"}, nil)
	require.NoError(t, err)
	defer p.close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	good, bad := p.conns[0], p.conns[1]
	answers := p.ask(ctx)
	require.NoError(t, answers[0].err)
	require.Equal(t, "c2", answers[0].info.GetHeader().GetReplicaId())
	require.Error(t, answers[1].err)
	require.Same(t, good, p.conns[0], "a peer that answered keeps its connection")
	require.NotSame(t, bad, p.conns[1], "a silent peer is dialled afresh")
}

// TestPeerAnswersCountOnlyFromTheirOwnCertificate: over mutual TLS an
// answer counts only when the peer's certificate is a replica certificate
// named as the id it answers with: a replica (c9) answering as another
// (c2), or a worker certificate, is no answer, and so can neither make a
// replica join nor complete a bootstrap set.
func TestPeerAnswersCountOnlyFromTheirOwnCertificate(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, mtls.GenerateDevCA(dir, []mtls.Cert{
		{Name: "c1", Role: mtls.RoleReplica}, {Name: "c2", Role: mtls.RoleReplica}, {Name: "c9", Role: mtls.RoleReplica},
		{Name: "w1", Role: mtls.RoleWorker}}, time.Hour))
	conf := func(name string) *tls.Config {
		src, err := mtls.FilesFor(dir, name).NewSource(mtls.SourceOptions{})
		require.NoError(t, err)
		return src.Config()
	}
	serve := func(cert, answersAs string) string {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		g := grpc.NewServer(grpc.Creds(credentials.NewTLS(conf(cert))))
		rolloutv1.RegisterCoordinatorServer(g, &infoServer{id: answersAs})
		go g.Serve(lis)
		t.Cleanup(g.Stop)
		return lis.Addr().String()
	}
	honest, impostor, worker := serve("c2", "c2"), serve("c9", "c2"), serve("w1", "c2")
	p, err := newPeerSet([]string{honest, impostor, worker}, conf("c1"))
	require.NoError(t, err)
	defer p.close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	answers := p.ask(ctx)
	require.NoError(t, answers[0].err)
	require.ErrorContains(t, answers[1].err, `it answers as replica "c2" with the certificate of c9 (replica)`)
	require.ErrorContains(t, answers[2].err, "handshake", "a worker certificate does not serve a replica")
}
