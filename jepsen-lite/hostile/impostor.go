package hostile

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/internal/mtls"
)

// impostorTimeout bounds each client's attempt to use the impostor.
const impostorTimeout = 3 * time.Second

// Impostor is a gRPC server of the Coordinator service that answers like a
// leader with a forged run (42/42 done), presenting a certificate that is
// not a replica's; it counts every call that reaches it, to any service.
// The hostile nemesis and the end-to-end tests point clients at it.
type Impostor struct {
	rolloutv1.UnimplementedCoordinatorServer
	addr  string
	calls atomic.Int64
	g     *grpc.Server
}

// ServeImpostor serves an Impostor presenting cert on a loopback port until
// Stop.
func ServeImpostor(cert tls.Certificate) (*Impostor, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("hostile: impostor: %w", err)
	}
	s := &Impostor{addr: lis.Addr().String()}
	count := func() { s.calls.Add(1) }
	s.g = grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequestClientCert, MinVersion: tls.VersionTLS12})),
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			count()
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			count()
			return h(srv, ss)
		}),
		grpc.UnknownServiceHandler(func(any, grpc.ServerStream) error { count(); return errors.New("impostor") }))
	rolloutv1.RegisterCoordinatorServer(s.g, s)
	go func() { _ = s.g.Serve(lis) }()
	return s, nil
}

// Addr is the impostor's host:port.
func (s *Impostor) Addr() string { return s.addr }

// Calls counts the calls that reached the impostor so far.
func (s *Impostor) Calls() int64 { return s.calls.Load() }

// Stop stops serving and closes every connection.
func (s *Impostor) Stop() { s.g.Stop() }

func (s *Impostor) header() *rolloutv1.ReplyHeader {
	return &rolloutv1.ReplyHeader{Term: 1 << 40, LeaderId: "impostor", LeaderAddr: s.addr, ReplicaId: "impostor"}
}

// Cluster answers as the leader of a one-member cluster.
func (s *Impostor) Cluster(context.Context, *rolloutv1.ClusterRequest) (*rolloutv1.ClusterResponse, error) {
	return &rolloutv1.ClusterResponse{Header: s.header(), State: rolloutv1.ReplicaState_REPLICA_STATE_LEADER,
		Members: []*rolloutv1.Member{{Id: "impostor", GrpcAddr: s.addr, Suffrage: rolloutv1.Suffrage_SUFFRAGE_VOTER, Leader: true}}}, nil
}

// RunStatus answers a forged run, finished.
func (s *Impostor) RunStatus(_ context.Context, req *rolloutv1.RunStatusRequest) (*rolloutv1.RunStatusResponse, error) {
	return &rolloutv1.RunStatusResponse{Header: s.header(), Runs: []*rolloutv1.RunCounters{{Name: "forged" + req.GetRun(), Total: 42, Done: 42}}}, nil
}

// Register accepts any worker.
func (s *Impostor) Register(context.Context, *rolloutv1.RegisterRequest) (*rolloutv1.RegisterResponse, error) {
	return &rolloutv1.RegisterResponse{Header: s.header()}, nil
}

// impostor (ImpostorCoordinator) serves the Coordinator API on a loopback
// address with a certificate of the cluster's CA that is not a replica's
// (Config.Impostor's; a worker's certificate without it), and points the
// harness's own clients at it: the client, a worker and the admin, each
// through a coordclient of that one address (RunStatus, Register, Cluster).
// It is refused when no call reached the impostor and none was answered;
// answered otherwise.
func (n *Nemesis) impostor(ctx context.Context) result {
	cert, who, err := n.impostorCert()
	if err != nil {
		return result{got: Inconclusive, detail: "no impostor certificate: " + err.Error()}
	}
	srv, err := ServeImpostor(cert)
	if err != nil {
		return result{got: Inconclusive, detail: err.Error()}
	}
	defer srv.Stop()

	worker := n.pick(n.cfg.Workers)
	var answered, refusals []string
	for _, id := range []string{n.cfg.Client, worker, n.cfg.Admin} {
		conf, err := n.cfg.TLS(id)
		if err != nil {
			return result{got: Inconclusive, detail: err.Error()}
		}
		cfg := coordclient.DefaultConfig()
		cfg.Addrs, cfg.TLS, cfg.CallTimeout = []string{srv.addr}, conf, impostorTimeout
		cl, err := coordclient.New(cfg)
		if err != nil {
			return result{got: Inconclusive, detail: err.Error()}
		}
		cctx, cancel := context.WithTimeout(ctx, impostorTimeout)
		switch id {
		case worker:
			_, err = cl.Register(cctx, &rolloutv1.RegisterRequest{WorkerId: worker})
		case n.cfg.Client:
			_, err = cl.RunStatus(cctx, &rolloutv1.RunStatusRequest{Run: "forged"})
		default:
			_, err = cl.Cluster(cctx, srv.addr)
		}
		cancel()
		_ = cl.Close()
		if ctx.Err() != nil {
			return result{got: Inconclusive, detail: "the run ended"}
		}
		if err == nil {
			answered = append(answered, id)
			continue
		}
		refusals = append(refusals, fmt.Sprintf("%s: %s", id, impostorWhy(err)))
	}
	calls := srv.Calls()
	detail := fmt.Sprintf("an impostor at %s presenting %s; %d calls reached it; %s", srv.addr, who, calls, strings.Join(refusals, "; "))
	if len(answered) > 0 || calls > 0 {
		return result{got: Answered, detail: detail, changed: fmt.Sprintf("accepted by %s", strings.Join(answered, ", ")), as: strings.Join(answered, ",")}
	}
	return result{got: Refused, detail: detail, as: n.cfg.Client + "," + worker + "," + n.cfg.Admin}
}

// impostorCert returns the impostor's certificate and whose it is.
func (n *Nemesis) impostorCert() (tls.Certificate, string, error) {
	if n.cfg.Impostor != nil {
		return n.cfg.Impostor()
	}
	conf, err := n.cfg.TLS(n.cfg.Ghost)
	if err != nil {
		return tls.Certificate{}, "", err
	}
	if len(conf.Certificates) == 0 {
		return tls.Certificate{}, "", errors.New("the ghost's TLS config holds no certificate")
	}
	return conf.Certificates[0], n.cfg.Ghost + " (worker)", nil
}

// impostorWhy is the gist of a client's refusal of the impostor.
func impostorWhy(err error) string {
	if mtls.IsNotReplica(err) {
		return "refused: not a replica certificate"
	}
	msg := err.Error()
	if i := strings.LastIndex(msg, "desc = "); i >= 0 {
		msg = msg[i+len("desc = "):]
	}
	if len(msg) > 160 {
		msg = msg[:160] + "..."
	}
	return msg
}
