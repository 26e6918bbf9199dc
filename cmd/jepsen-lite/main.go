//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"

	"github.com/rollout/rollout/jepsen-lite/nemesis"
	"github.com/rollout/rollout/jepsen-lite/network"
	"github.com/rollout/rollout/jepsen-lite/runner"
)

// Exit codes.
const (
	exitPass      = 0
	exitViolation = 1
	exitHarness   = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

type options struct {
	cfg      runner.Config
	nemeses  string
	scenario string
	net      string
	logLevel string
	attach   string
	exitCode int
}

// execute runs the command with args and returns the exit code.
func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o := &options{cfg: runner.DefaultConfig()}
	cmd := &cobra.Command{
		Use:           "jepsen-lite [--duration 60s] [--nemesis all] [--seed N] [--out DIR] [--bin DIR]",
		Short:         "Inject faults into a real rollout cluster and check that no work is lost or duplicated",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), args, stdout, stderr)
		},
	}
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	def := runner.DefaultConfig()
	f := cmd.Flags()
	f.DurationVar(&o.cfg.Duration, "duration", def.Duration, "how long the nemesis injects faults (chaos scenario)")
	f.StringVar(&o.nemeses, "nemesis", "all", "comma-separated faults: partition-halves, partition-leader (isolate), partition-bridge, partition-ring, partition (all four), kill, pause, worker-kill, worker-pause, store (the S3 server killed, paused or slowed; result objects deleted or flipped; input chunks deleted or flipped until the heal), flood (the leader flooded with connections, a slowloris and concurrent calls, 5-7 s every 30 s or so), certs (a certificate renewed in place, the CA rotated across every process, a worker revoked; needs --tls), all (every fault), none; add hostile (e.g. all,hostile) for a hostile client that forges reports, calls membership RPCs without authority, speaks plaintext to TLS ports and sends oversized and malformed requests")
	f.Int64Var(&o.cfg.Seed, "seed", def.Seed, "seed of the fault schedule and the workload")
	f.StringVar(&o.cfg.OutDir, "out", "jepsen-report", "report directory (history.jsonl, summary.md, summary.json, logs/)")
	f.StringVar(&o.cfg.BinDir, "bin", "", "directory holding rollout-coord and rollout-worker (default: this executable's directory)")
	f.StringVar(&o.scenario, "scenario", string(def.Scenario), "chaos, straggler (CAS self-check), stale-leader (epoch-guard self-check) or federation (a parent cluster hands runs to a peer cluster: kills, partitions between them, a cancel; docs/CHAOS.md)")
	f.IntVar(&o.cfg.Replicas, "replicas", def.Replicas, "coordinator replicas (chaos)")
	f.IntVar(&o.cfg.Workers, "workers", def.Workers, "workers (chaos)")
	f.IntVar(&o.cfg.Runs, "runs", def.Runs, "runs submitted (chaos)")
	f.IntVar(&o.cfg.RangeRuns, "range-runs", def.RangeRuns, "runs with the range layout submitted besides --runs (chaos): SubmitRanges over range chunks in their object store")
	f.IntVar(&o.cfg.Tenants, "tenants", def.Tenants, "tenants the chaos runs are spread over, 0 to 3 (team-a and team-b at priority 3 with weights 1 and 3, team-c at priority 5); 0: every run the client cli's, as before tenants")
	f.IntVar(&o.cfg.ItemsPerRun, "items", def.ItemsPerRun, "items per run (chaos)")
	f.DurationVar(&o.cfg.FailureTimeout, "failure-timeout", def.FailureTimeout, "the coordinators' --failure-timeout")
	f.DurationVar(&o.cfg.CompletionBound, "completion-bound", def.CompletionBound, "the runs must finish within this long after the last heal")
	f.StringVar(&o.net, "net", string(def.Net), "network: auto (namespaces as root, else the proxy), netns or proxy")
	f.BoolVar(&o.cfg.KeepData, "keep-data", false, "keep the replicas' data directories in the report")
	f.BoolVar(&o.cfg.TLS, "tls", def.TLS, "run every edge (Raft, gRPC, workers, the harness's clients) over mutual TLS from a dev CA made for the run; --tls=false for plaintext")
	f.StringVar(&o.cfg.Versitygw, "versitygw", "", "versitygw binary of the S3 server the first chaos run keeps its data in (default: $ROLLOUT_VERSITYGW, the module's .tools/versitygw from make tools-s3, or PATH; without one every run uses a file:// store)")
	f.StringVar(&o.logLevel, "log-level", "info", "trace, debug, info, warn or error")
	f.StringVar(&o.attach, "netns-attach", "", "internal: run inside the namespaces with this prefix")
	_ = f.MarkHidden("netns-attach")
	cmd.SetArgs(args)
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(stderr, "jepsen-lite:", err)
		return exitHarness
	}
	return o.exitCode
}

// usageError marks bad command-line input.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func (o *options) run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	level := hclog.LevelFromString(o.logLevel)
	if level == hclog.NoLevel {
		return usageError{fmt.Errorf("--log-level %q: want trace, debug, info, warn or error", o.logLevel)}
	}
	cfg := o.cfg
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "jepsen-lite", Level: level, Output: stderr})
	kinds, err := nemesis.ParseKinds(o.nemeses)
	if err != nil {
		return usageError{fmt.Errorf("--nemesis: %w", err)}
	}
	cfg.Nemeses = kinds
	cfg.Scenario = runner.Scenario(o.scenario)
	cfg.Net = runner.NetMode(o.net)
	if cfg.BinDir == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("--bin not given and the executable's directory is unknown: %w", err)
		}
		cfg.BinDir = filepath.Dir(exe)
	}
	for _, b := range []string{"rollout-coord", "rollout-worker"} {
		if _, err := os.Stat(filepath.Join(cfg.BinDir, b)); err != nil {
			return usageError{fmt.Errorf("--bin %s: %w (build with: go build -o DIR/ ./cmd/rollout-coord ./cmd/rollout-worker)", cfg.BinDir, err)}
		}
	}
	if abs, err := filepath.Abs(cfg.BinDir); err == nil {
		cfg.BinDir = abs
	}
	if abs, err := filepath.Abs(cfg.OutDir); err == nil {
		cfg.OutDir = abs
	}
	if err := cfg.Validate(); err != nil {
		return usageError{err}
	}

	if o.attach != "" {
		cfg.NetNSPrefix = o.attach
		return o.runHere(ctx, cfg, stdout)
	}
	useNetNS := cfg.Net == runner.NetNetNS
	if cfg.Net == runner.NetAuto {
		if why := network.CanNetNS(); why == nil {
			useNetNS = true
		} else {
			cfg.NetNote = "fallback: " + why.Error() + "; a user-space proxy per link on loopback instead"
			fmt.Fprintf(stderr, "jepsen-lite: network namespaces unavailable (%v); falling back to a user-space proxy per link\n", why)
		}
	}
	if !useNetNS {
		return o.runHere(ctx, cfg, stdout)
	}
	if err := network.CanNetNS(); err != nil {
		return fmt.Errorf("--net netns: %w", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	argv := append([]string{exe}, args...)
	argv = append(argv, "--bin", cfg.BinDir, "--out", cfg.OutDir, "--netns-attach", runner.Prefix(cfg.OutDir))
	code, err := runner.RunInNamespaces(ctx, cfg, argv)
	if errors.Is(err, runner.ErrNoNamespaces) && cfg.Net == runner.NetAuto {
		cfg.NetNote = "fallback: " + err.Error() + "; a user-space proxy per link on loopback instead"
		fmt.Fprintf(stderr, "jepsen-lite: %v; falling back to a user-space proxy per link\n", err)
		return o.runHere(ctx, cfg, stdout)
	}
	if err != nil {
		return err
	}
	o.exitCode = code
	return nil
}

// runHere runs the harness in this process and sets the exit code.
func (o *options) runHere(ctx context.Context, cfg runner.Config, stdout io.Writer) error {
	res, err := runner.Run(ctx, cfg)
	if res != nil {
		s := res.Summary
		tlsMode := "mutual TLS"
		if !s.TLS {
			tlsMode = "plaintext"
		}
		fmt.Fprintf(stdout, "jepsen-lite: %s (%s, seed %d, network %s, %s): report in %s\n", s.Outcome, s.Scenario, s.Seed, s.Network,
			tlsMode, filepath.Join(cfg.OutDir, "summary.md"))
		for _, v := range s.Verdicts {
			mark := "ok  "
			if !v.OK {
				mark = "FAIL"
			}
			fmt.Fprintf(stdout, "  %s %-18s %s\n", mark, v.Name, v.Detail)
		}
		for _, n := range s.Notes {
			fmt.Fprintf(stdout, "  note: %s\n", n)
		}
	}
	if err != nil {
		if errors.Is(err, runner.ErrInvalidConfig) {
			return usageError{err}
		}
		return err
	}
	if !res.Passed() {
		o.exitCode = exitViolation
		fmt.Fprintf(stdout, "jepsen-lite: violations: %s\n", strings.Join(res.Check.Failed(), ", "))
	}
	return nil
}
