package mtls

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func TestLoadRejectsIncompleteAndBadFiles(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, GenerateDevCA(dir, []string{"w1"}, time.Hour))

	cfg, err := Files{}.Load()
	require.NoError(t, err)
	require.Nil(t, cfg, "no files means plaintext")

	_, err = Files{CA: filepath.Join(dir, "ca.pem")}.Load()
	require.ErrorIs(t, err, ErrIncompleteFlags)

	bad := filepath.Join(dir, "bad.pem")
	require.NoError(t, os.WriteFile(bad, []byte("not pem"), 0o600))
	f := FilesFor(dir, "w1")
	f.CA = bad
	_, err = f.Load()
	require.ErrorIs(t, err, ErrBadPEM)
	require.Contains(t, err.Error(), "bad.pem")

	require.ErrorIs(t, GenerateDevCA(dir, []string{"../x"}, time.Hour), ErrBadName)
}

// TestMutualTLSIdentity runs a real gRPC server and client over TCP with
// certificates from one dev CA and checks that the server sees the client's
// certificate name, and that a client without a certificate is refused.
func TestMutualTLSIdentity(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, GenerateDevCA(dir, []string{"c1", "w7"}, time.Hour))
	serverConf, err := FilesFor(dir, "c1").Load()
	require.NoError(t, err)
	clientConf, err := FilesFor(dir, "w7").Load()
	require.NoError(t, err)

	seen := make(chan string, 1)
	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(serverConf)),
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			id, err := PeerIdentity(ctx)
			if err == nil {
				seen <- id
			}
			return h(ctx, req)
		}))
	healthpb.RegisterHealthServer(g, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go g.Serve(lis)
	t.Cleanup(g.Stop)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(clientConf)))
	require.NoError(t, err)
	defer conn.Close()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	require.Equal(t, "w7", <-seen)

	// A client that trusts the CA but presents no certificate is refused.
	anon := &tls.Config{RootCAs: clientConf.RootCAs, MinVersion: tls.VersionTLS13}
	conn2, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(anon)))
	require.NoError(t, err)
	defer conn2.Close()
	_, err = healthpb.NewHealthClient(conn2).Check(ctx, &healthpb.HealthCheckRequest{})
	require.Error(t, err)

	_, err = PeerIdentity(context.Background())
	require.ErrorIs(t, err, ErrNoPeerIdentity)
}
