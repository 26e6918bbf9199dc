package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	osexec "os/exec"
	"strings"
	"time"

	"github.com/google/shlex"
	"github.com/hashicorp/go-hclog"
	"github.com/spf13/pflag"

	"github.com/rollout/rollout/worker/exec"
)

// execOptions are the --backend exec flags.
type execOptions struct {
	command  string
	procs    int
	inflight int
	timeout  time.Duration
	start    time.Duration
	gpus     []string
	dir      string
	grace    time.Duration
	procsSet bool // --exec-procs was given
}

// addExecFlags registers the exec backend's flags.
func addExecFlags(f *pflag.FlagSet, o *execOptions) {
	f.StringVar(&o.command, "exec", "", `exec backend: the program to run and its arguments, split like a shell's words (quotes, no expansion), e.g. "python3 handler.py --model m.pt"; required with --backend exec`)
	f.IntVar(&o.procs, "exec-procs", 0, "exec backend: programs to keep running (default: one per --exec-gpus device, else --concurrency)")
	f.IntVar(&o.inflight, "exec-inflight", exec.DefaultInflight, "exec backend: items one program holds at once (its answers may come in any order); --concurrency defaults to --exec-procs x --exec-inflight")
	f.DurationVar(&o.timeout, "exec-timeout", exec.DefaultTimeout, "exec backend: time a program has to answer an item before it is killed and restarted (the item fails and is retried)")
	f.DurationVar(&o.start, "exec-start-timeout", exec.DefaultStartTimeout, "exec backend: time a program has to start (load its model...) before --exec-timeout counts for the items it holds, until its first answer")
	f.StringSliceVar(&o.gpus, "exec-gpus", nil, "exec backend: CUDA devices, e.g. 0,1: program i gets CUDA_VISIBLE_DEVICES set to device i mod their number")
	f.StringVar(&o.dir, "exec-dir", "", "exec backend: the programs' working directory (default: the worker's)")
	f.DurationVar(&o.grace, "exec-grace", exec.DefaultStopGrace, "exec backend: at exit, the time between SIGTERM and SIGKILL to the programs' process groups")
}

// checkExecFlags refuses --exec-* flags without --backend exec.
func checkExecFlags(f *pflag.FlagSet, backend string) error {
	if backend == "exec" {
		return nil
	}
	var set []string
	f.Visit(func(fl *pflag.Flag) {
		if fl.Name == "exec" || strings.HasPrefix(fl.Name, "exec-") {
			set = append(set, "--"+fl.Name)
		}
	})
	if len(set) > 0 {
		return usagef("%s: apply to --backend exec only", strings.Join(set, ", "))
	}
	return nil
}

// newExecBackend starts the exec backend's programs from the flags. It
// sets o.concurrency to procs x inflight when --concurrency was not given.
func newExecBackend(o *options, log hclog.Logger) (*exec.Backend, error) {
	e := &o.exec
	if strings.TrimSpace(e.command) == "" {
		return nil, usagef(`--exec is required with --backend exec (the program to run, e.g. --exec "python3 handler.py")`)
	}
	argv, err := shlex.Split(e.command)
	if err != nil {
		return nil, usagef("--exec %q: %v", e.command, err)
	}
	if len(argv) == 0 {
		return nil, usagef("--exec %q names no program", e.command)
	}
	if e.procsSet && e.procs < 1 {
		return nil, usagef("--exec-procs must be at least 1, got %d", e.procs)
	}
	if e.inflight < 1 {
		return nil, usagef("--exec-inflight must be at least 1, got %d", e.inflight)
	}
	if e.timeout <= 0 {
		return nil, usagef("--exec-timeout must be positive, got %v", e.timeout)
	}
	if e.start <= 0 {
		return nil, usagef("--exec-start-timeout must be positive, got %v", e.start)
	}
	if e.grace <= 0 {
		return nil, usagef("--exec-grace must be positive, got %v", e.grace)
	}
	var procs int
	procs, o.concurrency = execSizing(e, o.concurrency, o.concurrencySet)
	cfg := exec.Config{
		Command: argv, Dir: e.dir, WorkerID: o.id, Procs: procs, Inflight: e.inflight,
		Timeout: e.timeout, StartTimeout: e.start, GPUs: e.gpus, StopGrace: e.grace, Logger: log,
	}
	if err := cfg.Validate(); err != nil {
		return nil, usageError{fmt.Errorf("--exec-*: %w", err)}
	}
	b, err := exec.New(cfg)
	if errors.Is(err, osexec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
		return nil, usageError{fmt.Errorf("--exec %q: %w", e.command, err)}
	}
	if err != nil {
		return nil, err
	}
	return b, nil
}

// execSizing returns how many programs run and the worker's concurrency:
// --exec-procs, else one program per --exec-gpus device, else
// --concurrency programs; the concurrency is --concurrency when given,
// else programs x --exec-inflight (every slot busy).
func execSizing(e *execOptions, concurrency int, concurrencySet bool) (procs, conc int) {
	procs = e.procs
	if !e.procsSet {
		procs = concurrency
		if len(e.gpus) > 0 {
			procs = len(e.gpus)
		}
	}
	if !concurrencySet {
		concurrency = procs * e.inflight
	}
	return procs, concurrency
}

// closeExec stops the programs after the worker drained: SIGTERM, then
// SIGKILL after --exec-grace.
func closeExec(b *exec.Backend, grace time.Duration, log hclog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), grace+15*time.Second)
	defer cancel()
	if err := b.Close(ctx); err != nil {
		log.Error("stopping the exec programs failed", "error", err)
	}
}
