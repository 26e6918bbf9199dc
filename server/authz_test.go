package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/raftnode"
)

// testCerts is a dev CA with every identity the authorization tests use:
// replicas c1..c3 (the cluster) and c9 (a replica outside it), workers w1
// and w2, a client cli, an admin ops, a gateway gw, peer clusters a and b,
// a client-role certificate named w1 (same name as the worker, other role)
// and a certificate without a role.
type testCerts struct{ dir string }

func newTestCerts(t testing.TB) testCerts {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, mtls.GenerateDevCA(dir, []mtls.Cert{
		{Name: "c1", Role: mtls.RoleReplica}, {Name: "c2", Role: mtls.RoleReplica}, {Name: "c3", Role: mtls.RoleReplica},
		{Name: "c9", Role: mtls.RoleReplica}, {Name: "w1", Role: mtls.RoleWorker}, {Name: "w2", Role: mtls.RoleWorker},
		{Name: "cli", Role: mtls.RoleClient}, {Name: "ops", Role: mtls.RoleAdmin}, {Name: "gw", Role: mtls.RoleGateway},
		{Name: "a", Role: mtls.RolePeer}, {Name: "b", Role: mtls.RolePeer},
	}, time.Hour))
	// A client certificate that carries the worker's name: the role, not the
	// name, must decide.
	sub := filepath.Join(dir, "as-w1")
	require.NoError(t, os.MkdirAll(sub, 0o700))
	for _, f := range []string{"ca.pem", "ca-key.pem"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(sub, f), b, 0o600))
	}
	require.NoError(t, mtls.IssueCerts(sub, []mtls.Cert{{Name: "w1", Role: mtls.RoleClient}}, nil, time.Hour))
	issueNoRole(t, dir, "norole")
	return testCerts{dir: dir}
}

// issueNoRole writes NAME.pem/NAME-key.pem signed by the CA in dir, with no
// Organizational Unit (no role).
func issueNoRole(t testing.TB, dir, name string) {
	t.Helper()
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	require.NoError(t, err)
	keyPEM, err := os.ReadFile(filepath.Join(dir, "ca-key.pem"))
	require.NoError(t, err)
	cb, _ := pem.Decode(caPEM)
	kb, _ := pem.Decode(keyPEM)
	ca, err := x509.ParseCertificate(cb.Bytes)
	require.NoError(t, err)
	caKey, err := x509.ParseECPrivateKey(kb.Bytes)
	require.NoError(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(4242),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}, ca, &key.PublicKey, caKey)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+"-key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600))
}

// tls returns the mutual-TLS config of name ("as-w1" is the client-role
// certificate named w1).
func (c testCerts) tls(t testing.TB, name string) *tls.Config {
	t.Helper()
	f := mtls.FilesFor(c.dir, name)
	if name == "as-w1" {
		f = mtls.FilesFor(filepath.Join(c.dir, "as-w1"), "w1")
	}
	conf, err := f.Load()
	require.NoError(t, err)
	return conf
}

// tlsOpts makes a cluster whose replicas run mutual TLS with Authz and
// whose own clients hold the admin certificate.
func (c testCerts) tlsOpts(t testing.TB) clusterOpts {
	return clusterOpts{
		tls:       func(id string) *tls.Config { return c.tls(t, id) },
		clientTLS: c.tls(t, "ops"),
		server:    func(sc *Config) { sc.FailureTimeout = time.Hour }, // no background proposals
	}
}

// dial returns a raw Coordinator connection to addr with conf (nil:
// plaintext), closed at cleanup.
func dial(t testing.TB, addr string, conf *tls.Config) *grpc.ClientConn {
	t.Helper()
	creds := insecure.NewCredentials()
	if conf != nil {
		creds = credentials.NewTLS(conf)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return conn
}

// ledgerState is what a refused call must leave as it was: the replica's
// log and everything the ledger shows.
type ledgerState struct {
	LastLog, Applied uint64
	Runs             []fsm.RunStatus
	Workers          []fsm.WorkerStatus
	Members          []fsm.Member
	Raft             []raftnode.Member
}

func stateOf(t testing.TB, r *replica) ledgerState {
	t.Helper()
	st := r.node.Stats()
	m, err := r.node.Members()
	require.NoError(t, err)
	return ledgerState{LastLog: st.LastLogIndex, Applied: st.AppliedIndex, Runs: r.ledger.Runs(),
		Workers: r.ledger.Workers(), Members: r.ledger.Members(), Raft: m}
}

// rpcCall is one RPC of the matrix, made as caller (the certificate's name,
// or "" for plaintext).
type rpcCall struct {
	name string
	call func(ctx context.Context, conn *grpc.ClientConn, caller string) error
}

// matrixCalls are every RPC a replica serves, each with a request that,
// once authorized, fails validation or is harmless: the matrix is about
// who gets past authorization, not what the call then does.
func matrixCalls() []rpcCall {
	co := func(conn *grpc.ClientConn) rolloutv1.CoordinatorClient { return rolloutv1.NewCoordinatorClient(conn) }
	const w = "w1" // worker-self acts as w1; everyone else impersonates it
	return []rpcCall{
		{"SubmitItems", func(ctx context.Context, c *grpc.ClientConn, _ string) error {
			_, err := co(c).SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "matrix", Spec: &rolloutv1.RunSpec{Total: 1},
				Items: []*rolloutv1.SubmitItem{{Id: testID("matrix-00000"), Payload: []byte(`{"prompt":"m"}`)}}})
			return err
		}},
		{"SubmitRanges", func(ctx context.Context, c *grpc.ClientConn, _ string) error {
			_, err := co(c).SubmitRanges(ctx, &rolloutv1.SubmitRangesRequest{Run: "matrix-ranges", Spec: &rolloutv1.RunSpec{Store: "file:///srv/store"},
				Ranges: []*rolloutv1.InputRange{{Index: 0, Count: 2, PayloadRef: &rolloutv1.DataRef{Object: "runs/matrix-ranges/inputs/c", Length: 20}}}})
			return err
		}},
		{"RunStatus", func(ctx context.Context, c *grpc.ClientConn, _ string) error {
			_, err := co(c).RunStatus(ctx, &rolloutv1.RunStatusRequest{Run: "matrix"})
			return err
		}},
		{"Results", func(ctx context.Context, c *grpc.ClientConn, _ string) error {
			_, err := co(c).Results(ctx, &rolloutv1.ResultsRequest{Run: "matrix", Limit: 10})
			return err
		}},
		{"Events", func(ctx context.Context, c *grpc.ClientConn, _ string) error {
			_, err := co(c).Events(ctx, &rolloutv1.EventsRequest{Limit: 1})
			return err
		}},
		{"Claim", func(ctx context.Context, c *grpc.ClientConn, _ string) error {
			_, err := co(c).Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: w, MaxItems: 0})
			return err
		}},
		{"Report", func(ctx context.Context, c *grpc.ClientConn, _ string) error {
			_, err := co(c).Report(ctx, &rolloutv1.ReportRequest{WorkerId: w, Reports: []*rolloutv1.ItemReport{{
				Run: "matrix", Id: testID("matrix-00000"), Attempt: 1, Outcome: rolloutv1.Outcome_OUTCOME_DONE, Result: []byte(`{"completion":"forged"}`)}}})
			return err
		}},
		{"ReportRange", func(ctx context.Context, c *grpc.ClientConn, _ string) error {
			_, err := co(c).ReportRange(ctx, &rolloutv1.ReportRangeRequest{WorkerId: w, Reports: []*rolloutv1.RangeReport{{
				Run: "matrix-ranges", Id: []byte("R1"), Attempt: 1, Lo: 0, DoneTo: 1,
				ResultRef: &rolloutv1.DataRef{Object: "runs/matrix-ranges/results/forged", Length: 5, Blake3: make([]byte, 32)}}}})
			return err
		}},
		{"Heartbeat", func(ctx context.Context, c *grpc.ClientConn, _ string) error {
			_, err := co(c).Heartbeat(ctx, &rolloutv1.HeartbeatRequest{WorkerId: w})
			return err
		}},
		{"Deregister", func(ctx context.Context, c *grpc.ClientConn, _ string) error {
			_, err := co(c).Deregister(ctx, &rolloutv1.DeregisterRequest{WorkerId: w})
			return err
		}},
		{"OwnedItems", func(ctx context.Context, c *grpc.ClientConn, _ string) error {
			_, err := co(c).OwnedItems(ctx, &rolloutv1.OwnedItemsRequest{WorkerId: w})
			return err
		}},
		{"Steal", func(ctx context.Context, c *grpc.ClientConn, _ string) error {
			_, err := co(c).Steal(ctx, &rolloutv1.StealRequest{WorkerId: w})
			return err
		}},
		{"Register", func(ctx context.Context, c *grpc.ClientConn, _ string) error {
			_, err := co(c).Register(ctx, &rolloutv1.RegisterRequest{WorkerId: w})
			return err
		}},
		{"SetTenant", func(ctx context.Context, c *grpc.ClientConn, _ string) error {
			// No name: an authorized call stops at validation.
			_, err := co(c).SetTenant(ctx, &rolloutv1.SetTenantRequest{})
			return err
		}},
		{"ListTenants", func(ctx context.Context, c *grpc.ClientConn, _ string) error {
			_, err := co(c).ListTenants(ctx, &rolloutv1.ListTenantsRequest{})
			return err
		}},
		{"PeerRuns", func(ctx context.Context, c *grpc.ClientConn, _ string) error {
			_, err := co(c).PeerRuns(ctx, &rolloutv1.PeerRunsRequest{})
			return err
		}},
		{"PeerInfo", func(ctx context.Context, c *grpc.ClientConn, _ string) error {
			_, err := co(c).PeerInfo(ctx, &rolloutv1.PeerInfoRequest{})
			return err
		}},
		{"Cluster", func(ctx context.Context, c *grpc.ClientConn, _ string) error {
			_, err := co(c).Cluster(ctx, &rolloutv1.ClusterRequest{})
			return err
		}},
		{"Join", func(ctx context.Context, c *grpc.ClientConn, caller string) error {
			// A replica joins as itself; the addresses are left out so that
			// an authorized join stops at validation.
			id := "c9"
			if caller != "" {
				id = caller
			}
			_, err := co(c).Join(ctx, &rolloutv1.JoinRequest{Id: id})
			return err
		}},
		{"RemoveMember", func(ctx context.Context, c *grpc.ClientConn, _ string) error {
			_, err := co(c).RemoveMember(ctx, &rolloutv1.RemoveMemberRequest{})
			return err
		}},
		{"ReplicaInfo", func(ctx context.Context, c *grpc.ClientConn, _ string) error {
			_, err := co(c).ReplicaInfo(ctx, &rolloutv1.ReplicaInfoRequest{})
			return err
		}},
		{"EvictWorker", func(ctx context.Context, c *grpc.ClientConn, _ string) error {
			_, err := co(c).EvictWorker(ctx, &rolloutv1.EvictWorkerRequest{WorkerId: "nobody"})
			return err
		}},
		{"Renew", func(ctx context.Context, c *grpc.ClientConn, _ string) error {
			// No CSR: an authorized call stops at the handler (no CA key).
			_, err := co(c).Renew(ctx, &rolloutv1.RenewRequest{})
			return err
		}},
		{"CancelRun", func(ctx context.Context, c *grpc.ClientConn, _ string) error {
			// No run: an authorized call stops at validation.
			_, err := co(c).CancelRun(ctx, &rolloutv1.CancelRunRequest{})
			return err
		}},
		{"DeleteRun", func(ctx context.Context, c *grpc.ClientConn, _ string) error {
			_, err := co(c).DeleteRun(ctx, &rolloutv1.DeleteRunRequest{})
			return err
		}},
		{"RevokeCertificate", func(ctx context.Context, c *grpc.ClientConn, _ string) error {
			// Neither name nor serial: an authorized call stops at validation.
			_, err := co(c).RevokeCertificate(ctx, &rolloutv1.RevokeCertificateRequest{})
			return err
		}},
		{"Revocations", func(ctx context.Context, c *grpc.ClientConn, _ string) error {
			_, err := co(c).Revocations(ctx, &rolloutv1.RevocationsRequest{})
			return err
		}},
		{"Health", func(ctx context.Context, c *grpc.ClientConn, _ string) error {
			_, err := healthpb.NewHealthClient(c).Check(ctx, &healthpb.HealthCheckRequest{})
			return err
		}},
		{"Reflection", func(ctx context.Context, c *grpc.ClientConn, _ string) error {
			s, err := reflectionpb.NewServerReflectionClient(c).ServerReflectionInfo(ctx)
			if err != nil {
				return err
			}
			// A stream the server refused at once may end before the
			// request is sent: Send says io.EOF and Recv has the status.
			if err := s.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			_, err = s.Recv()
			return err
		}},
		{"Unknown", func(ctx context.Context, c *grpc.ClientConn, _ string) error {
			return c.Invoke(ctx, "/rollout.v1.Coordinator/Bogus", &emptypb.Empty{}, &emptypb.Empty{})
		}},
	}
}

// matrixRole is one row of the refusal matrix.
type matrixRole struct {
	name   string    // row name
	cert   string    // certificate file name; "" for plaintext
	caller string    // the name a replica uses in its own Join
	role   mtls.Role // the certificate's role; "" for none
	self   bool      // the caller acts as itself (worker_id, Join's id)
}

// allows reports whether the declared rules (rpcSpecs, the data Authz
// enforces) let role call rpc (a matrixCalls name): the matrix's expected
// cell, read from the declarations rather than copied by hand.
func (r matrixRole) allows(t *testing.T, table map[string]rpcSpec, rpc string) bool {
	t.Helper()
	if r.role == "" {
		return false // a certificate without a role authorizes nothing
	}
	switch rpc {
	case "Health", "Reflection":
		return true
	case "Unknown":
		return false
	}
	sp, ok := table["/"+rolloutv1.Coordinator_ServiceDesc.ServiceName+"/"+rpc]
	require.True(t, ok, "the matrix calls %s, which no rpcSpec declares", rpc)
	switch {
	case r.role == mtls.RolePeer && !slices.Contains(sp.Roles, mtls.RolePeer):
		// A peer reaches only runs under its prefix ("a/"), which no
		// matrix call names, and no method open to any role.
		return false
	case sp.ReplicaSelf && r.role == mtls.RoleReplica:
		return r.self
	case sp.AnyRole:
		return true
	case !slices.Contains(sp.Roles, r.role):
		return false
	case sp.WorkerSelf:
		return r.self
	}
	return true
}

// TestEveryRPCDeclared walks the Coordinator's service descriptor (the
// generated grpc.ServiceDesc and the proto's own descriptor) and fails
// naming any method with no rpcSpec (which Authz refuses: fail closed), any
// rpcSpec naming no method of the service, and any malformed or repeated
// declaration; the refusal matrix calls every method.
func TestEveryRPCDeclared(t *testing.T) {
	table, err := rpcTable(rpcSpecs())
	require.NoError(t, err)
	svc := rolloutv1.Coordinator_ServiceDesc
	methods := map[string]bool{}
	for _, m := range svc.Methods {
		methods["/"+svc.ServiceName+"/"+m.MethodName] = true
	}
	for _, m := range svc.Streams {
		methods["/"+svc.ServiceName+"/"+m.StreamName] = true
	}
	sd := rolloutv1.File_api_rollout_v1_rollout_proto.Services().ByName("Coordinator")
	require.NotNil(t, sd, "the proto declares the Coordinator service")
	require.Equal(t, len(methods), sd.Methods().Len(), "the grpc.ServiceDesc and the proto descriptor list the same methods")
	for i := range sd.Methods().Len() {
		full := "/" + string(sd.FullName()) + "/" + string(sd.Methods().Get(i).Name())
		require.True(t, methods[full], "proto method %s is missing from the ServiceDesc", full)
	}
	called := map[string]bool{}
	for _, c := range matrixCalls() {
		called["/"+svc.ServiceName+"/"+c.name] = true
	}
	var undeclared, unmatrixed []string
	for m := range methods {
		if _, ok := table[m]; !ok {
			undeclared = append(undeclared, m)
		}
		if !called[m] {
			unmatrixed = append(unmatrixed, m)
		}
	}
	slices.Sort(undeclared)
	slices.Sort(unmatrixed)
	require.Empty(t, undeclared, "these RPCs have no rpcSpec beside their handler (Authz refuses them all)")
	require.Empty(t, unmatrixed, "these RPCs are missing from matrixCalls (TestRefusalMatrix)")
	for m := range table {
		require.True(t, methods[m], "rpcSpec %s names no method of the Coordinator service", m)
	}

	_, err = rpcTable([]rpcSpec{adminOnly("/x/A"), adminOnly("/x/A")})
	require.ErrorIs(t, err, ErrDuplicateRPCSpec)
	_, err = rpcTable([]rpcSpec{{Method: "/x/A"}})
	require.ErrorIs(t, err, ErrBadRPCSpec)
	_, err = rpcTable([]rpcSpec{{Method: "/x/A", AnyRole: true, Roles: []mtls.Role{mtls.RoleAdmin}}})
	require.ErrorIs(t, err, ErrBadRPCSpec)
}

// TestUndeclaredRPCRefused: a Coordinator method missing from the table is
// refused for every role, the admin's included (fail closed), naming the
// method.
func TestUndeclaredRPCRefused(t *testing.T) {
	table, err := rpcTable(rpcSpecs())
	require.NoError(t, err)
	delete(table, rolloutv1.Coordinator_SetTenant_FullMethodName)
	for _, r := range []mtls.Role{mtls.RoleAdmin, mtls.RoleClient, mtls.RoleReplica, mtls.RoleWorker, mtls.RoleGateway} {
		err := authorizeIdentity(table, mtls.Identity{Name: "x", Role: r}, rolloutv1.Coordinator_SetTenant_FullMethodName, &rolloutv1.SetTenantRequest{})
		require.Equal(t, codes.PermissionDenied, status.Code(err), "%s: %v", r, err)
		require.Contains(t, status.Convert(err).Message(), "permission denied for "+rolloutv1.Coordinator_SetTenant_FullMethodName+": unknown method")
	}
}

// TestRefusalMatrix calls every RPC as every role over real gRPC on
// loopback TCP, against a mutual-TLS replica (Authz enforcing roles) and
// against a plaintext one (started insecure): each cell is either
// PermissionDenied, with the ledger and the raft log unchanged, or passes
// authorization (any other code), as the rpcSpecs declared beside the
// handlers say. A caller that does not speak the server's transport cannot
// reach it at all.
func TestRefusalMatrix(t *testing.T) {
	certs := newTestCerts(t)
	table, err := rpcTable(rpcSpecs())
	require.NoError(t, err)
	roles := []matrixRole{
		{name: "replica", cert: "c9", caller: "c9", role: mtls.RoleReplica, self: true},
		{name: "worker-self", cert: "w1", role: mtls.RoleWorker, self: true},
		{name: "worker-other", cert: "w2", role: mtls.RoleWorker},
		{name: "client", cert: "cli", role: mtls.RoleClient},
		{name: "client-named-as-worker", cert: "as-w1", role: mtls.RoleClient},
		{name: "admin", cert: "ops", role: mtls.RoleAdmin},
		{name: "gateway", cert: "gw", role: mtls.RoleGateway},
		{name: "no-role", cert: "norole"},
		{name: "plaintext", cert: ""},
		{name: "peer", cert: "a", role: mtls.RolePeer},
	}
	// The declarations must still say what they said when the matrix was
	// hand-written: a change of roles is a change of behaviour.
	require.True(t, roles[0].allows(t, table, "Join") && !roles[5].allows(t, table, "Claim") && roles[1].allows(t, table, "ReportRange") &&
		!roles[2].allows(t, table, "Heartbeat") && !roles[3].allows(t, table, "SetTenant") && roles[0].allows(t, table, "Events") &&
		!roles[0].allows(t, table, "Results") && !roles[6].allows(t, table, "EvictWorker") && roles[8].role == "" &&
		roles[0].allows(t, table, "ReplicaInfo") && !roles[5].allows(t, table, "ReplicaInfo") && !roles[3].allows(t, table, "ReplicaInfo") &&
		!roles[9].allows(t, table, "Cluster") && !roles[9].allows(t, table, "SubmitItems") && !roles[9].allows(t, table, "Renew"))

	for _, mode := range []string{"tls", "plaintext"} {
		t.Run(mode, func(t *testing.T) {
			opts := clusterOpts{server: func(sc *Config) { sc.FailureTimeout = time.Hour }}
			if mode == "tls" {
				opts = certs.tlsOpts(t)
			}
			c := newTestCluster(t, 1, opts)
			l, _ := c.waitLeader()
			for _, role := range roles {
				var conf *tls.Config
				if role.cert != "" {
					conf = certs.tls(t, role.cert)
				}
				conn := dial(t, l.grpcAddr, conf)
				reachable := (mode == "tls") == (role.cert != "")
				for _, rpc := range matrixCalls() {
					t.Run(role.name+"/"+rpc.name, func(t *testing.T) {
						ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
						defer cancel()
						before := stateOf(t, l)
						allowed := role.allows(t, table, rpc.name)
						err := rpc.call(ctx, conn, role.caller)
						code := status.Code(err)
						switch {
						case !reachable:
							require.Equal(t, codes.Unavailable, code, "a %s caller must not reach a %s replica: %v", role.name, mode, err)
							require.Equal(t, before, stateOf(t, l), "an unreachable call changed the ledger")
						case mode == "plaintext":
							// Insecure: no identity, everything is allowed
							// (an unknown method is simply unimplemented).
							require.NotEqual(t, codes.PermissionDenied, code, "%v", err)
						case allowed && (role.name == "client-named-as-worker" || role.name == "gateway") && code == codes.PermissionDenied:
							// Past authorization, the run is another
							// tenant's (cli created it; a gateway that
							// names no tenant acts as itself): the
							// ownership rule refuses, naming the owner
							// (tenant.go).
							require.Contains(t, status.Convert(err).Message(), `belongs to tenant "cli"`, "%v", err)
							require.Equal(t, before, stateOf(t, l), "a refused call changed the ledger")
						case allowed && role.role == mtls.RolePeer && rpc.name == "PeerRuns" && code == codes.PermissionDenied:
							// Past authorization, the handler holds a peer
							// to its own cluster's runs (the matrix names
							// cluster "matrix").
							require.Contains(t, status.Convert(err).Message(), "lists its own runs only", "%v", err)
							require.Equal(t, before, stateOf(t, l), "a refused call changed the ledger")
						case allowed:
							require.NotEqual(t, codes.PermissionDenied, code, "%s must pass authorization for %s: %v", role.name, rpc.name, err)
						default:
							require.Equal(t, codes.PermissionDenied, code, "%s must be refused %s: %v", role.name, rpc.name, err)
							require.Contains(t, status.Convert(err).Message(), "permission denied for /", "the reason names the method")
							require.Equal(t, before, stateOf(t, l), "a refused call changed the ledger")
						}
					})
				}
			}
		})
	}
}

// claimOne registers worker id and claims one item as it over conn, waiting
// until it gets one.
func claimOne(t *testing.T, conn *grpc.ClientConn, id string) *rolloutv1.Item {
	t.Helper()
	co := rolloutv1.NewCoordinatorClient(conn)
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	_, err := co.Register(rctx, &rolloutv1.RegisterRequest{WorkerId: id})
	require.NoError(t, err)
	var items []*rolloutv1.Item
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := co.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: id, MaxItems: 1, WaitMs: 500})
		if err != nil {
			t.Logf("claim: %v", err)
			return false
		}
		items = resp.GetItems()
		return len(items) == 1
	}, 20*time.Second, 50*time.Millisecond)
	return items[0]
}

// TestPlaintextClientCannotReachTLSReplica: a replica with TLS accepts no
// plaintext connection, so a plaintext client can neither read nor write.
func TestPlaintextClientCannotReachTLSReplica(t *testing.T) {
	certs := newTestCerts(t)
	c := newTestCluster(t, 1, certs.tlsOpts(t))
	l, _ := c.waitLeader()
	before := stateOf(t, l)
	co := rolloutv1.NewCoordinatorClient(dial(t, l.grpcAddr, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := co.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "r", Items: []*rolloutv1.SubmitItem{{Id: testID("r-00000001"), Payload: []byte(`{}`)}}})
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	_, err = co.Results(ctx, &rolloutv1.ResultsRequest{Run: "r", Limit: 1})
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	require.Equal(t, before, stateOf(t, l))
}

// TestClientCannotReportAsOwner: a client that read Results (the owner and
// attempt of a running item) cannot Report it DONE as the owner, neither
// with its own certificate nor with a client certificate that carries the
// owner's name; the real worker's report is then accepted.
func TestClientCannotReportAsOwner(t *testing.T) {
	certs := newTestCerts(t)
	c := newTestCluster(t, 1, certs.tlsOpts(t))
	l, _ := c.waitLeader()
	cli := rolloutv1.NewCoordinatorClient(dial(t, l.grpcAddr, certs.tls(t, "cli")))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := cli.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "r", Spec: &rolloutv1.RunSpec{Total: 1},
		Items: []*rolloutv1.SubmitItem{{Id: testID("r-00000001"), Payload: []byte(`{"prompt":"p"}`)}}})
	require.NoError(t, err)
	w1 := dial(t, l.grpcAddr, certs.tls(t, "w1"))
	it := claimOne(t, w1, "w1")

	res, err := cli.Results(ctx, &rolloutv1.ResultsRequest{Run: "r", Limit: 10})
	require.NoError(t, err)
	require.Len(t, res.GetItems(), 1)
	seen := res.GetItems()[0]
	require.Equal(t, "w1", seen.GetOwner())
	forged := &rolloutv1.ReportRequest{WorkerId: seen.GetOwner(), Reports: []*rolloutv1.ItemReport{{
		Run: "r", Id: seen.GetId(), Attempt: seen.GetAttempt(), Outcome: rolloutv1.Outcome_OUTCOME_DONE, Result: []byte(`{"completion":"forged"}`)}}}
	for _, as := range []string{"cli", "as-w1"} {
		before := stateOf(t, l)
		_, err = rolloutv1.NewCoordinatorClient(dial(t, l.grpcAddr, certs.tls(t, as))).Report(ctx, forged)
		require.Equal(t, codes.PermissionDenied, status.Code(err), "%s: %v", as, err)
		require.Contains(t, err.Error(), "needs role worker")
		require.Equal(t, before, stateOf(t, l), "%s: the forged report changed the ledger", as)
	}

	rr, err := rolloutv1.NewCoordinatorClient(w1).Report(ctx, &rolloutv1.ReportRequest{WorkerId: "w1", Reports: []*rolloutv1.ItemReport{{
		Run: "r", Id: it.GetId(), Attempt: it.GetAttempt(), Outcome: rolloutv1.Outcome_OUTCOME_DONE, Result: []byte(`{"completion":"real"}`)}}})
	require.NoError(t, err)
	require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_APPLIED, rr.GetResults()[0].GetStatus())
	res, err = cli.Results(ctx, &rolloutv1.ResultsRequest{Run: "r", Limit: 10})
	require.NoError(t, err)
	require.JSONEq(t, `{"completion":"real"}`, string(res.GetItems()[0].GetResult()))
}

// TestWorkerCannotDeregisterAnother: worker w2 cannot deregister w1 (nor
// report, heartbeat or steal as w1); w1 keeps its item.
func TestWorkerCannotDeregisterAnother(t *testing.T) {
	certs := newTestCerts(t)
	c := newTestCluster(t, 1, certs.tlsOpts(t))
	l, _ := c.waitLeader()
	c.submit("r", 1)
	w1 := dial(t, l.grpcAddr, certs.tls(t, "w1"))
	it := claimOne(t, w1, "w1")

	w2 := rolloutv1.NewCoordinatorClient(dial(t, l.grpcAddr, certs.tls(t, "w2")))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	before := stateOf(t, l)
	_, err := w2.Deregister(ctx, &rolloutv1.DeregisterRequest{WorkerId: "w1"})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	require.Contains(t, err.Error(), `may act only as itself, not as worker "w1"`)
	require.Equal(t, before, stateOf(t, l))

	owned, err := rolloutv1.NewCoordinatorClient(w1).OwnedItems(ctx, &rolloutv1.OwnedItemsRequest{WorkerId: "w1"})
	require.NoError(t, err)
	require.Len(t, owned.GetItems(), 1)
	require.Equal(t, it.GetId(), owned.GetItems()[0].GetId())
}

// TestMembershipNeedsAdmin: Join (naming a dead address, the wedge of the
// issue) and RemoveMember made with a worker or client certificate, a
// replica certificate joining another id, or plaintext, are refused, and
// the membership is unchanged.
func TestMembershipNeedsAdmin(t *testing.T) {
	certs := newTestCerts(t)
	c := newTestCluster(t, 3, certs.tlsOpts(t))
	l, _ := c.waitLeader()
	members, err := l.node.Members()
	require.NoError(t, err)
	require.Len(t, members, 3)
	dead := &rolloutv1.JoinRequest{Id: "c9", RaftAddr: "127.0.0.1:1", GrpcAddr: "127.0.0.1:2"}
	var victim string
	for _, r := range c.replicas() {
		if r != l {
			victim = r.id
		}
	}
	for _, as := range []string{"w1", "cli", "c2", ""} {
		t.Run(fmt.Sprintf("as %q", as), func(t *testing.T) {
			var conf *tls.Config
			if as != "" {
				conf = certs.tls(t, as)
			}
			co := rolloutv1.NewCoordinatorClient(dial(t, l.grpcAddr, conf))
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			before := stateOf(t, l)
			want := codes.PermissionDenied
			if as == "" {
				want = codes.Unavailable // cannot even connect
			}
			_, err := co.Join(ctx, dead)
			require.Equal(t, want, status.Code(err), "join: %v", err)
			_, err = co.RemoveMember(ctx, &rolloutv1.RemoveMemberRequest{Id: victim})
			require.Equal(t, want, status.Code(err), "remove: %v", err)
			require.Equal(t, before, stateOf(t, l), "membership changed")
		})
	}
	after, err := l.node.Members()
	require.NoError(t, err)
	require.Equal(t, members, after)
}

// TestAuthzRules checks the rule table directly, including the cases a
// real connection cannot produce (a plaintext call on a TLS replica).
func TestAuthzRules(t *testing.T) {
	tlsAuthz, insecureAuthz := NewAuthz(false), NewAuthz(true)
	for _, tc := range []struct {
		name   string
		a      *Authz
		ctx    context.Context
		method string
		req    any
		code   codes.Code
	}{
		{"insecure allows anything", insecureAuthz, context.Background(), rolloutv1.Coordinator_RemoveMember_FullMethodName, nil, codes.OK},
		{"plaintext on a TLS replica", tlsAuthz, context.Background(), rolloutv1.Coordinator_Cluster_FullMethodName, nil, codes.PermissionDenied},
		{"no role", tlsAuthz, peerCtxRole("x", ""), rolloutv1.Coordinator_Cluster_FullMethodName, nil, codes.PermissionDenied},
		{"worker self", tlsAuthz, peerCtxRole("w1", "worker"), rolloutv1.Coordinator_Claim_FullMethodName, &rolloutv1.ClaimRequest{WorkerId: "w1"}, codes.OK},
		{"worker reports ranges as itself", tlsAuthz, peerCtxRole("w1", "worker"), rolloutv1.Coordinator_ReportRange_FullMethodName, &rolloutv1.ReportRangeRequest{WorkerId: "w1"}, codes.OK},
		{"client reports ranges", tlsAuthz, peerCtxRole("cli", "client"), rolloutv1.Coordinator_ReportRange_FullMethodName, &rolloutv1.ReportRangeRequest{WorkerId: "w1"}, codes.PermissionDenied},
		{"client submits ranges", tlsAuthz, peerCtxRole("cli", "client"), rolloutv1.Coordinator_SubmitRanges_FullMethodName, &rolloutv1.SubmitRangesRequest{}, codes.OK},
		{"worker submits ranges", tlsAuthz, peerCtxRole("w1", "worker"), rolloutv1.Coordinator_SubmitRanges_FullMethodName, &rolloutv1.SubmitRangesRequest{}, codes.PermissionDenied},
		{"worker request without worker id", tlsAuthz, peerCtxRole("w1", "worker"), rolloutv1.Coordinator_Claim_FullMethodName, nil, codes.PermissionDenied},
		{"replica joins itself", tlsAuthz, peerCtxRole("c4", "replica"), rolloutv1.Coordinator_Join_FullMethodName, &rolloutv1.JoinRequest{Id: "c4"}, codes.OK},
		{"replica joins another", tlsAuthz, peerCtxRole("c4", "replica"), rolloutv1.Coordinator_Join_FullMethodName, &rolloutv1.JoinRequest{Id: "c5"}, codes.PermissionDenied},
		{"replica removes", tlsAuthz, peerCtxRole("c4", "replica"), rolloutv1.Coordinator_RemoveMember_FullMethodName, &rolloutv1.RemoveMemberRequest{Id: "c1"}, codes.PermissionDenied},
		{"health watch stream", tlsAuthz, peerCtxRole("w1", "worker"), healthpb.Health_Watch_FullMethodName, nil, codes.OK},
		{"unknown service", tlsAuthz, peerCtxRole("ops", "admin"), "/other.v1.Svc/Do", nil, codes.PermissionDenied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.a.Authorize(tc.ctx, tc.method, tc.req)
			require.Equal(t, tc.code, status.Code(err), "%v", err)
		})
	}
}

// TestAuthzTellsARevokedCaller: every call of a revoked certificate, even
// one its role allows, is PermissionDenied with the CERTIFICATE_REVOKED
// ErrorInfo naming the certificate and the ledger's record (who, when,
// why); another certificate is unaffected.
func TestAuthzTellsARevokedCaller(t *testing.T) {
	revs := mtls.NewRevocations(nil)
	at := time.Date(2026, 11, 28, 4, 0, 0, 0, time.UTC)
	revs.SetRecords([]mtls.Revocation{{Name: "w1", Role: "worker", By: "ops", Reason: "key leaked", At: at}})
	a := NewAuthz(false).WithRevocations(revs)
	err := a.Authorize(peerCtxRole("w1", "worker"), rolloutv1.Coordinator_Claim_FullMethodName, &rolloutv1.ClaimRequest{WorkerId: "w1"})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	rev, ok := rolloutv1.RevokedOf(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, rolloutv1.Revoked{Name: "w1", Role: "worker", Serial: rev.Serial, RevokedAt: at, By: "ops", Reason: "key leaked"}, rev)
	require.Contains(t, err.Error(), `the certificate "w1" (role worker`)
	require.Contains(t, err.Error(), `is revoked by ops at 2026-11-28T04:00:00Z: "key leaked"`)
	// Cluster too: a revoked identity is told on any call.
	_, ok = rolloutv1.RevokedOf(a.Authorize(peerCtxRole("w1", "worker"), rolloutv1.Coordinator_Cluster_FullMethodName, nil))
	require.True(t, ok)
	require.NoError(t, a.Authorize(peerCtxRole("w2", "worker"), rolloutv1.Coordinator_Claim_FullMethodName, &rolloutv1.ClaimRequest{WorkerId: "w2"}))
}
