package s3server_test

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/jepsen-lite/s3server"
	"github.com/rollout/rollout/store"
)

// start starts a real versitygw, or skips saying why (fails under CI=true).
func start(t *testing.T) *s3server.Server {
	t.Helper()
	bin, err := s3server.Binary()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skipf("environment: %v (with CI=true this fails)", err)
	}
	dir := t.TempDir()
	for k, v := range s3server.Env(dir) {
		t.Setenv(k, v)
	}
	srv, err := s3server.Start(s3server.Config{Bin: bin, Dir: dir})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

// TestServerFaults: the server the store nemesis acts on serves the
// store's operations; killed it refuses them until restarted (with its
// objects), paused it answers nothing until resumed.
func TestServerFaults(t *testing.T) {
	srv := start(t)
	ctx := context.Background()
	opts := store.DefaultOptions()
	opts.Attempts, opts.Backoff, opts.MaxBackoff, opts.OpTimeout = 2, 10*time.Millisecond, 20*time.Millisecond, 500*time.Millisecond
	st, err := store.Open(ctx, srv.URL, opts)
	require.NoError(t, err)
	defer st.Close()
	require.NoError(t, st.Put(ctx, "runs/r/x", []byte("hello")))

	require.NoError(t, srv.Kill())
	require.False(t, srv.Running())
	_, err = st.ReadAll(ctx, "runs/r/x")
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.NoError(t, srv.Kill(), "killing a stopped server does nothing")
	require.NoError(t, srv.Restart())
	b, err := st.ReadAll(ctx, "runs/r/x")
	require.NoError(t, err)
	require.Equal(t, "hello", string(b), "the objects outlive a restart")

	require.NoError(t, srv.Pause())
	_, err = st.ReadAll(ctx, "runs/r/x")
	require.ErrorIs(t, err, store.ErrUnavailable, "a paused server answers nothing within the timeout")
	require.NoError(t, srv.Resume())
	b, err = st.ReadAll(ctx, "runs/r/x")
	require.NoError(t, err)
	require.Equal(t, "hello", string(b))
}

// TestRestartPortHeld: a restart whose port another process holds fails
// saying so; it does not take that process's listener for the server.
func TestRestartPortHeld(t *testing.T) {
	srv := start(t)
	require.NoError(t, srv.Kill())
	l, err := net.Listen("tcp", srv.Addr())
	require.NoError(t, err, "taking the killed server's port")
	defer l.Close()
	go func() { // accept like a server would, so that a dial succeeds
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	err = srv.Restart()
	require.ErrorIs(t, err, s3server.ErrStart)
	require.ErrorContains(t, err, "held by another process")
	require.False(t, srv.Running())
	require.NoError(t, l.Close())
	require.NoError(t, srv.Restart(), "the port free again, the server restarts")
	require.True(t, srv.Running())
}

func TestStartValidates(t *testing.T) {
	_, err := s3server.Start(s3server.Config{Dir: t.TempDir()})
	require.ErrorIs(t, err, s3server.ErrInvalidConfig)
	_, err = s3server.Start(s3server.Config{Bin: "/bin/false"})
	require.ErrorIs(t, err, s3server.ErrInvalidConfig)
	_, err = s3server.Start(s3server.Config{Bin: "/bin/false", Dir: t.TempDir(), StartTimeout: 5 * time.Second})
	require.ErrorIs(t, err, s3server.ErrStart)
	t.Setenv(s3server.BinaryEnv, "/nonexistent/versitygw")
	_, err = s3server.Binary()
	require.ErrorIs(t, err, s3server.ErrNoBinary)
}
