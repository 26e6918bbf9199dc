package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// child is one process started by a supervisor.
type child struct {
	name    string
	tier    int // higher tiers stop first
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has been waited for
	err     error         // Wait's result; read only after done
	// intended is set before the supervisor signals the child, so that its
	// exit is not reported as unexpected.
	intended atomic.Bool
}

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// pid is the child's process id.
func (c *child) pid() int { return c.cmd.Process.Pid }

// supervisor starts children with their output in logDir/NAME.log, each in
// its own process group, and stops every one of them on stopAll. It is safe
// for concurrent use.
type supervisor struct {
	logDir string

	mu       sync.Mutex
	children []*child
}

func newSupervisor(logDir string) *supervisor { return &supervisor{logDir: logDir} }

// start runs bin with args as child name.
func (s *supervisor) start(name string, tier int, bin string, args ...string) (*child, error) {
	logPath := filepath.Join(s.logDir, name+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("log of %s: %w", name, err)
	}
	fmt.Fprintf(logf, "==== %s: %s %s\n", time.Now().Format(time.RFC3339Nano), filepath.Base(bin), strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = childSysProcAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	logf.Close() // the child holds its own descriptor
	c := &child{name: name, tier: tier, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	s.mu.Lock()
	s.children = append(s.children, c)
	s.mu.Unlock()
	return c, nil
}

// kill SIGKILLs c's process group and waits (bounded) until it is gone.
func (s *supervisor) kill(c *child) error {
	c.intended.Store(true)
	if c.exited() {
		return fmt.Errorf("%s had already exited: %v", c.name, c.err)
	}
	if err := signalGroup(c.cmd.Process, syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing %s: %w", c.name, err)
	}
	select {
	case <-c.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) is still there 10s after SIGKILL", c.name, c.pid())
	}
}

// unexpected returns a child that exited although nobody asked it to, or nil.
func (s *supervisor) unexpected() *child {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.children {
		if c.exited() && !c.intended.Load() {
			return c
		}
	}
	return nil
}

// stopAll stops every child, highest tier first: SIGTERM to each process
// group of the tier, then SIGKILL to whatever is left after grace; it waits
// until each is gone. It returns the children it could not reap.
func (s *supervisor) stopAll(grace time.Duration) error {
	s.mu.Lock()
	children := append([]*child(nil), s.children...)
	s.mu.Unlock()
	tiers := map[int][]*child{}
	var order []int
	for _, c := range children {
		if _, ok := tiers[c.tier]; !ok {
			order = append(order, c.tier)
		}
		tiers[c.tier] = append(tiers[c.tier], c)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(order)))
	var errs []error
	for _, t := range order {
		errs = append(errs, stopGroup(tiers[t], grace))
	}
	return errors.Join(errs...)
}

// stopGroup SIGTERMs every live child of cs, SIGKILLs those still alive
// after grace, and waits for all of them.
func stopGroup(cs []*child, grace time.Duration) error {
	for _, c := range cs {
		c.intended.Store(true)
		if !c.exited() {
			_ = signalGroup(c.cmd.Process, syscall.SIGTERM)
		}
	}
	timeout := time.NewTimer(grace)
	defer timeout.Stop()
wait:
	for _, c := range cs {
		select {
		case <-c.done:
		case <-timeout.C:
			break wait
		}
	}
	var errs []error
	for _, c := range cs {
		if c.exited() {
			continue
		}
		_ = signalGroup(c.cmd.Process, syscall.SIGKILL)
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			errs = append(errs, fmt.Errorf("%s (pid %d) did not exit after SIGKILL", c.name, c.pid()))
		}
	}
	return errors.Join(errs...)
}

// tailFile returns the last n lines of the file at path (at most 64 KiB).
func tailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	defer f.Close()
	const maxTail = 64 << 10
	if fi, err := f.Stat(); err == nil && fi.Size() > maxTail {
		if _, err := f.Seek(-maxTail, io.SeekEnd); err != nil {
			return fmt.Sprintf("(cannot read %s: %v)", path, err)
		}
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
