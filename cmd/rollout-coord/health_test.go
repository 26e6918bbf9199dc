package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/raftnode"
)

type fakeReadiness struct {
	mu sync.Mutex
	r  raftnode.Readiness
}

func (f *fakeReadiness) Readiness() raftnode.Readiness { f.mu.Lock(); defer f.mu.Unlock(); return f.r }
func (f *fakeReadiness) set(r raftnode.Readiness)      { f.mu.Lock(); f.r = r; f.mu.Unlock() }

// follower is a ready follower of a 3-voter cluster led by c1.
func follower() raftnode.Readiness {
	return raftnode.Readiness{ID: "c2", State: "Follower", Member: true, Suffrage: "Voter", Members: 3, LeaderID: "c1", Term: 4, CommitIndex: 121, AppliedIndex: 120}
}

func get(t *testing.T, h http.Handler, method, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec.Code, rec.Body.String()
}

// TestHealthHandler: /livez and /readyz answer 200 or 503 with one line
// saying why; liveness never needs a leader and readiness never needs
// leadership; other paths are 404 and other methods 405.
func TestHealthHandler(t *testing.T) {
	node := &fakeReadiness{}
	h := healthHandler{node: node, maxLag: 10}
	for _, tc := range []struct {
		name        string
		r           func(*raftnode.Readiness)
		live, ready int
		liveWhy     string
		readyWhy    string
	}{
		{"follower", func(*raftnode.Readiness) {}, 200, 200, "live: c2, raft follower, term 4", "ready: voter c2, leader c1, applied 120 of commit 121"},
		{"leader", func(r *raftnode.Readiness) { r.ID, r.State = "c1", "Leader" }, 200, 200, "live: c1, raft leader", "ready: voter c1, leader c1,"},
		{"nonvoter", func(r *raftnode.Readiness) { r.Suffrage = "Nonvoter" }, 200, 200, "live:", "ready: nonvoter c2, leader c1"},
		{"no quorum", func(r *raftnode.Readiness) { r.State, r.LeaderID = "Candidate", "" }, 200, 503, "live: c2, raft candidate", "not ready: no known leader (c2 is candidate in term 4"},
		{"joining", func(r *raftnode.Readiness) { r.Member, r.Suffrage, r.Members, r.LeaderID = false, "", 0, "" }, 200, 503, "live:", "not ready: c2 is no member of a cluster yet (joining, or waiting to be bootstrapped)"},
		{"removed", func(r *raftnode.Readiness) { r.Member, r.Suffrage = false, "" }, 200, 503, "live:", "not ready: c2 is not in the configuration of 3 servers"},
		{"lagging", func(r *raftnode.Readiness) { r.AppliedIndex = 100 }, 200, 503, "live:", "not ready: c2 applied 100 of commit 121, 21 behind (--ready-max-lag 10)"},
		{"at the bound", func(r *raftnode.Readiness) { r.AppliedIndex = 111 }, 200, 200, "live:", "ready: voter c2, leader c1, applied 111 of commit 121"},
		{"shut down", func(r *raftnode.Readiness) {
			r.Stopped, r.StopReason, r.State, r.LeaderID = true, "shut down", "Shutdown", ""
		}, 503, 503, "not live: raft shut down", "not ready: raft shut down"},
		{"fatal", func(r *raftnode.Readiness) {
			r.Stopped, r.StopReason = true, "stopped: this replica cannot apply its log (fatal apply)"
		}, 503, 503, "not live: raft stopped: this replica cannot apply its log", "not ready: raft stopped"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := follower()
			tc.r(&r)
			node.set(r)
			code, body := get(t, h, http.MethodGet, "/livez")
			require.Equal(t, tc.live, code, body)
			require.True(t, strings.HasPrefix(body, tc.liveWhy), "%q", body)
			require.Equal(t, 1, strings.Count(body, "\n"), "one line: %q", body)
			code, body = get(t, h, http.MethodGet, "/readyz")
			require.Equal(t, tc.ready, code, body)
			require.True(t, strings.HasPrefix(body, tc.readyWhy), "%q", body)
			require.Equal(t, 1, strings.Count(body, "\n"), "one line: %q", body)
		})
	}

	node.set(follower())
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	require.Equal(t, "text/plain; charset=utf-8", rec.Header().Get("Content-Type"))
	require.Equal(t, "no-store", rec.Header().Get("Cache-Control"))

	code, body := get(t, h, http.MethodHead, "/readyz")
	require.Equal(t, 200, code)
	require.Empty(t, body, "HEAD has no body")

	for _, path := range []string{"/", "/healthz", "/livez/", "/readyz/x", "/metrics"} {
		code, body := get(t, h, http.MethodGet, path)
		require.Equal(t, http.StatusNotFound, code, path)
		require.Contains(t, body, "GET /livez and GET /readyz")
	}
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, "PATCH"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(m, "/readyz", strings.NewReader("x")))
		require.Equal(t, http.StatusMethodNotAllowed, rec.Code, m)
		require.Equal(t, "GET, HEAD", rec.Header().Get("Allow"))
		require.Contains(t, rec.Body.String(), "method not allowed: "+m)
	}
}

// TestHealthFlags: bad --health-addr, --ready-max-lag and --raft-multiplier
// values are refused naming the flag; the defaults are 1000 and 1.
func TestHealthFlags(t *testing.T) {
	parse := func(args ...string) (*options, error) {
		o := &options{id: "c1", data: t.TempDir(), raftAddr: "127.0.0.1:0", grpcAddr: "127.0.0.1:0", insecure: true}
		fs := pflag.NewFlagSet("rollout-coord", pflag.ContinueOnError)
		fs.SetOutput(io.Discard)
		o.health.addFlags(fs)
		addMultiplierFlag(fs, &o.raftMultiplier)
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		return o, o.validate()
	}
	o, err := parse()
	require.NoError(t, err)
	require.EqualValues(t, 1000, o.health.lag())
	require.Equal(t, 1, o.raftMultiplier.get())
	require.Empty(t, o.health.addr, "off by default")
	require.NoError(t, (&options{id: "c1", data: "d", raftAddr: "127.0.0.1:0", grpcAddr: "127.0.0.1:0", insecure: true}).validate(),
		"zero values are the defaults")

	for _, ok := range []string{"127.0.0.1:8558", ":8558", "0.0.0.0:0", "[::1]:9000", "localhost:1"} {
		_, err := parse("--health-addr", ok)
		require.NoError(t, err, ok)
	}
	for _, bad := range []string{"8558", "127.0.0.1", "127.0.0.1:http", "127.0.0.1:70000", "127.0.0.1:-1"} {
		_, err := parse("--health-addr", bad)
		require.ErrorContains(t, err, "--health-addr", bad)
	}
	for _, bad := range []string{"0", "-1", "x"} {
		_, err := parse("--ready-max-lag", bad)
		require.ErrorContains(t, err, `invalid argument "`+bad+`" for "--ready-max-lag" flag`)
		require.ErrorContains(t, err, "must be a positive integer")
	}
	o, err = parse("--ready-max-lag", "5")
	require.NoError(t, err)
	require.EqualValues(t, 5, o.health.lag())

	for _, bad := range []string{"0", "-2", "11", "100", "1.5", "x"} {
		_, err := parse("--raft-multiplier", bad)
		require.ErrorContains(t, err, `for "--raft-multiplier" flag`, bad)
		require.ErrorContains(t, err, "to 10", bad)
	}
	for _, m := range []int{1, 5, 10} {
		o, err := parse("--raft-multiplier", strconv.Itoa(m))
		require.NoError(t, err)
		require.Equal(t, m, o.raftMultiplier.get())
	}
	o.raftMultiplier = 11 // set past the flag: validate still refuses it
	require.ErrorContains(t, o.validate(), "--raft-multiplier 11: must be an integer from 1 (the default timings) to 10")
}

// TestRaftTimings: the multiplier scales the --raft-*-timeout values,
// explicit or default, and raftnode's commit timeout; 1 keeps them.
func TestRaftTimings(t *testing.T) {
	def := raftnode.DefaultConfig()
	o := &options{heartbeatTimeout: def.HeartbeatTimeout, electionTimeout: def.ElectionTimeout, leaseTimeout: def.LeaderLeaseTimeout}
	rc := raftnode.DefaultConfig()
	require.NoError(t, raftTimings(&rc, o, hclog.NewNullLogger()))
	require.Equal(t, def.Timings(), rc.Timings(), "multiplier 1 keeps today's timings")

	o.heartbeatTimeout, o.electionTimeout, o.raftMultiplier = 500*time.Millisecond, time.Second, 3
	rc = raftnode.DefaultConfig()
	require.NoError(t, raftTimings(&rc, o, hclog.NewNullLogger()))
	require.Equal(t, raftnode.Timings{HeartbeatTimeout: 1500 * time.Millisecond, ElectionTimeout: 3 * time.Second,
		LeaderLeaseTimeout: 3 * def.LeaderLeaseTimeout, CommitTimeout: 3 * def.CommitTimeout}, rc.Timings())

	o.raftMultiplier = 11
	rc = raftnode.DefaultConfig()
	require.ErrorIs(t, raftTimings(&rc, o, hclog.NewNullLogger()), raftnode.ErrInvalidConfig)
	require.Equal(t, def.CommitTimeout, rc.CommitTimeout)
}

// TestHealthServer: the listener serves plaintext HTTP and holds at most
// its own connection limit: connections past it are closed at once while
// a probe after they go still succeeds.
func TestHealthServer(t *testing.T) {
	node := &fakeReadiness{}
	node.set(follower())
	lim := healthLimits(0, nil, nil)
	lim.Total = 2
	probeLis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := probeLis.Addr().String()
	probeLis.Close()
	stop, err := startHealth(healthOptions{addr: addr, maxLag: 10}, node, lim, hclog.NewNullLogger())
	require.NoError(t, err)
	defer stop()

	p := &probeOptions{addr: addr, timeout: 5 * time.Second}
	line, err := p.run(context.Background())
	require.NoError(t, err)
	require.Equal(t, "ready: voter c2, leader c1, applied 120 of commit 121", line)

	// A client that never finishes its request headers is closed (the
	// header deadline holds past its first bytes).
	slow, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	_, err = slow.Write([]byte("GET /readyz HTTP/1.1\r\nHost: x\r\n"))
	require.NoError(t, err)
	require.NoError(t, slow.SetReadDeadline(time.Now().Add(20*time.Second)))
	began := time.Now()
	_, err = slow.Read(make([]byte, 1))
	require.True(t, errors.Is(err, io.EOF) || isReset(err), "closed, not timed out: %v", err)
	require.Less(t, time.Since(began), 15*time.Second)
	slow.Close()

	// Two idle connections fill it; a third is closed at once.
	var held []net.Conn
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		held = append(held, c)
	}
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return false
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
		return errors.Is(err, io.EOF) || isReset(err)
	}, 10*time.Second, 20*time.Millisecond, "a connection past the limit is closed")
	for _, c := range held {
		c.Close()
	}
	require.Eventually(t, func() bool { _, err := p.run(context.Background()); return err == nil }, 10*time.Second, 20*time.Millisecond)

	_, err = startHealth(healthOptions{addr: addr, maxLag: 10}, node, lim, hclog.NewNullLogger())
	require.ErrorContains(t, err, "listen on --health-addr "+addr)
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}

// TestProbe: exit status 0 only for a 200; the reason line is printed
// either way; an unreachable endpoint and bad flags are clear errors.
func TestProbe(t *testing.T) {
	node := &fakeReadiness{}
	node.set(follower())
	srv := httptest.NewServer(healthHandler{node: node, maxLag: 10})
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	_, port, _ := net.SplitHostPort(addr)

	run := func(args ...string) (string, error) {
		cmd := probeCmd()
		var out strings.Builder
		cmd.SetOut(&out)
		cmd.SetErr(io.Discard)
		cmd.SetArgs(args)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		err := cmd.ExecuteContext(context.Background())
		return out.String(), err
	}
	out, err := run("--health-addr", addr)
	require.NoError(t, err)
	require.Equal(t, "ready: voter c2, leader c1, applied 120 of commit 121\n", out)
	out, err = run("--health-addr", ":"+port, "--live") // the replica's own flag value, no host
	require.NoError(t, err)
	require.Contains(t, out, "live: c2")

	r := follower()
	r.LeaderID = ""
	node.set(r)
	out, err = run("--health-addr", addr, "--ready")
	require.ErrorIs(t, err, errProbeFailed)
	require.ErrorContains(t, err, "/readyz answered 503 Service Unavailable")
	require.Contains(t, out, "not ready: no known leader")
	out, err = run("--health-addr", addr, "--live")
	require.NoError(t, err, "alive without a leader")
	require.Contains(t, out, "live: c2")

	srv.Close()
	_, err = run("--health-addr", addr, "--timeout", "1s")
	require.ErrorContains(t, err, "cannot reach the health endpoint http://"+addr+"/readyz")
	require.NotErrorIs(t, err, errProbeFailed)

	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "missing required flag --health-addr"},
		{[]string{"--health-addr", addr, "--live", "--ready"}, "mutually exclusive"},
		{[]string{"--health-addr", "8558"}, "--health-addr"},
		{[]string{"--health-addr", addr, "--timeout", "0s"}, "--timeout 0s must be positive"},
		{[]string{"--health-addr", addr, "extra"}, "unknown command"},
	} {
		_, err := run(tc.args...)
		require.ErrorContains(t, err, tc.want, tc.args)
	}
}
