package procs

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestChildDiesWithItsSupervisor: a supervisor SIGKILLed without any chance
// to clean up takes its children with it (Pdeathsig).
func TestChildDiesWithItsSupervisor(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(helperEnv+"_DIR", dir)
	s := New(t.TempDir())
	t.Cleanup(func() { _ = s.StopAll(time.Second) })
	parent := startHelper(t, s, "parent", "parent", 0)
	waitLog(t, parent, "grandchild pid ")
	var pid int
	_, err := fmt.Sscanf(parent.TailLines(1), "grandchild pid %d", &pid)
	require.NoError(t, err, "parent log: %s", parent.TailLines(5))
	require.NoError(t, syscall.Kill(pid, 0), "the grandchild runs")

	require.NoError(t, parent.Kill())
	require.Eventually(t, func() bool { return gone(pid) }, 20*time.Second, 10*time.Millisecond,
		"the grandchild (pid %d) outlived its supervisor", pid)
}

// gone reports whether pid no longer runs (reaped, or a zombie nobody has
// reaped yet).
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the parenthesised command name.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

// TestWaitStopped: a process spinning on a CPU is stopped, every thread
// of it, when WaitStopped returns after SIGSTOP; a gone process counts as
// stopped.
func TestWaitStopped(t *testing.T) {
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	require.NoError(t, WaitStopped(pid, 10*time.Second))
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(t, err)
	s := string(b)
	require.Contains(t, "Tt", string(s[strings.LastIndexByte(s, ')')+2]), "state after WaitStopped: %s", s)
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	_ = cmd.Wait()
	require.NoError(t, WaitStopped(pid, time.Second), "a process that is gone")
}

// childrenGetDefaultSIGHUP makes the processes the test starts begin
// with SIGHUP at its default (they would die of it) even when the test
// itself runs with SIGHUP ignored (under nohup, say), whose children would
// inherit the ignoring: a signal this process catches is reset to the
// default in a child at exec.
func childrenGetDefaultSIGHUP(t *testing.T) {
	t.Helper()
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGHUP)
	t.Cleanup(func() { signal.Stop(c) })
}

// TestWaitHandles: a process that neither catches nor ignores SIGHUP (it
// would die of it) is reported as not handling it; one that ignores it is.
func TestWaitHandles(t *testing.T) {
	childrenGetDefaultSIGHUP(t)
	plain := exec.Command("sleep", "60")
	require.NoError(t, plain.Start())
	defer func() { _ = plain.Process.Kill(); _ = plain.Wait() }()
	require.ErrorIs(t, WaitHandles(plain.Process.Pid, syscall.SIGHUP, 100*time.Millisecond), ErrSignalNotHandled)

	ignoring := exec.Command("sh", "-c", "trap '' HUP; exec sleep 60")
	require.NoError(t, ignoring.Start())
	defer func() { _ = ignoring.Process.Kill(); _ = ignoring.Wait() }()
	require.NoError(t, WaitHandles(ignoring.Process.Pid, syscall.SIGHUP, 10*time.Second))

	require.ErrorIs(t, WaitHandles(1<<30, syscall.SIGHUP, time.Second), ErrNotRunning)
}

// TestSignalHUPOnlyWhenHandled: Signal(SIGHUP) does not kill a process
// that would die of it (it says so and sends nothing), and reaches one that
// catches it.
func TestSignalHUPOnlyWhenHandled(t *testing.T) {
	childrenGetDefaultSIGHUP(t)
	s := New(t.TempDir())
	t.Cleanup(func() { _ = s.StopAll(time.Second) })
	plain, err := s.Start("plain", 0, "sleep", "60")
	require.NoError(t, err)
	start := time.Now()
	require.ErrorIs(t, plain.Signal(syscall.SIGHUP), ErrSignalNotHandled)
	require.GreaterOrEqual(t, time.Since(start), hupWait, "it waited for a handler first")
	require.True(t, plain.Running(), "a process that would die of SIGHUP got none")

	catcher, err := s.Start("catcher", 0, "sh", "-c", "trap 'echo reloaded' HUP; echo ready; while :; do sleep 0.05; done")
	require.NoError(t, err)
	require.NoError(t, catcher.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool { return strings.Contains(catcher.Tail(1000), "reloaded") }, 20*time.Second, 10*time.Millisecond)
	require.True(t, catcher.Running())
}

// TestSignalHUPWaitsForTheFirstLogLine: a Go program's runtime catches
// SIGHUP (and exits on it) before its main asks for it, so a process whose
// signal mask already says "handled" gets its SIGHUP only once it has
// written to its log: here, after "up", never before.
func TestSignalHUPWaitsForTheFirstLogLine(t *testing.T) {
	childrenGetDefaultSIGHUP(t)
	s := New(t.TempDir())
	t.Cleanup(func() { _ = s.StopAll(time.Second) })
	slow, err := s.Start("slow", 0, "sh", "-c", "trap 'echo reloaded' HUP; sleep 0.5; echo up; while :; do sleep 0.05; done")
	require.NoError(t, err)
	require.NoError(t, WaitHandles(slow.Pid(), syscall.SIGHUP, 10*time.Second), "the trap is set at once")
	require.NoError(t, slow.Signal(syscall.SIGHUP))
	require.Contains(t, slow.Tail(1000), "up", "the signal went out only once the process had logged")
	require.Eventually(t, func() bool { return strings.Contains(slow.Tail(1000), "reloaded") }, 20*time.Second, 10*time.Millisecond)
	require.True(t, slow.Running())
}
