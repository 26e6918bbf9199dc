// Package procs supervises the child processes of a local cluster: the
// demo's and jepsen-lite's coordinator replicas and workers. It starts,
// signals, stops and waits for them, and nothing else; what the processes
// are is the caller's business.
//
// Every child runs in its own process group where the platform has them
// (a terminal's Ctrl-C reaches only the supervising process, which stops
// its children in order), and on Linux the kernel SIGKILLs it should the
// supervising process die without cleaning up (Pdeathsig). Each child's
// output goes to its own log file, which every start appends to, after a
// "==== TIME start: BIN ARGS" line. StopAll stops the children tier by
// tier, highest tier first (workers before the replicas they talk to), and
// waits for every one, so no child outlives the supervisor. A child that
// exits although nobody asked it to is reported by Unexpected.
package procs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

var (
	// ErrNotRunning means the process is not running.
	ErrNotRunning = errors.New("procs: process not running")
	// ErrRunning means the process is already running.
	ErrRunning = errors.New("procs: process already running")
	// ErrDuplicate means the supervisor already has a process of that name.
	ErrDuplicate = errors.New("procs: duplicate process name")
	// ErrInvalid names a bad argument.
	ErrInvalid = errors.New("procs: invalid argument")
	// ErrSignalNotHandled means a process did not catch or ignore a signal
	// whose default action would end it (Signal(SIGHUP)), so it was not sent.
	ErrSignalNotHandled = errors.New("procs: signal not handled by the process")
)

// killWait bounds waiting for a process after SIGKILL.
const killWait = 10 * time.Second

// Supervisor owns a set of named child processes. It is safe for
// concurrent use.
type Supervisor struct {
	logDir string

	mu    sync.Mutex
	procs []*Proc
}

// New returns a supervisor whose children log to logDir/NAME.log (the
// directory must exist).
func New(logDir string) *Supervisor { return &Supervisor{logDir: logDir} }

// Add registers a process slot named name in tier without starting it (see
// Proc.Start). Higher tiers stop first. A name already registered is
// ErrDuplicate.
func (s *Supervisor) Add(name string, tier int) (*Proc, error) {
	if name == "" || strings.ContainsAny(name, `/\`) {
		return nil, fmt.Errorf("%w: process name %q", ErrInvalid, name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.procs {
		if p.Name == name {
			return nil, fmt.Errorf("%w: %q", ErrDuplicate, name)
		}
	}
	p := &Proc{Name: name, LogPath: filepath.Join(s.logDir, name+".log"), tier: tier}
	s.procs = append(s.procs, p)
	return p, nil
}

// Start registers a process named name in tier and starts argv (the
// program, then its arguments).
func (s *Supervisor) Start(name string, tier int, argv ...string) (*Proc, error) {
	p, err := s.Add(name, tier)
	if err != nil {
		return nil, err
	}
	if err := p.Start(argv...); err != nil {
		return nil, err
	}
	return p, nil
}

// Procs returns the registered processes in the order they were added.
func (s *Supervisor) Procs() []*Proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.procs)
}

// Unexpected returns a process that exited although nobody stopped,
// killed or signalled it to (see Proc.Kill, Proc.Stop), or nil.
func (s *Supervisor) Unexpected() *Proc {
	for _, p := range s.Procs() {
		if p.unexpected() {
			return p
		}
	}
	return nil
}

// UnexpectedAll returns every process that exited although nobody
// stopped, killed or signalled it to, in the order they were added.
func (s *Supervisor) UnexpectedAll() []*Proc {
	var out []*Proc
	for _, p := range s.Procs() {
		if p.unexpected() {
			out = append(out, p)
		}
	}
	return out
}

// StopAll stops every process, highest tier first, the processes of one
// tier at once (see Proc.Stop), and waits for each. It returns an error
// naming every process it could not reap.
func (s *Supervisor) StopAll(grace time.Duration) error {
	procs := s.Procs()
	var tiers []int
	for _, p := range procs {
		if !slices.Contains(tiers, p.tier) {
			tiers = append(tiers, p.tier)
		}
	}
	slices.Sort(tiers)
	slices.Reverse(tiers)
	var errs []error
	for _, t := range tiers {
		var (
			wg sync.WaitGroup
			mu sync.Mutex
		)
		for _, p := range procs {
			if p.tier != t {
				continue
			}
			wg.Go(func() {
				if err := p.Stop(grace); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	}
	return errors.Join(errs...)
}

// Proc is one supervised process slot: it may be started, stopped and
// started again (each run appends to the same log).
type Proc struct {
	// Name identifies the process; LogPath is its log file.
	Name, LogPath string
	tier          int

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed once the current run has been waited for
	err  error         // the current run's Wait result, set before done closes
	// intended is set before the supervisor stops or kills the process, so
	// that its exit is not reported as unexpected; a start clears it.
	intended bool
	// header is the size of the log once the current run's start line was
	// written: the log grows past it only once the process itself writes.
	header int64
}

// Start runs argv (the program, then its arguments) as this process. A
// process that is still running is ErrRunning.
func (p *Proc) Start(argv ...string) error {
	if len(argv) == 0 {
		return fmt.Errorf("%w: %s: no command", ErrInvalid, p.Name)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !closed(p.done) {
		return fmt.Errorf("%w: %s", ErrRunning, p.Name)
	}
	logf, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("procs: log of %s: %w", p.Name, err)
	}
	defer logf.Close() // the child holds its own descriptor
	fmt.Fprintf(logf, "==== %s start: %s %s\n", time.Now().Format(time.RFC3339Nano), filepath.Base(argv[0]), strings.Join(argv[1:], " "))
	header := int64(-1)
	if st, err := logf.Stat(); err == nil {
		header = st.Size()
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("procs: start %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.err, p.intended, p.header = cmd, done, nil, false, header
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Running reports whether the process is alive (started and not yet
// reaped).
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !closed(p.done)
}

// Exited reports whether the process was started and has exited.
func (p *Proc) Exited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && closed(p.done)
}

// Err is the exit error of the last run (nil for a clean exit, or while it
// runs).
func (p *Proc) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// State describes the process for a report: "running", "not started" or
// "exited: REASON".
func (p *Proc) State() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.cmd == nil:
		return "not started"
	case !closed(p.done):
		return "running"
	case p.err == nil:
		return "exited: status 0"
	default:
		return "exited: " + p.err.Error()
	}
}

func (p *Proc) unexpected() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && closed(p.done) && !p.intended
}

// Pid returns the process id of the last run, or 0 when never started.
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Signal sends sig to the process's group. A process that is not running
// is ErrNotRunning. SIGSTOP returns only once the process is stopped
// (WaitStopped), so that it does nothing after Signal returns. SIGHUP, a
// binary's "reload", goes to the process alone (not to the programs it
// runs), and only once it catches or ignores it (WaitHandles, up to 10 s:
// a process just started would die of it); otherwise Signal returns
// ErrSignalNotHandled and sends nothing.
func (p *Proc) Signal(sig syscall.Signal) error {
	if sig == syscall.SIGHUP {
		return p.hup()
	}
	p.mu.Lock()
	err := p.signalLocked(sig)
	pid := 0
	if err == nil && sig == syscall.SIGSTOP {
		pid = p.cmd.Process.Pid
	}
	p.mu.Unlock()
	if pid != 0 {
		err = WaitStopped(pid, stopWait)
	}
	return err
}

// stopWait bounds how long Signal(SIGSTOP) waits for the process to stop.
const stopWait = 10 * time.Second

// hupWait bounds how long Signal(SIGHUP) waits for the process to handle it.
const hupWait = 10 * time.Second

func (p *Proc) hup() error {
	p.mu.Lock()
	if p.cmd == nil || closed(p.done) {
		p.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrNotRunning, p.Name)
	}
	proc, header := p.cmd.Process, p.header
	p.mu.Unlock()
	if err := WaitHandles(proc.Pid, syscall.SIGHUP, hupWait); err != nil {
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	// A Go program's runtime catches SIGHUP from its first instruction and
	// exits on it until main asks for it (signal.Notify), so the signal
	// masks alone cannot tell a Go child that is still initializing its
	// packages: it is past that once it has written to its log (every
	// rollout binary asks for SIGHUP, or ignores it, before it logs).
	if err := p.waitLogged(header, hupWait); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process != proc || closed(p.done) {
		return fmt.Errorf("%w: %s", ErrNotRunning, p.Name)
	}
	return proc.Signal(syscall.SIGHUP)
}

// waitLogged waits, up to timeout, until the log has grown past header (the
// current run has written something of its own); ErrSignalNotHandled when it
// has not. A header below zero (unknown) is not waited for.
func (p *Proc) waitLogged(header int64, timeout time.Duration) error {
	if header < 0 {
		return nil
	}
	deadline := time.Now().Add(timeout)
	for {
		if st, err := os.Stat(p.LogPath); err == nil && st.Size() > header {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %s has written nothing to its log after %v (still starting)", ErrSignalNotHandled, p.Name, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (p *Proc) signalLocked(sig syscall.Signal) error {
	if p.cmd == nil || closed(p.done) {
		return fmt.Errorf("%w: %s", ErrNotRunning, p.Name)
	}
	return signalGroup(p.cmd.Process, sig)
}

// Kill SIGKILLs the process's group and waits (bounded) until it is gone;
// the exit is intended. A process that is not running is ErrNotRunning.
func (p *Proc) Kill() error {
	p.mu.Lock()
	p.intended = true
	err := p.signalLocked(syscall.SIGKILL)
	p.mu.Unlock()
	if err != nil {
		if errors.Is(err, ErrNotRunning) {
			return fmt.Errorf("%w (%s)", err, p.State())
		}
		return fmt.Errorf("procs: killing %s: %w", p.Name, err)
	}
	if !p.waitDone(killWait) {
		return fmt.Errorf("procs: %s (pid %d) is still there %v after SIGKILL", p.Name, p.Pid(), killWait)
	}
	return nil
}

// Wait waits up to d for the process to exit and returns its exit error.
// A process never started is ErrNotRunning.
func (p *Proc) Wait(d time.Duration) error {
	p.mu.Lock()
	started := p.cmd != nil
	p.mu.Unlock()
	if !started {
		return fmt.Errorf("%w: %s", ErrNotRunning, p.Name)
	}
	if !p.waitDone(d) {
		return fmt.Errorf("procs: %s did not exit within %v", p.Name, d)
	}
	return p.Err()
}

func (p *Proc) waitDone(d time.Duration) bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// Stop asks the process to exit (SIGTERM, and SIGCONT in case it is
// paused), SIGKILLs it if it is still there after grace, and waits; the
// exit is intended. Stopping a process that is not running does nothing.
func (p *Proc) Stop(grace time.Duration) error {
	p.mu.Lock()
	p.intended = true
	if p.cmd == nil || closed(p.done) {
		p.mu.Unlock()
		return nil
	}
	_ = p.signalLocked(syscall.SIGTERM)
	_ = resume(p.cmd.Process)
	p.mu.Unlock()
	if p.waitDone(grace) {
		return nil
	}
	_ = p.Signal(syscall.SIGKILL)
	if !p.waitDone(killWait) {
		return fmt.Errorf("procs: %s (pid %d) did not exit after SIGKILL", p.Name, p.Pid())
	}
	return nil
}

// ExitLines is how many lines of its log an ExitReport quotes.
const ExitLines = 40

// ExitReport describes the process for a failure message once it has
// exited: its name, how it exited ("c3 exited: exit status 1") and the last
// n lines of its log, so that a failure says why a child died, not only
// that it did.
func (p *Proc) ExitReport(n int) string {
	return fmt.Sprintf("%s %s; the last %d lines of its log %s:\n%s", p.Name, p.State(), n, p.LogPath, p.TailLines(n))
}

// Tail returns the last n bytes of the log ("" when it cannot be read).
func (p *Proc) Tail(n int64) string {
	b, err := tailBytes(p.LogPath, n)
	if err != nil {
		return ""
	}
	return string(b)
}

// TailLines returns the last n lines of the log (read from its last 64
// KiB), or a note saying why it cannot be read.
func (p *Proc) TailLines(n int) string { return TailLines(p.LogPath, n) }

// TailLines returns the last n lines of the file at path (read from its
// last 64 KiB), or a note saying why it cannot be read.
func TailLines(path string, n int) string {
	b, err := tailBytes(path, 64<<10)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// tailBytes reads the last n bytes of path.
func tailBytes(path string, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if off := st.Size() - n; off > 0 {
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			return nil, err
		}
	}
	return io.ReadAll(io.LimitReader(f, n))
}
