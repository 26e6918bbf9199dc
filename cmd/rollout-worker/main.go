// Command rollout-worker runs one rollout worker: it long-polls the
// coordinator for items, runs them on a backend and reports the results.
//
//	rollout-worker --id ID --coord H:P[,H:P...] --backend mock [--concurrency N]
//	    [--mock-latency 50ms] [--mock-jitter D] [--mock-fail-rate F] [--heartbeat 1s]
//	    [--log-level info] [--tls-ca FILE --tls-cert FILE --tls-key FILE]
//
// SIGINT or SIGTERM stop it gracefully: it stops pulling, nacks unstarted
// items, lets in-flight items finish within --drain-timeout, deregisters and
// exits 0 after printing a line of statistics. A second signal exits at
// once. Bad flags exit 2; a worker the coordinator refuses exits 1.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"

	"github.com/rollout/rollout/api/mtls"
	"github.com/rollout/rollout/worker"
	"github.com/rollout/rollout/worker/coordclient"
	"github.com/rollout/rollout/worker/mock"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

type options struct {
	id, coord, backend string
	concurrency        int
	backlog            int
	mockLatency        time.Duration
	mockJitter         time.Duration
	mockFailRate       float64
	mockSeed           int64
	heartbeat          time.Duration
	claimWait          time.Duration
	drainTimeout       time.Duration
	noSteal            bool
	logLevel           string
	tls                mtls.Files
}

// usageError marks bad command-line input (exit 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // restore default handling: a second signal ends the process at once
	}()
	code := execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// execute runs the command with args until ctx ends and returns the exit
// code.
func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := newCommand(stdout, stderr)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(stderr, "rollout-worker:", err)
	var ue usageError
	if errors.As(err, &ue) {
		return exitUsage
	}
	return exitError
}

func newCommand(stdout, stderr io.Writer) *cobra.Command {
	o := &options{}
	def := worker.DefaultConfig()
	cmd := &cobra.Command{
		Use:   "rollout-worker --id ID --coord H:P[,H:P...] --backend mock",
		Short: "Run one rollout worker (pull items, run them on a backend, report results)",
		Args: func(cmd *cobra.Command, args []string) error {
			if err := cobra.NoArgs(cmd, args); err != nil {
				return usageError{err}
			}
			return nil
		},
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(cmd.Context(), o, stdout, stderr)
		},
	}
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	f := cmd.Flags()
	f.StringVar(&o.id, "id", "", "worker id, unique among workers; with mutual TLS, the name in the certificate (required)")
	f.StringVar(&o.coord, "coord", "", "comma-separated gRPC addresses (host:port) of coordinator replicas (required)")
	f.StringVar(&o.backend, "backend", "mock", "backend that runs items: mock")
	f.IntVar(&o.concurrency, "concurrency", def.Concurrency, "items run at once")
	f.IntVar(&o.backlog, "backlog", 0, "items held at most, running and waiting (default 2 x --concurrency)")
	f.DurationVar(&o.mockLatency, "mock-latency", 50*time.Millisecond, "mock backend: time per item")
	f.DurationVar(&o.mockJitter, "mock-jitter", 0, "mock backend: up to this much extra time per item (deterministic)")
	f.Float64Var(&o.mockFailRate, "mock-fail-rate", 0, "mock backend: probability in [0,1] that an attempt fails (deterministic)")
	f.Int64Var(&o.mockSeed, "mock-seed", 0, "mock backend: seed of the failures and jitter")
	f.DurationVar(&o.heartbeat, "heartbeat", def.HeartbeatInterval, "interval between heartbeats")
	f.DurationVar(&o.claimWait, "claim-wait", def.ClaimWait, "how long one claim long-polls")
	f.DurationVar(&o.drainTimeout, "drain-timeout", def.DrainTimeout, "on stop, how long in-flight items may finish before they are nacked")
	f.BoolVar(&o.noSteal, "no-steal", false, "never ask to steal work when idle")
	f.StringVar(&o.logLevel, "log-level", "info", "trace, debug, info, warn or error")
	o.tls.AddFlags(f)
	return cmd
}

// run builds the worker from o and runs it until ctx ends.
func run(ctx context.Context, o *options, stdout, stderr io.Writer) error {
	if o.id == "" {
		return usagef("--id is required")
	}
	var addrs []string
	for _, a := range strings.Split(o.coord, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return usagef("--coord is required (host:port[,host:port...])")
	}
	level := hclog.LevelFromString(o.logLevel)
	if level == hclog.NoLevel {
		return usagef("--log-level %q: want trace, debug, info, warn or error", o.logLevel)
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "rollout-worker", Level: level, Output: stderr})

	var backend worker.Backend
	switch o.backend {
	case "mock":
		b, err := mock.New(mock.Config{Latency: o.mockLatency, Jitter: o.mockJitter, FailRate: o.mockFailRate, Seed: o.mockSeed})
		if err != nil {
			return usageError{fmt.Errorf("--mock-*: %w", err)}
		}
		backend = b
	default:
		return usagef("unknown backend %q (available: mock)", o.backend)
	}

	tlsConf, err := o.tls.Load()
	if err != nil {
		return usageError{err}
	}
	ccfg := coordclient.DefaultConfig()
	ccfg.Addrs = addrs
	ccfg.TLS = tlsConf
	ccfg.Logger = log
	client, err := coordclient.New(ccfg)
	if err != nil {
		return usageError{fmt.Errorf("--coord: %w", err)}
	}
	defer client.Close()

	wcfg := worker.DefaultConfig()
	wcfg.ID = o.id
	wcfg.Concurrency = o.concurrency
	wcfg.Backlog = o.backlog
	wcfg.HeartbeatInterval = o.heartbeat
	wcfg.ClaimWait = o.claimWait
	wcfg.DrainTimeout = o.drainTimeout
	wcfg.Steal = !o.noSteal
	wcfg.Logger = log
	w, err := worker.New(wcfg, client, backend)
	if err != nil {
		return usageError{err}
	}

	log.Info("starting", "id", o.id, "coord", strings.Join(addrs, ","), "backend", o.backend,
		"concurrency", o.concurrency, "tls", tlsConf != nil)
	start := time.Now()
	runErr := w.Run(ctx)
	st := w.Stats()
	fmt.Fprintf(stdout, "rollout-worker %s: stopped after %s: completed=%d failed=%d nacked=%d dropped=%d conflicts=%d claimed=%d adopted=%d stolen=%d stale_replies_rejected=%d term=%d\n",
		o.id, time.Since(start).Round(time.Millisecond), st.Completed, st.Failed, st.Nacked, st.Dropped, st.Conflicts,
		st.Claimed, st.Adopted, st.Stolen, st.StaleRepliesRejected, st.Term)
	return runErr
}
