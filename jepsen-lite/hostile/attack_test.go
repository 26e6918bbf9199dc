package hostile_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/api/validate"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/jepsen-lite/checker"
	"github.com/rollout/rollout/jepsen-lite/history"
	"github.com/rollout/rollout/jepsen-lite/hostile"
	"github.com/rollout/rollout/server"
)

// coordinator is a one-replica stand-in for a coordinator, served over
// real gRPC and mutual TLS. A strict one sits behind the real Authz and
// refuses what the ledger and the edge would (CAS miss, InvalidArgument,
// FailedPrecondition); an open one accepts everything, as a coordinator
// without authorization, limits or registration would.
type coordinator struct {
	rolloutv1.UnimplementedCoordinatorServer
	open bool

	mu      sync.Mutex
	members []string
	workers []string
	items   int
	ranges  map[string]uint64 // indexes submitted by run (open)
}

func (c *coordinator) header() *rolloutv1.ReplyHeader {
	return &rolloutv1.ReplyHeader{Term: 1, ReplicaId: "c1", LeaderId: "c1"}
}

func (c *coordinator) Cluster(context.Context, *rolloutv1.ClusterRequest) (*rolloutv1.ClusterResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	resp := &rolloutv1.ClusterResponse{Header: c.header(), State: rolloutv1.ReplicaState_REPLICA_STATE_LEADER, LedgerEpoch: 1, Limits: &rolloutv1.Limits{
		MaxMessageBytes: 1 << 20, MaxRequestBytes: 256 << 10, MaxItemsPerRequest: 100, MaxPayloadBytes: 16 << 10,
		MaxResultBytes: 16 << 10, MaxRunNameBytes: 128, IdBytes: 32,
	}}
	for _, m := range c.members {
		resp.Members = append(resp.Members, &rolloutv1.Member{Id: m})
	}
	return resp, nil
}

func (c *coordinator) Results(context.Context, *rolloutv1.ResultsRequest) (*rolloutv1.ResultsResponse, error) {
	return &rolloutv1.ResultsResponse{Header: c.header(), Done: true, Items: []*rolloutv1.ResultItem{
		{Id: make([]byte, 32), Index: 7, State: rolloutv1.ItemState_ITEM_STATE_RUNNING, Owner: "w1", Attempt: 3},
	}}, nil
}

func (c *coordinator) RunStatus(_ context.Context, req *rolloutv1.RunStatusRequest) (*rolloutv1.RunStatusResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	resp := &rolloutv1.RunStatusResponse{Header: c.header()}
	if n, ok := c.ranges[req.GetRun()]; ok {
		resp.Runs = append(resp.Runs, &rolloutv1.RunCounters{Name: req.GetRun(), Total: n})
	}
	for _, w := range c.workers {
		resp.Workers = append(resp.Workers, &rolloutv1.WorkerStatus{Id: w})
	}
	return resp, nil
}

func (c *coordinator) Report(_ context.Context, req *rolloutv1.ReportRequest) (*rolloutv1.ReportResponse, error) {
	st := rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS
	if c.open {
		st = rolloutv1.ReportStatus_REPORT_STATUS_APPLIED
	}
	resp := &rolloutv1.ReportResponse{Header: c.header()}
	for _, r := range req.GetReports() {
		resp.Results = append(resp.Results, &rolloutv1.ReportResult{Id: r.GetId(), Status: st})
	}
	return resp, nil
}

func (c *coordinator) Deregister(context.Context, *rolloutv1.DeregisterRequest) (*rolloutv1.DeregisterResponse, error) {
	return &rolloutv1.DeregisterResponse{Header: c.header(), Repended: 2}, nil
}

func (c *coordinator) Join(_ context.Context, req *rolloutv1.JoinRequest) (*rolloutv1.JoinResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !slices.Contains(c.members, req.GetId()) {
		c.members = append(c.members, req.GetId())
	}
	return &rolloutv1.JoinResponse{Header: c.header()}, nil
}

func (c *coordinator) RemoveMember(_ context.Context, req *rolloutv1.RemoveMemberRequest) (*rolloutv1.RemoveMemberResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.members = slices.DeleteFunc(c.members, func(m string) bool { return m == req.GetId() })
	return &rolloutv1.RemoveMemberResponse{Header: c.header()}, nil
}

func (c *coordinator) SubmitItems(_ context.Context, req *rolloutv1.SubmitItemsRequest) (*rolloutv1.SubmitItemsResponse, error) {
	if !c.open {
		return nil, status.Error(codes.InvalidArgument, "refused")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.items += len(req.GetItems())
	return &rolloutv1.SubmitItemsResponse{Header: c.header(), Created: uint32(len(req.GetItems()))}, nil
}

// SubmitRanges: strict, the edge's checks (validate) refuse; open, every
// request creates its ranges.
func (c *coordinator) SubmitRanges(_ context.Context, req *rolloutv1.SubmitRangesRequest) (*rolloutv1.SubmitRangesResponse, error) {
	if !c.open {
		if err := validate.DefaultLimits().CheckRangesRequest(req); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ranges == nil {
		c.ranges = map[string]uint64{}
	}
	var n uint64
	for _, r := range req.GetRanges() {
		n += r.GetCount()
	}
	c.ranges[req.GetRun()] += n
	return &rolloutv1.SubmitRangesResponse{Header: c.header(), Created: n}, nil
}

// ReportRange: strict, the edge's checks refuse a malformed report, an
// unknown run is NOT_FOUND and any other a CAS miss; open, every report
// applies.
func (c *coordinator) ReportRange(_ context.Context, req *rolloutv1.ReportRangeRequest) (*rolloutv1.ReportRangeResponse, error) {
	resp := &rolloutv1.ReportRangeResponse{Header: c.header()}
	for i, r := range req.GetReports() {
		st := rolloutv1.ReportStatus_REPORT_STATUS_APPLIED
		if !c.open {
			if err := validate.DefaultLimits().CheckRangeReport(i, r); err != nil {
				return nil, status.Error(codes.InvalidArgument, err.Error())
			}
			st = rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS
			if r.GetRun() != "run" {
				st = rolloutv1.ReportStatus_REPORT_STATUS_NOT_FOUND
			}
		}
		resp.Results = append(resp.Results, &rolloutv1.RangeReportResult{Id: r.GetId(), Status: st})
	}
	return resp, nil
}

func (c *coordinator) register(id string) error {
	if !c.open {
		return status.Error(codes.FailedPrecondition, "not registered")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !slices.Contains(c.workers, id) {
		c.workers = append(c.workers, id)
	}
	return nil
}

func (c *coordinator) Claim(_ context.Context, req *rolloutv1.ClaimRequest) (*rolloutv1.ClaimResponse, error) {
	if err := c.register(req.GetWorkerId()); err != nil {
		return nil, err
	}
	return &rolloutv1.ClaimResponse{Header: c.header()}, nil
}

func (c *coordinator) Heartbeat(_ context.Context, req *rolloutv1.HeartbeatRequest) (*rolloutv1.HeartbeatResponse, error) {
	if err := c.register(req.GetWorkerId()); err != nil {
		return nil, err
	}
	return &rolloutv1.HeartbeatResponse{Header: c.header()}, nil
}

// target starts a coordinator and a Raft port (a real raft transport when
// open, a port that closes every connection when strict) and returns the
// hostile nemesis aimed at them and the path of its history.
func target(t *testing.T, open bool) (*hostile.Nemesis, *coordinator, string) {
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
	serverTLS, err := tlsFor("c1")
	require.NoError(t, err)

	coord := &coordinator{open: open, members: []string{"c1"}}
	opts := []grpc.ServerOption{grpc.Creds(credentials.NewTLS(serverTLS)), grpc.MaxRecvMsgSize(1 << 20)}
	if !open {
		opts = append(opts, server.NewAuthz(false).ServerOptions()...)
	}
	g := grpc.NewServer(opts...)
	rolloutv1.RegisterCoordinatorServer(g, coord)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)

	var raftAddr string
	if open {
		trans, err := raft.NewTCPTransportWithLogger("127.0.0.1:0", nil, 2, time.Second, hclog.NewNullLogger())
		require.NoError(t, err)
		t.Cleanup(func() { _ = trans.Close() })
		go func() {
			for rpc := range trans.Consumer() {
				rpc.Respond(&raft.AppendEntriesResponse{Term: 1}, nil)
			}
		}()
		raftAddr = string(trans.LocalAddr())
	} else {
		rl, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		t.Cleanup(func() { _ = rl.Close() })
		go func() {
			for {
				c, err := rl.Accept()
				if err != nil {
					return
				}
				_ = c.Close()
			}
		}()
		raftAddr = rl.Addr().String()
	}

	path := filepath.Join(t.TempDir(), "hostile.jsonl")
	h, err := history.Create(path, "hostile")
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	n, err := hostile.New(hostile.Config{
		Seed: 3, Replicas: []hostile.Replica{{ID: "c1", GRPCAddr: ln.Addr().String(), RaftAddr: raftAddr}},
		Workers: []string{"w1", "w2"}, Runs: []string{"run"}, Ghost: "ghost", TLS: tlsFor, History: h, Window: 2 * time.Second,
		Impostor: func() (tls.Certificate, string, error) {
			if open {
				// A coordinator that accepts everything stands for a
				// cluster whose clients accept any server: the impostor
				// presents a replica's certificate.
				c, err := tls.LoadX509KeyPair(mtls.FilesFor(dir, "c1").Cert, mtls.FilesFor(dir, "c1").Key)
				return c, "c1 (replica)", err
			}
			return legacyCert(t, dir, "w9", mtls.RoleWorker), "w9 (worker)", nil
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = n.Close() })
	return n, coord, path
}

// attacks runs attacks and returns their events by attack.
func attacks(t *testing.T, n *hostile.Nemesis, path string, as []hostile.Attack) map[string]history.Event {
	t.Helper()
	for _, a := range as {
		n.Attack(context.Background(), a)
	}
	require.Equal(t, len(as), n.Count())
	evs, err := history.ReadFile(path)
	require.NoError(t, err)
	out := map[string]history.Event{}
	for _, e := range evs {
		require.Equal(t, history.TypeHostile, e.Type)
		out[e.Op] = e
	}
	require.Len(t, out, len(as))
	return out
}

// TestAttacksRefused runs every attack against a coordinator behind the
// real Authz that refuses as it should: each is refused, changes nothing,
// and hostile-refused passes.
func TestAttacksRefused(t *testing.T) {
	n, coord, path := target(t, false)
	evs := attacks(t, n, path, hostile.AllAttacks())
	for _, a := range hostile.AllAttacks() {
		e := evs[string(a)]
		require.True(t, hostile.Expected(e.Expect, e.Got), "%s: expected %s, got %s (%s)", a, e.Expect, e.Got, e.Detail)
		require.Empty(t, e.Changed, a)
	}
	require.Equal(t, "PermissionDenied", evs[string(hostile.ForgeReportOwner)].Got)
	require.Equal(t, "CAS_MISS", evs[string(hostile.ForgeReportCAS)].Got)
	require.Equal(t, "Unavailable", evs[string(hostile.PlaintextGRPC)].Got, "the TLS port refuses plaintext")
	require.Equal(t, "ResourceExhausted", evs[string(hostile.OversizeMessage)].Got, "gRPC refuses a message over its limit")
	imp := evs[string(hostile.ImpostorCoordinator)]
	require.Equal(t, hostile.Refused, imp.Got, imp.Detail)
	require.Contains(t, imp.Detail, "presenting w9 (worker); 0 calls reached it")
	require.Equal(t, 3, strings.Count(imp.Detail, "refused: not a replica certificate"), imp.Detail)
	require.Equal(t, []string{"c1"}, coord.members)
	var all []history.Event
	for _, e := range evs {
		all = append(all, e)
	}
	res := checker.Check(checker.Input{Events: all, Hostile: true, Completed: 1, Bound: time.Second})
	v, ok := res.Verdict(checker.HostileRefused)
	require.True(t, ok)
	require.True(t, v.OK, "%+v", v)
	v, ok = res.Verdict(checker.ImpostorRefused)
	require.True(t, ok)
	require.True(t, v.OK, "%+v", v)
	require.Len(t, res.Hostile, len(hostile.AllAttacks()))
}

// TestAttacksAccepted runs attacks against a coordinator that accepts
// everything: each is a violation, and an accepted membership change is
// seen and undone.
func TestAttacksAccepted(t *testing.T) {
	n, coord, path := target(t, true)
	as := []hostile.Attack{hostile.ForgeReportOwner, hostile.ForgeReportCAS, hostile.ForeignDeregister, hostile.JoinWorker,
		hostile.RemoveClient, hostile.PlaintextRaft, hostile.OversizeItems, hostile.ShortID, hostile.UnregisteredClaim,
		hostile.RangeSubmitMalformed, hostile.RangeReportOwner, hostile.RangeReportMalformed, hostile.ImpostorCoordinator}
	evs := attacks(t, n, path, as)
	for _, a := range as {
		e := evs[string(a)]
		require.False(t, hostile.Expected(e.Expect, e.Got) && e.Changed == "", "%s was not caught: got %s (%s)", a, e.Got, e.Detail)
	}
	require.Equal(t, "APPLIED", evs[string(hostile.ForgeReportOwner)].Got)
	require.Equal(t, hostile.Answered, evs[string(hostile.PlaintextRaft)].Got)
	require.Contains(t, evs[string(hostile.JoinWorker)].Changed, "added [hostile-")
	require.Contains(t, evs[string(hostile.RemoveClient)].Changed, "removed [c1]")
	require.Contains(t, evs[string(hostile.UnregisteredClaim)].Changed, "ghost is listed as a worker")
	require.Contains(t, evs[string(hostile.ShortID)].Changed, "1 hostile items created")
	require.Contains(t, evs[string(hostile.RangeSubmitMalformed)].Changed, "20 hostile indexes created in run hostile-ranges-")
	require.Contains(t, evs[string(hostile.RangeSubmitMalformed)].Changed, "exists with 20 indexes")
	require.Equal(t, "APPLIED", evs[string(hostile.RangeReportOwner)].Got)
	require.Contains(t, evs[string(hostile.RangeReportMalformed)].Changed, "was applied")
	require.Equal(t, []string{"c1"}, coord.members, "the admin undid the accepted membership changes")
	require.Equal(t, 102, coord.items)
	require.Equal(t, hostile.Answered, evs[string(hostile.ImpostorCoordinator)].Got, "an impostor with a replica's certificate is accepted")

	var all []history.Event
	for _, e := range evs {
		all = append(all, e)
	}
	res := checker.Check(checker.Input{Events: all, Hostile: true, Completed: 1, Bound: time.Second})
	v, _ := res.Verdict(checker.HostileRefused)
	require.False(t, v.OK)
	require.Equal(t, len(as), v.Count)
	v, _ = res.Verdict(checker.ImpostorRefused)
	require.False(t, v.OK, "the impostor was accepted")
}

// legacyCert issues name with role from the CA in dir for server and client
// use with the loopback SANs, as every role was issued before roles decided
// usages (what an insider may still hold).
func legacyCert(t *testing.T, dir, name string, role mtls.Role) tls.Certificate {
	t.Helper()
	ca, err := mtls.LoadCA(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem"))
	require.NoError(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name, OrganizationalUnit: []string{string(role)}},
		NotBefore:    time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:    []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
