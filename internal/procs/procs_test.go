//go:build unix

// The tests signal process groups, which only Unix systems have.

package procs

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// helperEnv makes the test binary act as a child process (see TestMain).
const helperEnv = "ROLLOUT_PROCS_TEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "sleep": // exits on SIGTERM, saying when
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM)
		fmt.Println("helper up")
		<-ch
		fmt.Printf("helper got SIGTERM at %d\n", time.Now().UnixNano())
		os.Exit(0)
	case "stubborn": // ignores SIGTERM
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("helper ignoring SIGTERM")
		time.Sleep(time.Hour)
	case "parent": // supervises a "sleep" child and waits to be killed
		s := New(os.Getenv(helperEnv + "_DIR"))
		os.Setenv(helperEnv, "sleep")
		p, err := s.Start("grandchild", 0, os.Args[0], "-test.run=^$")
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		fmt.Printf("grandchild pid %d\n", p.Pid())
		time.Sleep(time.Hour)
	case "exit3":
		fmt.Println("helper failing")
		os.Exit(3)
	case "chatty1": // prints 100 numbered lines, then exits 1
		for i := 1; i <= 100; i++ {
			fmt.Printf("chatty line %03d\n", i)
		}
		fmt.Fprintln(os.Stderr, "chatty: giving up on purpose")
		os.Exit(1)
	}
	os.Exit(2)
}

// startHelper starts the test binary as a supervised child in mode.
func startHelper(t *testing.T, s *Supervisor, name, mode string, tier int) *Proc {
	t.Helper()
	t.Setenv(helperEnv, mode)
	p, err := s.Start(name, tier, os.Args[0], "-test.run=^$")
	require.NoError(t, err)
	return p
}

// waitLog waits until p's log contains want.
func waitLog(t *testing.T, p *Proc, want string) {
	t.Helper()
	require.Eventually(t, func() bool { return strings.Contains(p.Tail(4096), want) },
		20*time.Second, 10*time.Millisecond, "%s never logged %q", p.Name, want)
}

// TestStopAllStopsEveryChildWorkersFirst: StopAll SIGTERMs, SIGKILLs what
// ignores SIGTERM after the grace, reaps everything, and stops a tier only
// once the higher tier is gone.
func TestStopAllStopsEveryChildWorkersFirst(t *testing.T) {
	s := New(t.TempDir())
	replica := startHelper(t, s, "replica", "sleep", 0)
	worker := startHelper(t, s, "worker", "stubborn", 1)
	waitLog(t, replica, "helper up")
	waitLog(t, worker, "ignoring SIGTERM")
	require.Nil(t, s.Unexpected())

	const grace = 500 * time.Millisecond
	start := time.Now()
	require.NoError(t, s.StopAll(grace))
	require.True(t, replica.Exited())
	require.True(t, worker.Exited())
	require.Less(t, time.Since(start), 15*time.Second)
	require.ErrorContains(t, worker.Err(), "killed", "the SIGTERM-ignoring child was SIGKILLed")
	require.Contains(t, worker.State(), "exited: signal: killed")
	require.Equal(t, "exited: status 0", replica.State())
	require.Nil(t, s.Unexpected(), "stopped children are not unexpected exits")

	var at int64
	_, err := fmt.Sscanf(replica.TailLines(1), "helper got SIGTERM at %d", &at)
	require.NoError(t, err, "replica log: %s", replica.TailLines(5))
	require.GreaterOrEqual(t, time.Unix(0, at).Sub(start), grace,
		"the replica (tier 0) was signalled before the worker (tier 1) was gone")
	// The log starts with the command line.
	require.Contains(t, replica.TailLines(10), "==== ")
	require.Contains(t, replica.TailLines(10), " start: "+filepath.Base(os.Args[0])+" -test.run=^$")
}

func TestKillRestartAndUnexpectedExit(t *testing.T) {
	s := New(t.TempDir())
	t.Cleanup(func() { _ = s.StopAll(time.Second) })
	victim := startHelper(t, s, "victim", "sleep", 0)
	pid := victim.Pid()
	require.NoError(t, victim.Kill())
	require.True(t, victim.Exited())
	require.Nil(t, s.Unexpected(), "a killed child is an intended exit")
	require.ErrorIs(t, victim.Kill(), ErrNotRunning, "killing twice says it is not running")
	require.ErrorIs(t, victim.Signal(syscall.SIGTERM), ErrNotRunning)
	require.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "the child was reaped")

	// A restart appends to the same log and is supervised again.
	t.Setenv(helperEnv, "exit3")
	require.NoError(t, victim.Start(os.Args[0], "-test.run=^$"))
	require.Eventually(t, func() bool { return s.Unexpected() == victim }, 20*time.Second, 10*time.Millisecond)
	require.ErrorContains(t, victim.Err(), "exit status 3")
	require.ErrorContains(t, victim.Wait(time.Second), "exit status 3")
	log := victim.Tail(1 << 20)
	require.Equal(t, 2, strings.Count(log, "==== "), "one header per start:\n%s", log)
	require.Contains(t, log, "helper failing")
}

func TestStartErrors(t *testing.T) {
	s := New(t.TempDir())
	t.Cleanup(func() { _ = s.StopAll(time.Second) })
	p := startHelper(t, s, "a", "sleep", 0)
	require.ErrorIs(t, p.Start(os.Args[0]), ErrRunning)
	_, err := s.Add("a", 1)
	require.ErrorIs(t, err, ErrDuplicate)
	for _, name := range []string{"", "../x", `a\b`} {
		_, err := s.Add(name, 0)
		require.ErrorIs(t, err, ErrInvalid, "name %q", name)
	}
	q, err := s.Add("idle", 0)
	require.NoError(t, err)
	require.ErrorIs(t, q.Start(), ErrInvalid)
	require.ErrorIs(t, q.Wait(time.Millisecond), ErrNotRunning)
	require.Equal(t, "not started", q.State())
	require.Zero(t, q.Pid())
	require.NoError(t, q.Stop(time.Millisecond), "stopping what never ran does nothing")
	_, err = s.Start("missing", 0, filepath.Join(t.TempDir(), "no-such-binary"))
	require.Error(t, err)
	require.Nil(t, s.Unexpected(), "a process that never started has not exited")
	require.Len(t, s.Procs(), 3)
}

func TestTailLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	var b strings.Builder
	for i := range 100 {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
	require.Equal(t, "line 97\nline 98\nline 99", TailLines(path, 3))
	require.Contains(t, TailLines(filepath.Join(t.TempDir(), "missing"), 3), "cannot read")
	p := &Proc{Name: "x", LogPath: path}
	require.Equal(t, "line 99\n", p.Tail(int64(len("line 99\n"))))
	require.Equal(t, b.String(), p.Tail(1<<20))
	require.Equal(t, "", (&Proc{LogPath: filepath.Join(t.TempDir(), "missing")}).Tail(10))
}

// TestExitReportQuotesTheLogTail: a child that prints and exits 1 is
// reported with its exit status and the last ExitLines lines of its log
// (standard error included), not the earlier ones.
func TestExitReportQuotesTheLogTail(t *testing.T) {
	s := New(t.TempDir())
	p := startHelper(t, s, "c3", "chatty1", 0)
	require.ErrorContains(t, p.Wait(20*time.Second), "exit status 1")
	require.Equal(t, p, s.Unexpected())
	rep := p.ExitReport(ExitLines)
	require.Contains(t, rep, "c3 exited: exit status 1")
	require.Contains(t, rep, p.LogPath)
	require.Contains(t, rep, "chatty: giving up on purpose")
	require.Contains(t, rep, "chatty line 100")
	require.Contains(t, rep, "chatty line 062", "the 40 last lines: 061..100 less the stderr line")
	require.NotContains(t, rep, "chatty line 061")
	require.NotContains(t, rep, "chatty line 001")
}
