// Command rollout is the user's front door to a rollout cluster: it submits a
// JSONL batch or a training run, watches it, fetches its ordered results (a
// training run's per-step loss, accuracy and weights), describes the replica
// set, and runs self-contained demos with real processes.
//
//	rollout submit  --coord H:P[,...] --config RUN.toml [--wait] [--skip-invalid]
//	rollout submit  --coord H:P[,...] --input FILE.jsonl --run NAME [--wait]
//	rollout status  --coord H:P[,...] [--run NAME | --config RUN.toml] [--watch]
//	rollout results --coord H:P[,...] --config RUN.toml       (into its [output] dir)
//	rollout results --coord H:P[,...] --run NAME -o OUT.jsonl
//	rollout train   --coord H:P[,...] --config TRAIN.toml [--wait] [--weights-out FILE] [--until-step K]
//	rollout results --coord H:P[,...] (--run NAME | --config TRAIN.toml) [--weights-out FILE]   (training)
//	rollout cluster --coord H:P[,...]
//	rollout events  --coord H:P[,...] [--follow] [--run NAME] [--after SEQ] [--json]
//	rollout cluster remove ID --coord H:P[,...]                   (admin)
//	rollout certs   --dir DIR --names NAME:ROLE,... [--hosts H,...]
//	rollout demo    [--bin DIR] [--input FILE] [--workers 3]
//	rollout demo-train [--bin DIR] [--config TRAIN.toml] [--backend auto|cpu|gpu] [--workers 3]
//
// Global flags: --tls-ca, --tls-cert and --tls-key (all three) select
// mutual TLS with a client or admin certificate; a command that connects
// refuses to run without them unless --insecure is given (a cluster started
// with --insecure). --timeout bounds how long one operation keeps retrying
// an unreachable or leaderless cluster; stderr says once what it waits for
// (wait.go).
//
// Exit status: 0 success, 1 failure, 2 bad usage, 3 an incomplete output:
// rollout results (and submit --wait --config) wrote what the run has, but
// lines of the run's input have no output line yet (not yet submitted,
// pending, running, or their store objects unreadable); the message on
// stderr counts them by reason.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"runtime/pprof"
	"syscall"

	"github.com/mattn/go-isatty"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
	// exitIncomplete: the output was written but lacks lines of the run's
	// input (an *incompleteError).
	exitIncomplete = 3
)

func main() {
	os.Exit(mainCode())
}

// mainCode runs the command line and returns the exit status, after the
// deferred CPU profile (cpuProfileEnv) is written.
func mainCode() int {
	setGCDefault()
	if stopProfile := startCPUProfile(os.Getenv(cpuProfileEnv), os.Stderr); stopProfile != nil {
		defer stopProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // from now on a second signal ends the process at once
	}()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, isatty.IsTerminal(os.Stdout.Fd()))
	stop()
	return code
}

// cpuProfileEnv names a directory into which the CLI writes a CPU profile
// of its whole run, rollout-PID.pprof (for make bench and by hand: the CLI
// has no pprof listener). A profile that cannot be started is reported on
// stderr and the command runs without it.
const cpuProfileEnv = "ROLLOUT_CPU_PROFILE_DIR"

// startCPUProfile starts a CPU profile into dir (nothing when dir is empty)
// and returns what stops it and closes its file, or nil.
func startCPUProfile(dir string, stderr io.Writer) func() {
	if dir == "" {
		return nil
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("rollout-%d.pprof", os.Getpid())))
	if err != nil {
		fmt.Fprintf(stderr, "rollout: %s: %v (running without a profile)\n", cpuProfileEnv, err)
		return nil
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		fmt.Fprintf(stderr, "rollout: %s: %v (running without a profile)\n", cpuProfileEnv, err)
		return nil
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

// cliGCPercent is the CLI's GOGC unless the environment sets one. The CLI
// streams: its input lines, submit chunks and result pages are garbage a
// moment after they are read, and its live heap stays a few megabytes, so
// at Go's default (100) it collects hundreds of times a second during a big
// submit or results download. 400 makes that a quarter as often at the
// cost of a heap a few times a small live set.
const cliGCPercent = 400

// setGCDefault applies cliGCPercent when GOGC is not set.
func setGCDefault() {
	if _, ok := os.LookupEnv("GOGC"); !ok {
		debug.SetGCPercent(cliGCPercent)
	}
}

// run executes the command line args and returns the exit status. Output
// goes to stdout, diagnostics to stderr; tty selects live progress bars.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, tty bool) int {
	return newApp(stdout, stderr, tty).execute(ctx, args)
}

// execute runs one command line and returns its exit status.
func (a *app) execute(ctx context.Context, args []string) int {
	stderr := a.stderr
	root := a.rootCmd()
	root.SetArgs(args)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	var ue *usageError
	if !a.started || errors.As(err, &ue) {
		fmt.Fprintf(stderr, "rollout: %v\n", err)
		name := "rollout"
		if cmd != nil {
			name = cmd.CommandPath()
		}
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", name)
		return exitUsage
	}
	var ie *incompleteError
	if errors.As(err, &ie) {
		fmt.Fprintf(stderr, "rollout: %v\n", err)
		return exitIncomplete
	}
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		fmt.Fprintln(stderr, "rollout: interrupted")
		return exitFailure
	}
	fmt.Fprintf(stderr, "rollout: %v\n", err)
	return exitFailure
}

// usageError is a problem with the command line found after parsing (a bad
// flag value, flags that must go together). It exits with status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}
