// Package exec is the Backend that runs items on the user's own program:
// Procs long-lived child processes (any command: a Python script, a
// binary), each speaking a line protocol on its standard input and output.
//
// # Protocol
//
// The worker writes one JSON object a line to the program's standard input
// for each item:
//
//	{"id":"<hex of the sample id>","run":"<run name>","index":N,"payload":{...}}
//
// and the program writes one JSON object a line to its standard output for
// each item it was given, in any order:
//
//	{"id":"<the same hex>","result":{...}}
//	{"id":"<the same hex>","error":"what went wrong","retryable":true}
//
// "retryable" may be left out (true); other members are ignored, and so are
// blank lines. A program gets at most Inflight items
// at once; answers may come back in any order, matched by id. The program's
// standard error goes to the worker's log, a line at a time, under the
// logger's name exec.procN. When its standard input ends (EOF) the program
// should exit. The Python helper python/rollout_exec.py speaks this
// protocol for a plain function.
//
// Each program gets its own environment: the worker's, then Config.Env, then
// ROLLOUT_WORKER_ID (Config.WorkerID), ROLLOUT_PROC (0..Procs-1) and, with
// Config.GPUs, CUDA_VISIBLE_DEVICES (program i gets GPUs[i % len(GPUs)]). It
// runs in Config.Dir and in a process group of its own.
//
// # Failures
//
// The worker runtime keeps owning claims, heartbeats, reports, the epoch
// guard, steals and drains; a program only computes. What can go wrong with
// it fails the items concerned (the runtime reports them Failed with the
// error's text as the reason, and the ledger retries them up to the run's
// failure limit) and never records a result:
//
//   - an error answer: ErrProgram, with the program's message and whether it
//     said the error is retryable;
//   - the program exits or crashes: every item it held fails with
//     ErrExited, naming the exit status and its last line of standard
//     error; the program is started again after a backoff (RestartBackoff,
//     doubling up to MaxRestartBackoff, back to the start once a program
//     answered an item);
//   - no answer within Timeout: the program's process group is killed
//     (SIGKILL) and restarted, and its items fail with ErrTimeout. A program
//     that has not answered anything yet is still starting (loading a
//     model, say): its items' time runs from StartTimeout after its start,
//     if that is later;
//   - a protocol error (ErrProtocol): a line that is not a JSON object of
//     the form above, an answer for an id the program was not given or
//     already answered, a result over MaxResultBytes or a line over the
//     line limit. The stream can no longer be trusted: the program is
//     killed and restarted, and every item it held fails with the reason.
//     (An unterminated last line before the program exits is only logged:
//     its items fail with its exit, which says more.)
//
// An item whose context ends (a drain, or the ledger gave it to another
// worker) returns at once; its answer, when it comes, is dropped, and it
// occupies its program's slot until then (or until Timeout kills it).
//
// An answer with "retryable": false fails the item for good
// (worker.ErrPermanent): it goes Dead at once with the program's reason,
// whatever the run's failure limit; a retryable error is retried by the
// ledger's rules.
//
// # Results
//
// The result reported for an item is the program's result object when it
// has a "completion" member (the form of the built-in backends), and
// {"completion": <the object>} otherwise, so that `rollout results` shows
// the program's answer under "completion" in each output line.
//
// For an item whose payload is an OpenAI Batch request line (any url
// batch.ParseRequest accepts: chat completions, completions, embeddings) the
// result is a batch.OpenAIResult, which `rollout results` writes as the
// line's "response": the program's result as it is when it already has that
// shape ({"status_code": N, "request_id": …, "body": {…}}), otherwise
// {"status_code": 200, "request_id": "", "body": <the program's result>}: the
// program answers with the response body its url would have returned.
//
// # Stopping
//
// Close (call it after the worker's Run returned: the drain has nacked what
// was in flight) closes each program's standard input and sends its process
// group SIGTERM, then SIGKILL after StopGrace, and waits for them. On Linux a
// program is also killed (SIGKILL) when the worker dies without closing.
//
// On Linux the worker process is the child subreaper of its programs'
// descendants (PR_SET_CHILD_SUBREAPER, set by New): a process a program
// started that left its process group (setsid, a double fork) is found
// (walking /proc: its ppid chain, its program's group, or the tag
// ROLLOUT_EXEC_TAG in its environment, which every program gets) and gets
// the same SIGTERM, StopGrace and SIGKILL from Close, and a SIGKILL when its
// program exits; one that ends while the worker runs is reaped (no zombie
// stays). Elsewhere such a process is its own to end.
package exec

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/hashicorp/go-hclog"

	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/worker"
)

var (
	// ErrInvalidConfig is wrapped by every Config.Validate error.
	ErrInvalidConfig = errors.New("exec: invalid config")
	// ErrBadPayload fails an item whose payload is not JSON (it is never
	// sent to a program).
	ErrBadPayload = errors.New("exec: bad payload")
	// ErrProgram fails an item the program answered with an error.
	ErrProgram = errors.New("exec: the program answered an error")
	// ErrExited fails the items a program held when it exited or crashed.
	ErrExited = errors.New("exec: the program exited")
	// ErrTimeout fails the items a program held when it was killed because
	// one of them had no answer within Config.Timeout.
	ErrTimeout = errors.New("exec: no answer in time")
	// ErrProtocol fails the items a program held when it broke the line
	// protocol (it is killed and restarted).
	ErrProtocol = errors.New("exec: protocol error")
	// ErrClosed is returned by Run after Close, and fails the items still
	// held by programs when Close stops them.
	ErrClosed = errors.New("exec: backend closed")
	// ErrUnsupported is returned by New on a system without process groups.
	ErrUnsupported = errors.New("exec: not supported on this system")
)

// Defaults.
const (
	DefaultInflight          = 1
	DefaultTimeout           = 10 * time.Minute
	DefaultStartTimeout      = 10 * time.Minute
	DefaultStopGrace         = 5 * time.Second
	DefaultRestartBackoff    = 100 * time.Millisecond
	DefaultMaxRestartBackoff = 10 * time.Second
	// DefaultMaxResultBytes leaves room under the ledger's result limit
	// (1 MiB) for the {"completion": ...} wrapping.
	DefaultMaxResultBytes = 1<<20 - 1024
	// lineSlack is what an answer line may hold beyond its result: the id,
	// the keys, an error message with its traceback.
	lineSlack = 64 << 10
)

// Config configures the exec backend. Zero numeric and duration fields
// select their defaults; negative ones are invalid.
type Config struct {
	// Command is the program and its arguments (Command[0] is looked up in
	// PATH when it has no slash). Required.
	Command []string
	// Dir is the programs' working directory (default: the worker's).
	Dir string
	// Env is added to each program's environment (KEY=VALUE).
	Env []string
	// WorkerID is the programs' ROLLOUT_WORKER_ID.
	WorkerID string
	// Procs is how many programs run (default 1).
	Procs int
	// Inflight is how many items one program holds at once (default 1).
	Inflight int
	// Timeout is how long a program may take to answer an item before it is
	// killed and restarted (default 10m).
	Timeout time.Duration
	// StartTimeout is how long a program may take to start (until its first
	// answer) on top of Timeout: an item given to a program that has not
	// answered anything yet must be answered within Timeout of the later of
	// its dispatch and the program's start plus StartTimeout (default 10m).
	StartTimeout time.Duration
	// GPUs, when set, are the CUDA_VISIBLE_DEVICES values: program i gets
	// GPUs[i % len(GPUs)]. Each is a device ordinal or UUID (no spaces or
	// commas).
	GPUs []string
	// StopGrace is how long Close waits after SIGTERM before SIGKILL
	// (default 5s).
	StopGrace time.Duration
	// RestartBackoff and MaxRestartBackoff bound the wait before a program
	// that exited is started again (defaults 100ms and 10s).
	RestartBackoff, MaxRestartBackoff time.Duration
	// MaxResultBytes bounds one result object (default
	// DefaultMaxResultBytes); a longer one is a protocol error.
	MaxResultBytes int
	// Logger receives the backend's logs and the programs' standard error.
	// Nil discards them.
	Logger hclog.Logger
}

// Validate reports the first problem with c, naming the field.
func (c Config) Validate() error {
	if len(c.Command) == 0 || c.Command[0] == "" {
		return fmt.Errorf("%w: Command is required (the program to run and its arguments)", ErrInvalidConfig)
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"Procs", int64(c.Procs)},
		{"Inflight", int64(c.Inflight)},
		{"Timeout", int64(c.Timeout)},
		{"StartTimeout", int64(c.StartTimeout)},
		{"StopGrace", int64(c.StopGrace)},
		{"RestartBackoff", int64(c.RestartBackoff)},
		{"MaxRestartBackoff", int64(c.MaxRestartBackoff)},
		{"MaxResultBytes", int64(c.MaxResultBytes)},
	} {
		if f.v < 0 {
			return fmt.Errorf("%w: %s must be >= 0, got %d", ErrInvalidConfig, f.name, f.v)
		}
	}
	if c.Procs > 1024 {
		return fmt.Errorf("%w: Procs %d is too many (at most 1024)", ErrInvalidConfig, c.Procs)
	}
	if c.Inflight > 1<<16 {
		return fmt.Errorf("%w: Inflight %d is too many (at most %d)", ErrInvalidConfig, c.Inflight, 1<<16)
	}
	for i, g := range c.GPUs {
		if g == "" || strings.ContainsFunc(g, func(r rune) bool { return r == ',' || unicode.IsSpace(r) || !unicode.IsPrint(r) }) {
			return fmt.Errorf("%w: GPUs[%d] %q is not a device (an ordinal or UUID, no spaces or commas)", ErrInvalidConfig, i, g)
		}
	}
	for i, kv := range c.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return fmt.Errorf("%w: Env[%d] %q is not KEY=VALUE", ErrInvalidConfig, i, kv)
		}
	}
	if c.Dir != "" {
		st, err := os.Stat(c.Dir)
		if err != nil {
			return fmt.Errorf("%w: Dir: %v", ErrInvalidConfig, err)
		}
		if !st.IsDir() {
			return fmt.Errorf("%w: Dir %s is not a directory", ErrInvalidConfig, c.Dir)
		}
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Procs == 0 {
		c.Procs = 1
	}
	if c.Inflight == 0 {
		c.Inflight = DefaultInflight
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = DefaultStartTimeout
	}
	if c.StopGrace == 0 {
		c.StopGrace = DefaultStopGrace
	}
	if c.RestartBackoff == 0 {
		c.RestartBackoff = DefaultRestartBackoff
	}
	if c.MaxRestartBackoff == 0 {
		c.MaxRestartBackoff = DefaultMaxRestartBackoff
	}
	c.MaxRestartBackoff = max(c.MaxRestartBackoff, c.RestartBackoff)
	if c.MaxResultBytes == 0 {
		c.MaxResultBytes = DefaultMaxResultBytes
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return c
}

// Backend runs items on Procs programs. It is safe for concurrent use.
type Backend struct {
	cfg   Config
	log   hclog.Logger
	spawn *spawner
	reap  *reaper
	tag   string // random: each program's tagEnv is tag-slot-n

	closing chan struct{} // closed by Close
	supWG   sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	slots   []*child      // the program of each slot; nil while it restarts
	changed chan struct{} // closed and replaced when a slot may have room
	stats   Stats
	spawned uint64 // programs started, for their tags
}

var _ worker.Backend = (*Backend)(nil)

// Stats are a Backend's counters since New.
type Stats struct {
	// Started counts programs started (restarts included); Exited those
	// that ended, however.
	Started, Exited uint64
	// Timeouts and ProtocolErrors count programs killed for either.
	Timeouts, ProtocolErrors uint64
	// Answered counts results; Errors error answers.
	Answered, Errors uint64
	// Running is how many programs run now; Held how many items they
	// hold (sent, not yet answered; a cancelled item stays held until its
	// answer comes).
	Running, Held int
}

// New validates cfg and starts the programs. A program that cannot be
// started (no such file, not executable) is an error, and nothing is left
// running; one that starts and then exits is restarted, as it would be
// later.
func New(cfg Config) (*Backend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !supported {
		return nil, ErrUnsupported
	}
	cfg = cfg.withDefaults()
	var tag [8]byte
	_, _ = crand.Read(tag[:])
	b := &Backend{
		cfg:     cfg,
		log:     cfg.Logger.Named("exec"),
		spawn:   newSpawner(),
		tag:     hex.EncodeToString(tag[:]),
		closing: make(chan struct{}),
		slots:   make([]*child, cfg.Procs),
		changed: make(chan struct{}),
	}
	b.reap = newReaper(b.log, b.tag)
	first := make([]*child, cfg.Procs)
	for i := range cfg.Procs {
		c, err := b.start(i)
		if err != nil {
			for _, c := range first[:i] {
				c.signal(killSignal)
			}
			for _, c := range first[:i] {
				<-c.exited
			}
			_ = b.reap.finish(context.Background(), time.Now())
			b.reap.stop()
			b.spawn.stop()
			return nil, err
		}
		first[i] = c
	}
	for i, c := range first {
		b.supWG.Go(func() { b.supervise(i, c) })
	}
	b.log.Info("started programs", "command", strings.Join(cfg.Command, " "), "procs", cfg.Procs,
		"inflight", cfg.Inflight, "timeout", cfg.Timeout, "gpus", strings.Join(cfg.GPUs, ","))
	return b, nil
}

// Stats returns a snapshot of the backend's counters.
func (b *Backend) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.stats
	for _, c := range b.slots {
		if c != nil && !c.gone {
			s.Running++
			s.Held += len(c.pending)
		}
	}
	return s
}

// Pids returns the process ids of the programs running now (for tests and
// diagnostics).
func (b *Backend) Pids() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []int
	for _, c := range b.slots {
		if c != nil && !c.gone {
			out = append(out, c.pid)
		}
	}
	return out
}

// broadcastLocked wakes every Run waiting for a slot.
func (b *Backend) broadcastLocked() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// call is one item handed to a program.
type call struct {
	id    string
	index uint64
	run   string
	// openAI is set for an OpenAI Batch request line: its result is
	// recorded as a batch.OpenAIResult (recordableOpenAI).
	openAI bool
	done   chan outcome // one outcome, buffered
	timer  *time.Timer
	// limit is the time it had to be answered in; starting is set when
	// that included the program's start-up allowance.
	limit    time.Duration
	starting bool
}

type outcome struct {
	result []byte
	err    error
}

// Run hands item to a program with room for it and waits for its answer.
// It waits for room while every program is busy or restarting. An error
// answer, a program that exits, a timeout or a protocol error fails the
// item (see the package doc); ctx ending returns ctx.Err() at once.
func (b *Backend) Run(ctx context.Context, item worker.Item) ([]byte, error) {
	line, err := encodeRequest(item)
	if err != nil {
		return nil, err
	}
	req, perr := batch.ParseRequest(item.Payload)
	cl := &call{id: hex.EncodeToString(item.ID), index: item.Index, run: item.Run, done: make(chan outcome, 1),
		openAI: perr == nil && req.Format == batch.FormatOpenAI}
	for {
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			return nil, ErrClosed
		}
		if c := b.pickLocked(cl.id); c != nil {
			c.pending[cl.id] = cl
			c.lines <- line // never blocks: it holds at most Inflight lines
			cl.limit = b.cfg.Timeout
			if c.replies == 0 {
				// Still starting: its time runs from the end of the
				// start-up allowance.
				if d := time.Until(c.started.Add(b.cfg.StartTimeout)) + b.cfg.Timeout; d > cl.limit {
					cl.limit, cl.starting = d, true
				}
			}
			cl.timer = time.AfterFunc(cl.limit, func() { b.timedOut(c, cl) })
			b.mu.Unlock()
			break
		}
		ch := b.changed
		b.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	select {
	case o := <-cl.done:
		if o.err != nil && !errors.Is(o.err, ErrClosed) {
			b.log.Warn("item failed", "run", item.Run, "index", item.Index, "attempt", item.Attempt, "reason", o.err)
		}
		return o.result, o.err
	case <-ctx.Done():
		// The program keeps the item until it answers (the answer is then
		// dropped) or Timeout kills it.
		return nil, ctx.Err()
	}
}

// pickLocked returns the least busy running program with room for an item
// of id that does not hold one of that id already (two runs may hold items
// with the same sample id), or nil.
func (b *Backend) pickLocked(id string) *child {
	var best *child
	for _, c := range b.slots {
		if c == nil || c.gone || c.killErr != nil || len(c.pending) >= b.cfg.Inflight {
			continue
		}
		if _, busy := c.pending[id]; busy {
			continue
		}
		if best == nil || len(c.pending) < len(best.pending) {
			best = c
		}
	}
	return best
}

// timedOut kills c when cl is still waiting for its answer.
func (b *Backend) timedOut(c *child, cl *call) {
	b.mu.Lock()
	if c.pending[cl.id] != cl || c.gone {
		b.mu.Unlock()
		return
	}
	b.stats.Timeouts++
	limit := b.cfg.Timeout.String()
	if cl.starting {
		limit = fmt.Sprintf("%v (the timeout, after a start-up allowance of %v: the program had answered nothing yet)", cl.limit.Round(time.Millisecond), b.cfg.StartTimeout)
	}
	err := fmt.Errorf("%w: item %d of run %q had no answer within %s: killed %s (and the %d item(s) it held)",
		ErrTimeout, cl.index, cl.run, limit, c.name(), len(c.pending))
	b.mu.Unlock()
	b.kill(c, err)
}

// kill records why c is being killed (the first reason stands) and
// SIGKILLs its process group. Its items fail with err when it is gone.
func (b *Backend) kill(c *child, err error) {
	b.mu.Lock()
	if c.gone {
		b.mu.Unlock()
		return
	}
	if c.killErr == nil {
		c.killErr = err
	}
	// Logged under the lock: before the program is gone (and Close can
	// return).
	b.log.Warn("killing program", "proc", c.slot, "pid", c.pid, "reason", err)
	b.mu.Unlock()
	c.signal(killSignal)
}

// supervise keeps slot's program running until Close: it waits for the
// program to end and starts it again after a backoff.
func (b *Backend) supervise(slot int, c *child) {
	failures := 0
	for {
		select {
		case <-c.exited:
		case <-b.closing:
			return // Close stops the program
		}
		if c.answers > 0 {
			failures = 0
		}
		failures++
		select {
		case <-b.closing:
			return
		default:
		}
		d := backoff(b.cfg.RestartBackoff, b.cfg.MaxRestartBackoff, failures)
		b.log.Info("restarting program after backoff", "proc", slot, "backoff", d.Round(time.Millisecond), "consecutive_failures", failures)
		for {
			t := time.NewTimer(d)
			select {
			case <-b.closing:
				t.Stop()
				return
			case <-t.C:
			}
			var err error
			c, err = b.start(slot)
			if err == nil {
				break
			}
			if errors.Is(err, ErrClosed) {
				return
			}
			failures++
			d = backoff(b.cfg.RestartBackoff, b.cfg.MaxRestartBackoff, failures)
			b.log.Error("starting program failed; retrying after backoff", "proc", slot, "error", err, "backoff", d.Round(time.Millisecond))
		}
	}
}

// backoff is base doubled for each failure after the first, at most top,
// with jitter in its upper half.
func backoff(base, top time.Duration, failures int) time.Duration {
	d := base
	for i := 1; i < failures && d < top; i++ {
		d *= 2
	}
	d = min(d, top)
	return d/2 + rand.N(d/2+1)
}

// Close stops the programs: it closes their standard input and sends each
// process group SIGTERM, waits up to StopGrace (or until ctx ends) for them
// to exit, then SIGKILLs what is left and waits for it. Items still held
// fail with ErrClosed and Run refuses new ones. Call it after the worker's
// Run returned. It returns an error when a program could not be reaped.
func (b *Backend) Close(ctx context.Context) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		b.supWG.Wait()
		return nil
	}
	b.closed = true
	close(b.closing)
	b.broadcastLocked()
	b.mu.Unlock()

	// The supervisors return at once or after their program ended; no new
	// program starts after closing was closed.
	b.supWG.Wait()
	b.mu.Lock()
	var live []*child
	for _, c := range b.slots {
		if c != nil && !c.gone {
			live = append(live, c)
		}
	}
	b.mu.Unlock()
	for _, c := range live {
		c.closeInput()
		c.signal(termSignal)
	}
	// What the programs started outside their groups gets the same grace.
	b.reap.sweep(termSignal, "")
	deadline := time.Now().Add(b.cfg.StopGrace)
	gctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	left := waitExited(gctx, live)
	if len(left) > 0 {
		b.log.Warn("programs did not exit after SIGTERM; sending SIGKILL", "count", len(left), "grace", b.cfg.StopGrace)
		for _, c := range left {
			c.signal(killSignal)
		}
		b.reap.sweep(killSignal, "")
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if left = waitExited(kctx, left); len(left) > 0 {
			b.reap.stop()
			b.spawn.stop()
			return fmt.Errorf("exec: %d program(s) not reaped 10s after SIGKILL (first: %s)", len(left), left[0].name())
		}
	}
	// Then every process they left behind (a setsid, a double fork) ends
	// too, and is reaped.
	err := b.reap.finish(ctx, deadline)
	b.reap.stop()
	b.spawn.stop()
	if err != nil {
		return err
	}
	b.log.Info("programs stopped", "count", len(live))
	return nil
}

// waitExited waits until every child in cs has exited or ctx ends; it
// returns those still running.
func waitExited(ctx context.Context, cs []*child) []*child {
	for i, c := range cs {
		select {
		case <-c.exited:
		case <-ctx.Done():
			var left []*child
			for _, c := range cs[i:] {
				select {
				case <-c.exited:
				default:
					left = append(left, c)
				}
			}
			return left
		}
	}
	return nil
}
