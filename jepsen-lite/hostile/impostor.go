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

// impostorServer is a gRPC server of the Coordinator service that answers
// like a leader with a forged run (42/42 done), presenting a certificate
// that is not a replica's; it counts every call that reaches it.
type impostorServer struct {
	rolloutv1.UnimplementedCoordinatorServer
	addr  string
	calls atomic.Int64
}

func (s *impostorServer) header() *rolloutv1.ReplyHeader {
	return &rolloutv1.ReplyHeader{Term: 1 << 40, LeaderId: "impostor", LeaderAddr: s.addr, ReplicaId: "impostor"}
}

func (s *impostorServer) Cluster(context.Context, *rolloutv1.ClusterRequest) (*rolloutv1.ClusterResponse, error) {
	return &rolloutv1.ClusterResponse{Header: s.header(), State: rolloutv1.ReplicaState_REPLICA_STATE_LEADER,
		Members: []*rolloutv1.Member{{Id: "impostor", GrpcAddr: s.addr, Suffrage: rolloutv1.Suffrage_SUFFRAGE_VOTER, Leader: true}}}, nil
}

func (s *impostorServer) RunStatus(context.Context, *rolloutv1.RunStatusRequest) (*rolloutv1.RunStatusResponse, error) {
	return &rolloutv1.RunStatusResponse{Header: s.header(), Runs: []*rolloutv1.RunCounters{{Name: "forged", Total: 42, Done: 42}}}, nil
}

func (s *impostorServer) Register(context.Context, *rolloutv1.RegisterRequest) (*rolloutv1.RegisterResponse, error) {
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
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return result{got: Inconclusive, detail: "listen: " + err.Error()}
	}
	srv := &impostorServer{addr: lis.Addr().String()}
	count := func() { srv.calls.Add(1) }
	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequestClientCert, MinVersion: tls.VersionTLS12})),
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			count()
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			count()
			return h(srv, ss)
		}))
	rolloutv1.RegisterCoordinatorServer(g, srv)
	go func() { _ = g.Serve(lis) }()
	defer g.Stop()

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
	calls := srv.calls.Load()
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
