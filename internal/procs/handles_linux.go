//go:build linux

package procs

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// WaitHandles waits up to timeout until process pid catches or ignores
// sig (its bit in SigCgt or SigIgn of /proc/PID/status). A freshly started
// process takes a moment (exec, the runtime's start, main) to install its
// handlers; a signal whose default action ends the process, such as the
// SIGHUP that asks a binary to reload, would kill it in that window. A
// process that is gone is ErrNotRunning.
func WaitHandles(pid int, sig syscall.Signal, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := handles(pid, sig)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: pid %d does not handle %v after %v", ErrSignalNotHandled, pid, sig, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func handles(pid int, sig syscall.Signal) (bool, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false, fmt.Errorf("%w: pid %d: %v", ErrNotRunning, pid, err)
	}
	bit := uint64(1) << (uint(sig) - 1)
	for _, line := range strings.Split(string(raw), "\n") {
		name, val, ok := strings.Cut(line, ":")
		if !ok || (name != "SigCgt" && name != "SigIgn") {
			continue
		}
		mask, err := strconv.ParseUint(strings.TrimSpace(val), 16, 64)
		if err != nil {
			return false, fmt.Errorf("procs: pid %d: %s: %v", pid, name, err)
		}
		if mask&bit != 0 {
			return true, nil
		}
	}
	return false, nil
}
