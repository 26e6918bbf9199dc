package exec

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	osexec "os/exec"
	"runtime"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"

	"github.com/rollout/rollout/worker"
)

// Limits of a program's output handling.
const (
	// maxStderrLine bounds a logged line of standard error (the rest of a
	// longer line is dropped).
	maxStderrLine = 4096
	// maxTailLine bounds the last stderr line quoted in an exit reason.
	maxTailLine = 512
	// drainOutputs bounds the wait for a program's output pipes to end
	// after it exited (a process that left its group may hold them).
	drainOutputs = 2 * time.Second
	// answeredRing is how many answered ids a program remembers, to tell a
	// second answer from an answer for an id it was never given.
	answeredRing = 256
)

// child is one running program.
type child struct {
	b       *Backend
	slot    int
	pid     int
	tag     string // its tagEnv value, which whatever it starts inherits
	cmd     *osexec.Cmd
	started time.Time
	log     hclog.Logger

	stdin          *os.File // the write end of its standard input
	stdout, stderr *os.File // the read ends of its outputs
	lines          chan []byte
	inputOnce      sync.Once
	inputClosed    chan struct{}
	stdoutDone     chan struct{}
	stderrDone     chan struct{}
	exited         chan struct{} // closed once it is gone and its items failed

	// Guarded by b.mu.
	pending  map[string]*call
	answered ring
	gone     bool
	killErr  error // why it was killed; its items fail with it
	answers  int   // results it gave
	replies  int   // answers of any kind: it has started once it gave one

	tailMu   sync.Mutex
	lastLine string // its last non-blank line of standard error
}

func (c *child) name() string {
	return "proc " + strconv.Itoa(c.slot) + " (pid " + strconv.Itoa(c.pid) + ")"
}

// tagEnv names the variable in each program's environment that tells the
// processes it starts (they inherit it) as its, whatever their process
// group: the backend's random tag, the slot and a count.
const tagEnv = "ROLLOUT_EXEC_TAG"

// env is the environment of slot's program tagged tag.
func (b *Backend) env(slot int, tag string) []string {
	env := append(os.Environ(), b.cfg.Env...)
	env = append(env, "ROLLOUT_WORKER_ID="+b.cfg.WorkerID, "ROLLOUT_PROC="+strconv.Itoa(slot), tagEnv+"="+tag)
	if len(b.cfg.GPUs) > 0 {
		env = append(env, "CUDA_VISIBLE_DEVICES="+b.cfg.GPUs[slot%len(b.cfg.GPUs)])
	}
	return env
}

// start starts slot's program and its I/O goroutines and puts it in the
// slot. After Close it starts nothing and returns ErrClosed.
func (b *Backend) start(slot int) (*child, error) {
	var pipes []*os.File
	closeAll := func() {
		for _, f := range pipes {
			_ = f.Close()
		}
	}
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			pipes = append(pipes, r, w)
		}
		return r, w, err
	}
	inR, inW, err := pipe()
	if err != nil {
		return nil, fmt.Errorf("exec: pipe: %w", err)
	}
	outR, outW, err := pipe()
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("exec: pipe: %w", err)
	}
	errR, errW, err := pipe()
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("exec: pipe: %w", err)
	}
	b.mu.Lock()
	b.spawned++
	tag := b.tag + "-" + strconv.Itoa(slot) + "-" + strconv.FormatUint(b.spawned, 10)
	b.mu.Unlock()
	cmd := osexec.Command(b.cfg.Command[0], b.cfg.Command[1:]...)
	cmd.Dir = b.cfg.Dir
	cmd.Env = b.env(slot, tag)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	cmd.SysProcAttr = sysProcAttr()
	err = b.reap.spawn(tag, func() (int, error) {
		if err := b.spawn.start(cmd); err != nil {
			return 0, err
		}
		return cmd.Process.Pid, nil
	})
	if err != nil {
		closeAll()
		if errors.Is(err, ErrClosed) {
			return nil, err
		}
		return nil, fmt.Errorf("exec: starting %q (proc %d): %w", b.cfg.Command[0], slot, err)
	}
	// The child holds its own ends now.
	_, _, _ = inR.Close(), outW.Close(), errW.Close()
	c := &child{
		b: b, slot: slot, pid: cmd.Process.Pid, tag: tag, cmd: cmd, started: time.Now(),
		stdin: inW, stdout: outR, stderr: errR,
		lines:       make(chan []byte, b.cfg.Inflight),
		inputClosed: make(chan struct{}),
		stdoutDone:  make(chan struct{}),
		stderrDone:  make(chan struct{}),
		exited:      make(chan struct{}),
		pending:     make(map[string]*call, b.cfg.Inflight),
		answered:    newRing(answeredRing),
	}
	c.log = b.log.Named("proc"+strconv.Itoa(slot)).With("pid", c.pid)
	go c.writeLoop()
	go c.readLoop()
	go c.stderrLoop()
	go c.waitLoop()

	b.mu.Lock()
	b.stats.Started++
	if b.closed {
		b.mu.Unlock()
		c.signal(killSignal)
		<-c.exited
		return nil, ErrClosed
	}
	b.slots[slot] = c
	b.broadcastLocked()
	b.mu.Unlock()
	c.log.Debug("program started")
	return c, nil
}

// closeInput ends the program's standard input (it should then exit).
func (c *child) closeInput() { c.inputOnce.Do(func() { close(c.inputClosed) }) }

// writeLoop writes the queued request lines to the program's standard
// input until the input is closed or the program is gone. A failed write
// (the program exited) ends it; waitLoop fails the items.
func (c *child) writeLoop() {
	defer c.stdin.Close()
	for {
		select {
		case line := <-c.lines:
			if _, err := c.stdin.Write(line); err != nil {
				return // it exited: waitLoop says so
			}
		case <-c.inputClosed:
			return
		case <-c.exited:
			return
		}
	}
}

// readLoop reads the program's answers until its standard output ends or
// it breaks the protocol.
func (c *child) readLoop() {
	defer close(c.stdoutDone)
	limit := c.b.cfg.MaxResultBytes + lineSlack
	r := bufio.NewReaderSize(c.stdout, limit)
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			c.protocolError(fmt.Errorf("a line over the limit of %d bytes", limit))
			return
		}
		if len(bytes.TrimSpace(line)) > 0 && err == nil {
			if !c.handle(bytes.TrimSuffix(line, []byte("\n"))) {
				return
			}
		}
		if len(bytes.TrimSpace(line)) > 0 && errors.Is(err, io.EOF) {
			// An unterminated last line: an answer written whole, or what
			// a program that died mid-write left (its exit says more than
			// a protocol error would).
			if _, perr := parseAnswer(line, c.b.cfg.MaxResultBytes); perr == nil {
				c.handle(line)
			} else {
				c.log.Warn("ignoring an unterminated last line of output", "line", quote(line))
			}
		}
		if err != nil {
			return
		}
	}
}

// protocolError kills the program for breaking the protocol; its items
// fail with ErrProtocol and what it wrote.
func (c *child) protocolError(what error) {
	c.b.mu.Lock()
	c.b.stats.ProtocolErrors++
	c.b.mu.Unlock()
	c.b.kill(c, fmt.Errorf("%w: %s wrote %v", ErrProtocol, c.name(), what))
}

// handle applies one answer line; it returns false when the line broke the
// protocol (the program is being killed).
func (c *child) handle(line []byte) bool {
	b := c.b
	a, err := parseAnswer(line, b.cfg.MaxResultBytes)
	if err != nil {
		c.protocolError(err)
		return false
	}
	b.mu.Lock()
	cl, ok := c.pending[a.id]
	if !ok {
		second := c.answered.has(a.id)
		b.mu.Unlock()
		if second {
			c.protocolError(fmt.Errorf("a second answer for id %q", a.id))
		} else {
			c.protocolError(fmt.Errorf("an answer for id %q, which it was not given", a.id))
		}
		return false
	}
	delete(c.pending, a.id)
	c.answered.add(a.id)
	c.replies++
	cl.timer.Stop()
	var o outcome
	if a.isErr {
		b.stats.Errors++
		if a.retryable {
			o.err = fmt.Errorf("%w (retryable): %s", ErrProgram, a.message)
		} else {
			// The program says retrying cannot help: the item goes Dead at
			// once with its reason.
			o.err = fmt.Errorf("%w (not retryable): %s: %w", ErrProgram, a.message, worker.ErrPermanent)
		}
	} else {
		b.stats.Answered++
		c.answers++
		if cl.openAI {
			o.result = recordableOpenAI(a.result)
		} else {
			o.result = recordable(a.result)
		}
	}
	b.broadcastLocked()
	b.mu.Unlock()
	cl.done <- o
	return true
}

// stderrLoop logs the program's standard error a line at a time and keeps
// its last non-blank line.
func (c *child) stderrLoop() {
	defer close(c.stderrDone)
	r := bufio.NewReaderSize(c.stderr, maxStderrLine)
	for {
		chunk, more, err := r.ReadLine()
		if len(chunk) > 0 || (err == nil && !more) {
			line := string(chunk)
			for more && err == nil {
				_, more, err = r.ReadLine() // drop the rest of a long line
			}
			if t := bytes.TrimSpace(chunk); len(t) > 0 {
				c.log.Info(line)
				c.tailMu.Lock()
				c.lastLine = cut(string(t), maxTailLine)
				c.tailMu.Unlock()
			}
		}
		if err != nil {
			return
		}
	}
}

// cut returns at most n bytes of s, on a character boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// waitLoop reaps the program, kills what is left of its process group,
// lets its outputs drain, and fails the items it still held.
func (c *child) waitLoop() {
	waitErr := c.cmd.Wait()
	c.b.reap.ended(c.pid)
	c.signal(killSignal) // no orphans: whatever it started goes with it
	if !c.b.closedNow() {
		// Also what left its group (Close ends those after a grace).
		c.b.reap.sweep(killSignal, c.tag)
	}
	t := time.NewTimer(drainOutputs)
	defer t.Stop()
	for _, done := range []chan struct{}{c.stdoutDone, c.stderrDone} {
		select {
		case <-done:
		case <-t.C:
			// Someone outside the group holds the pipes open.
			_, _ = c.stdout.Close(), c.stderr.Close()
			<-done
		}
	}
	_, _ = c.stdout.Close(), c.stderr.Close()
	state := "unknown state"
	if c.cmd.ProcessState != nil {
		state = c.cmd.ProcessState.String()
	} else if waitErr != nil {
		state = waitErr.Error()
	}
	c.tailMu.Lock()
	last := c.lastLine
	c.tailMu.Unlock()

	b := c.b
	b.mu.Lock()
	c.gone = true
	b.stats.Exited++
	held := len(c.pending)
	failErr := c.killErr
	switch {
	case failErr != nil:
	case b.closed:
		failErr = fmt.Errorf("%w: %s stopped (%s)", ErrClosed, c.name(), state)
	default:
		tail := "no standard error output"
		if last != "" {
			tail = "last stderr line: " + strconv.Quote(last)
		}
		failErr = fmt.Errorf("%w: %s exited (%s) holding %d item(s); %s", ErrExited, c.name(), state, held, tail)
	}
	calls := make([]*call, 0, held)
	for id, cl := range c.pending {
		calls = append(calls, cl)
		delete(c.pending, id)
	}
	if b.slots[c.slot] == c {
		b.slots[c.slot] = nil
	}
	b.broadcastLocked()
	b.mu.Unlock()
	for _, cl := range calls {
		cl.timer.Stop()
		cl.done <- outcome{err: failErr}
	}
	// Logged before exited is closed: Close returns after that.
	if held > 0 || (c.killErr == nil && !b.closedNow()) {
		c.log.Warn("program ended", "state", state, "held", held, "ran_for", time.Since(c.started).Round(time.Millisecond), "reason", failErr)
	} else {
		c.log.Debug("program ended", "state", state)
	}
	close(c.exited)
}

func (b *Backend) closedNow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// ring remembers the last n ids added.
type ring struct {
	ids  []string
	next int
	set  map[string]int // id -> how many times it is in ids
}

func newRing(n int) ring { return ring{ids: make([]string, n), set: make(map[string]int, n)} }

func (r *ring) add(id string) {
	if old := r.ids[r.next]; old != "" {
		if r.set[old]--; r.set[old] <= 0 {
			delete(r.set, old)
		}
	}
	r.ids[r.next] = id
	r.set[id]++
	r.next = (r.next + 1) % len(r.ids)
}

func (r *ring) has(id string) bool { return r.set[id] > 0 }

// spawner starts every program from one goroutine locked to its OS thread:
// on Linux a program's parent-death signal (SIGKILL) fires when the thread
// that started it ends, so that thread lives as long as the backend.
type spawner struct {
	reqs chan spawnReq
	quit chan struct{}
	done chan struct{}
	once sync.Once
}

type spawnReq struct {
	cmd *osexec.Cmd
	err chan error
}

func newSpawner() *spawner {
	s := &spawner{reqs: make(chan spawnReq), quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		// Never unlocked: the thread ends with the goroutine, after Close
		// has stopped every program.
		runtime.LockOSThread()
		defer close(s.done)
		for {
			select {
			case r := <-s.reqs:
				r.err <- r.cmd.Start()
			case <-s.quit:
				return
			}
		}
	}()
	return s
}

// start starts cmd on the spawner's thread; after stop it is ErrClosed.
func (s *spawner) start(cmd *osexec.Cmd) error {
	r := spawnReq{cmd: cmd, err: make(chan error, 1)}
	select {
	case s.reqs <- r:
		return <-r.err
	case <-s.done:
		return ErrClosed
	}
}

func (s *spawner) stop() {
	s.once.Do(func() { close(s.quit) })
	<-s.done
}
