//go:build linux

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/localcluster"
)

// flooderEnv, when set in the environment of this test binary, makes it a
// flooder instead of running the tests (see maybeFlooder). Its value is
// "FROM TO N [EVERY]": open N TCP connections from the address FROM to TO,
// then, with EVERY (a duration), one more every EVERY until stdin ends (at
// most keepMax more).
const flooderEnv = "ROLLOUT_E2E_FLOODER"

// ipBindAddressNoPort is Linux's IP_BIND_ADDRESS_NO_PORT (level
// IPPROTO_IP): a socket bound to an address with port 0 gets its port at
// connect time, unique per destination, instead of one from the shared
// ephemeral range at bind time. Without it a flood from one source
// address exhausts the ephemeral ports of every other client.
const ipBindAddressNoPort = 24

// dialReport is a flooder's first line on stdout, once it has dialed.
type dialReport struct {
	Attempted  int    `json:"attempted"`
	Connected  int    `json:"connected"`
	DialErrors int    `json:"dial_errors"`
	FirstError string `json:"first_error,omitempty"`
	// EMFILE counts dials that failed for want of a file in the flooder
	// (a test fault: each flooder must stay under its own limit).
	EMFILE int `json:"emfile"`
}

// probeReport answers each "probe" line on a flooder's stdin: how many of
// its connections the server has closed (EOF or reset) and how many are
// still open.
type probeReport struct {
	Closed int `json:"closed"`
	Open   int `json:"open"`
}

// maybeFlooder runs this process as a flooder when flooderEnv is set, and
// then exits; otherwise it returns at once. A flooder dials, reports a
// dialReport, answers "probe" lines with a probeReport, and holds every
// connection it opened (those the server closed too) until its stdin
// ends.
func maybeFlooder() {
	spec := os.Getenv(flooderEnv)
	if spec == "" {
		return
	}
	os.Exit(runFlooder(spec, os.Stdin, os.Stdout))
}

// keepMax bounds the connections a flooder dials after its first N (it
// holds them all, and must stay under its own open-file limit).
const keepMax = 10000

func runFlooder(spec string, in io.Reader, out io.Writer) int {
	f := strings.Fields(spec)
	if len(f) != 3 && len(f) != 4 {
		fmt.Fprintf(os.Stderr, "flooder: %s=%q: want FROM TO N [EVERY]\n", flooderEnv, spec)
		return 2
	}
	n, err := strconv.Atoi(f[2])
	if err != nil || n <= 0 {
		fmt.Fprintf(os.Stderr, "flooder: bad count %q\n", f[2])
		return 2
	}
	var every time.Duration
	if len(f) == 4 {
		if every, err = time.ParseDuration(f[3]); err != nil || every <= 0 {
			fmt.Fprintf(os.Stderr, "flooder: bad interval %q\n", f[3])
			return 2
		}
	}
	conns, rep := dialMany(f[0], f[1], n, 8)
	var mu sync.Mutex // guards conns once the keeper runs
	done := make(chan struct{})
	kept := make(chan struct{})
	go func() {
		defer close(kept)
		if every == 0 {
			return
		}
		t := time.NewTicker(every)
		defer t.Stop()
		for range keepMax {
			select {
			case <-done:
				return
			case <-t.C:
			}
			if more, _ := dialMany(f[0], f[1], 1, 1); len(more) > 0 {
				mu.Lock()
				conns = append(conns, more...)
				mu.Unlock()
			}
		}
	}()
	enc := json.NewEncoder(out)
	if err := enc.Encode(rep); err != nil {
		return 1
	}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		if sc.Text() == "probe" {
			mu.Lock()
			p := probe(conns)
			mu.Unlock()
			if err := enc.Encode(p); err != nil {
				return 1
			}
		}
	}
	close(done)
	<-kept
	for _, c := range conns {
		_ = c.Close()
	}
	return 0
}

// dialMany opens n connections from the address from to to, with
// parallel dialers, each socket bound with IP_BIND_ADDRESS_NO_PORT.
func dialMany(from, to string, n, parallel int) ([]*net.TCPConn, dialReport) {
	d := net.Dialer{
		LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)},
		Timeout:   30 * time.Second, // SYNs dropped by a full accept queue are retried after 1, 3, 7 s
		Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			if err := rc.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, ipBindAddressNoPort, 1)
			}); err != nil {
				return err
			}
			return serr
		},
	}
	var (
		mu    sync.Mutex
		conns = make([]*net.TCPConn, 0, n)
		rep   dialReport
		left  atomic.Int64
		wg    sync.WaitGroup
	)
	left.Store(int64(n))
	for range parallel {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				c, err := d.Dial("tcp", to)
				mu.Lock()
				rep.Attempted++
				if err != nil {
					rep.DialErrors++
					if rep.FirstError == "" {
						rep.FirstError = err.Error()
					}
					if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
						rep.EMFILE++
					}
				} else {
					conns = append(conns, c.(*net.TCPConn))
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	rep.Connected = len(conns)
	return conns, rep
}

// probe peeks at every connection without blocking: end of stream or an
// error other than EAGAIN means the server closed it.
func probe(conns []*net.TCPConn) probeReport {
	var r probeReport
	buf := make([]byte, 1)
	for _, c := range conns {
		rc, err := c.SyscallConn()
		if err != nil {
			r.Closed++
			continue
		}
		var n int
		var rerr error
		if err := rc.Control(func(fd uintptr) {
			n, _, rerr = syscall.Recvfrom(int(fd), buf, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		}); err != nil {
			r.Closed++
			continue
		}
		switch {
		case errors.Is(rerr, syscall.EAGAIN):
			r.Open++
		case rerr == nil && n > 0:
			r.Open++ // the server said something (it never does before a ClientHello)
		default:
			r.Closed++
		}
	}
	return r
}

// flooder is a running flooder child process.
type flooder struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines *bufio.Scanner
}

// startFlooder starts this test binary as a flooder of n connections from
// from to to (then one more every every, when every is not zero); it is
// stopped (stdin closed, then killed) at cleanup.
func startFlooder(t *testing.T, from, to string, n int, every time.Duration) *flooder {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run=^$")
	spec := fmt.Sprintf("%s %s %d", from, to, n)
	if every > 0 {
		spec += " " + every.String()
	}
	cmd.Env = append(os.Environ(), flooderEnv+"="+spec)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	f := &flooder{cmd: cmd, stdin: stdin, lines: bufio.NewScanner(stdout)}
	t.Cleanup(f.stop)
	return f
}

// stop ends the flooder: its connections close when it exits.
func (f *flooder) stop() {
	_ = f.stdin.Close()
	done := make(chan struct{})
	go func() { _ = f.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = f.cmd.Process.Kill()
		<-done
	}
}

// read decodes the flooder's next line into v, within timeout.
func (f *flooder) read(timeout time.Duration, v any) error {
	errc := make(chan error, 1)
	go func() {
		if !f.lines.Scan() {
			errc <- fmt.Errorf("flooder exited: %v", f.lines.Err())
			return
		}
		errc <- json.Unmarshal(f.lines.Bytes(), v)
	}()
	select {
	case err := <-errc:
		return err
	case <-time.After(timeout):
		return errors.New("flooder did not answer in time")
	}
}

// handshakeDeadline is the coordinator's default gRPC handshake deadline
// (server.Config.ConnectionTimeout): the flood's silent connections that
// the leader admits are closed after it.
const handshakeDeadline = 5 * time.Second

// probeFlooders asks every flooder what the server closed and sums the
// answers.
func probeFlooders(t *testing.T, fs []*flooder) probeReport {
	t.Helper()
	var sum probeReport
	for _, f := range fs {
		_, err := io.WriteString(f.stdin, "probe\n")
		require.NoError(t, err)
		var p probeReport
		require.NoError(t, f.read(30*time.Second, &p))
		sum.Open += p.Open
		sum.Closed += p.Closed
	}
	return sum
}

// eventsOfKind reads the cluster's event history and returns the events of
// kind.
func eventsOfKind(ctx context.Context, c *localcluster.Cluster, kind rolloutv1.EventKind) ([]*rolloutv1.Event, error) {
	client, err := c.Client()
	if err != nil {
		return nil, err
	}
	defer client.Close()
	resp, err := client.Events(ctx, &rolloutv1.EventsRequest{Limit: 1000})
	if err != nil {
		return nil, err
	}
	var out []*rolloutv1.Event
	for _, e := range resp.GetEvents() {
		if e.GetKind() == kind {
			out = append(out, e)
		}
	}
	return out, nil
}

// TestFloodBeyondOldFileLimitLeavesRunServed is issue 21's acceptance
// test: one address (127.0.0.2) opens and holds more TCP connections to
// the leader's gRPC port than a replica's whole open-file limit (20,000
// on these machines, where ~24,000 held connections used to take the
// leader's API away), spread over flooder processes that each stay under
// their own limit; meanwhile a client and a worker on 127.0.0.1 submit and
// complete a run through the same cluster. The leader refuses the flood
// past --max-conns-per-client at once (the flooders see the close), no
// replica exits or runs out of files, and the run finishes.
func TestFloodBeyondOldFileLimitLeavesRunServed(t *testing.T) {
	const (
		floodFrom    = "127.0.0.2"
		flooders     = 4
		perFlooder   = 6000 // 24,000 in all: more than the old limit, each flooder under its own
		perClient    = 100  // --max-conns-per-client (the default)
		items        = 40
		oldFileLimit = 20000
		eventEvery   = 2 * time.Second // --refused-event-interval (1 min by default)
	)
	if testing.Short() {
		t.Skip("environment: -short (make test-short): this test opens 24,000 connections")
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := startClusterWith(t, localcluster.Config{Replicas: 3, TLS: true, Metrics: true,
		CoordArgs: []string{"--max-conns-per-client", strconv.Itoa(perClient), "--refused-event-interval", eventEvery.String()}})
	leader, term, err := c.WaitLeader(ctx)
	require.NoError(t, err)
	formed := time.Since(start)

	// The flood: every flooder dials, reports, and holds what it opened.
	floodStart := time.Now()
	fs := make([]*flooder, flooders)
	for i := range fs {
		fs[i] = startFlooder(t, floodFrom, leader.GRPCAddr, perFlooder, 0)
	}
	var total dialReport
	for _, f := range fs {
		var rep dialReport
		require.NoError(t, f.read(60*time.Second, &rep))
		require.Zero(t, rep.EMFILE, "a flooder ran out of files (a fault of the test): %+v", rep)
		total.Attempted += rep.Attempted
		total.Connected += rep.Connected
		total.DialErrors += rep.DialErrors
		if total.FirstError == "" {
			total.FirstError = rep.FirstError
		}
	}
	floodTook := time.Since(floodStart)
	require.Greater(t, total.Attempted, oldFileLimit, "attempted from %s", floodFrom)
	require.Greater(t, total.Connected, oldFileLimit, "connected from %s (first dial error: %s)", floodFrom, total.FirstError)

	// The leader closes the flood past the per-client limit at accept
	// and counts it (reason per_ip). The perClient it admits sit in the
	// gRPC handshake deadline (5 s) and are then closed too, which lets
	// perClient more in while the flood is still queued: at most
	// perClient admissions per deadline since the flood began, and the
	// rest refused. Every socket the flooders opened is accounted for.
	var (
		refused   float64
		held      probeReport
		scrapeErr error
	)
	floodSettled := func() bool {
		var mfs map[string]*dto.MetricFamily
		if mfs, scrapeErr = scrape(t, "http://"+leader.MetricsAddr+"/metrics"); scrapeErr != nil {
			return false
		}
		refused = sample(mfs, "rollout_conns_refused_total", map[string]string{"listener": "grpc", "reason": "per_ip"})
		held = probeFlooders(t, fs)
		admitted := perClient * (2 + int(time.Since(floodStart)/handshakeDeadline))
		return held.Open+held.Closed == total.Connected && held.Open <= perClient && refused >= float64(total.Connected-admitted)
	}
	// (Polled on the test's goroutine: floodSettled uses require.)
	for deadline := time.Now().Add(30 * time.Second); !floodSettled() && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
	}
	require.True(t, floodSettled(), "the leader refused the flood past the per-client limit: connected %d, refused %.0f, flooders see %+v, scrape error %v",
		total.Connected, refused, held, scrapeErr)
	settleTook := time.Since(floodStart)

	// The flooded replica's API still answers a client on 127.0.0.1.
	require.Eventually(t, func() bool {
		for _, v := range c.Views(ctx) {
			if v.Replica == leader {
				return true
			}
		}
		return false
	}, 10*time.Second, 100*time.Millisecond, "the flooded replica %s does not answer Cluster", leader.ID)

	// While the flood is held: a worker and a client on 127.0.0.1 run a
	// batch through the cluster.
	runStart := time.Now()
	_, err = c.StartWorker("w1", "--backend", "mock", "--concurrency", "8")
	require.NoError(t, err)
	input, _ := writeInput(t, items)
	out, err := cli(t, c, "submit", "--input", input, "--run", "flooded")
	require.NoError(t, err, out)
	rc := waitDone(t, c, "flooded", items, 60*time.Second, nil)
	require.Equal(t, uint64(items), rc.GetDone())
	runTook := time.Since(runStart)

	// The flooders still hold their sockets; the server holds at most
	// the per-client limit's worth of them.
	after := probeFlooders(t, fs)
	require.Equal(t, total.Connected, after.Open+after.Closed, "the flooders held every socket through the run")
	require.LessOrEqual(t, after.Open, perClient, "the leader holds at most the per-client limit of the flood")

	// The leader recorded the flood in the event history: one summary per
	// listener per interval, naming the flooding address, never an event
	// per connection. (A replica that lost leadership during the flood
	// drops what it refused as a follower, so the counts may fall short of
	// the metric.)
	var refusedEvents []*rolloutv1.Event
	var evErr error
	require.Eventually(t, func() bool {
		refusedEvents, evErr = eventsOfKind(ctx, c, rolloutv1.EventKind_EVENT_KIND_CONNS_REFUSED)
		return evErr == nil && len(refusedEvents) > 0
	}, 30*time.Second, 200*time.Millisecond, "no conns-refused event (last error %v)", evErr)
	var evCount uint64
	for _, e := range refusedEvents {
		require.Contains(t, e.GetDetail(), "listener ")
		if strings.Contains(e.GetDetail(), "listener grpc") {
			evCount += e.GetCount()
			require.Contains(t, e.GetDetail(), "most from "+floodFrom, "the top source of the gRPC refusals")
		}
	}
	maxEvents := 3 * (int(time.Since(floodStart)/eventEvery) + 2) // three listeners
	require.LessOrEqual(t, len(refusedEvents), maxEvents, "at most one event per listener per interval")

	// Every replica is up, none ran out of files, and the leader did not
	// change (it was never starved).
	require.Nil(t, c.Unexpected(), "a process exited unexpectedly")
	for _, r := range c.Replicas {
		require.True(t, r.Running(), "replica %s", r.ID)
		log, err := os.ReadFile(r.LogPath)
		require.NoError(t, err)
		require.NotContains(t, strings.ToLower(string(log)), "too many open files", "replica %s", r.ID)
	}
	// Leadership may move (on 2 busy cores the flood's CPU can delay a
	// heartbeat); the run must finish either way. Report it.
	now, nowTerm, err := c.WaitLeader(ctx)
	require.NoError(t, err)

	t.Logf("flood from %s to leader %s: %d connections attempted by %d processes in %v, %d connected, %d dial errors (first: %q); "+
		"leader refused %.0f (rollout_conns_refused_total{listener=grpc,reason=per_ip}), settled %v after the flood began; after the run the flooders held %d sockets, %d of them still open at the server, %d closed by it; "+
		"run of %d items done in %v from 127.0.0.1; leader before %s (term %d), after %s (term %d); %d conns-refused events counting %d gRPC refusals (first: %q); cluster formed in %v; test %v",
		floodFrom, leader.ID, total.Attempted, flooders, floodTook.Round(time.Millisecond), total.Connected, total.DialErrors, total.FirstError,
		refused, settleTook.Round(time.Millisecond), after.Open+after.Closed, after.Open, after.Closed,
		items, runTook.Round(time.Millisecond), leader.ID, term, now.ID, nowTerm, len(refusedEvents), evCount, refusedEvents[0].GetDetail(),
		formed.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// TestLeaderStepsAsideFromAFlood: a leader whose gRPC port is full
// (--max-conns 64, held by a flood from 127.0.0.2 that keeps dialing, so
// that every newcomer is refused) for --step-aside-after hands leadership
// to another replica, records why and to whom in the event history, and
// the cluster goes on serving from the new leader.
func TestLeaderStepsAsideFromAFlood(t *testing.T) {
	const maxConns = 64
	if testing.Short() {
		t.Skip("environment: floods a replica")
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := startClusterWith(t, localcluster.Config{Replicas: 3, TLS: true,
		CoordArgs: []string{"--max-conns", strconv.Itoa(maxConns), "--max-conns-per-client", strconv.Itoa(4 * maxConns),
			"--step-aside-after", "2s", "--refused-event-interval", "1s"}})
	leader, term, err := c.WaitLeader(ctx)
	require.NoError(t, err)

	floodStart := time.Now()
	f := startFlooder(t, "127.0.0.2", leader.GRPCAddr, 2*maxConns, 10*time.Millisecond)
	var rep dialReport
	require.NoError(t, f.read(30*time.Second, &rep))
	require.Equal(t, 2*maxConns, rep.Connected, "first error %q", rep.FirstError)

	var next *localcluster.Replica
	var nextTerm uint64
	require.Eventually(t, func() bool {
		wctx, wcancel := context.WithTimeout(ctx, 3*time.Second)
		defer wcancel()
		next, nextTerm, err = c.WaitLeader(wctx)
		return err == nil && next != leader
	}, 30*time.Second, 200*time.Millisecond, "the flooded leader %s did not step aside", leader.ID)
	moved := time.Since(floodStart)
	require.Greater(t, nextTerm, term)
	require.Contains(t, leader.Tail(20000), "transferring leadership")

	var aside []*rolloutv1.Event
	require.Eventually(t, func() bool {
		aside, err = eventsOfKind(ctx, c, rolloutv1.EventKind_EVENT_KIND_LEADER_STEPPED_ASIDE)
		return err == nil && len(aside) > 0
	}, 20*time.Second, 200*time.Millisecond, "no leader-stepped-aside event (last error %v)", err)
	require.Equal(t, leader.ID, aside[0].GetMember())
	require.Contains(t, aside[0].GetDetail(), "refused every new connection")
	require.Contains(t, aside[0].GetDetail(), "handing leadership to c")

	// The cluster serves from the new leader while the flood goes on.
	input, _ := writeInput(t, 10)
	out, err := cli(t, c, "submit", "--input", input, "--run", "aside")
	require.NoError(t, err, out)
	rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
	defer rcancel()
	rc, err := runStatus(rctx, c, "aside")
	require.NoError(t, err)
	require.Equal(t, uint64(10), rc.GetTotal())
	require.Nil(t, c.Unexpected())
	t.Logf("leader %s (term %d) flooded with %d held connections from 127.0.0.2 plus one every 10ms (--max-conns %d, --step-aside-after 2s): "+
		"leadership moved to %s (term %d) %v after the flood began; event: %q; test %v",
		leader.ID, term, rep.Connected, maxConns, next.ID, nextTerm, moved.Round(time.Millisecond), aside[0].GetDetail(), time.Since(start).Round(time.Millisecond))
}
