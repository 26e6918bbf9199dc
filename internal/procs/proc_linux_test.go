package procs

import (
	"fmt"
	"os"
	"os/exec"
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
