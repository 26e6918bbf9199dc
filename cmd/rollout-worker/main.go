// Command rollout-worker runs one rollout worker: it long-polls the
// coordinator for items, runs them on a backend and reports the results.
//
//	rollout-worker --id ID --coord H:P[,H:P...] --backend mock [--concurrency N]
//	rollout-worker --id ID --coord H:P[,H:P...] --backend cpu|gpu [--gpu-device N]
//	rollout-worker --id ID --coord H:P[,H:P...] --backend openai --openai-url URL
//	rollout-worker --id ID --coord H:P[,H:P...] --backend exec --exec "python3 handler.py"
//	    [--exec-procs N] [--exec-inflight N] [--exec-timeout 10m] [--exec-start-timeout 10m]
//	    [--exec-gpus 0,1,...] [--exec-dir DIR] [--exec-grace 5s]
//	    [--api-key-env VAR] [--max-inflight N] [--openai-timeout 10m] [--openai-endpoint completions|chat]
//	    [--mock-latency 50ms] [--mock-jitter D] [--mock-fail-rate F] [--heartbeat 1s]
//	    [--kinds batch|train|any] [--models NAME,...]
//	    [--log-level info] (--tls-ca FILE --tls-cert FILE --tls-key FILE | --insecure) [--history FILE]
//	    [--hint signal|aws|gcp] [--drain-timeout 25s] [--metrics-addr H:P] [--pprof-addr H:P]
//
// --backend cpu and gpu run the items of training runs (rollout train; see
// package worker/train) on a gpu.Device: cpu on the kernels in pure Go
// (bit-reproducible), gpu on the CUDA kernels through the NVIDIA driver
// (libcuda.so.1, or the library ROLLOUT_CUDA_DRIVER names), device
// --gpu-device. Without a usable driver or device, --backend gpu exits at
// start (status 1) saying why; it never falls back to the CPU. Before every
// kernel launch the backend checks the item's term against the newest term
// this worker has seen (the client's epoch guard): an item delivered by a
// deposed leader is dropped unlaunched and unreported. Items of other runs
// fail with a reason naming their kind.
//
// The worker talks mutual TLS with a worker certificate named by --id
// (rollout certs --names ID:worker); without the --tls-* flags it refuses
// to start unless --insecure is given (plaintext, for a coordinator started
// with --insecure), which it announces on stderr.
// Unless --tls-renew=false it renews its certificate from the cluster once
// a third of its life is left (a replica started with --tls-ca-key signs;
// package internal/certrenew), replacing the --tls-cert and --tls-key files.
//
// SIGINT or SIGTERM, or a spot preemption notice read from the cloud's
// metadata service (--hint aws or gcp), drains it: it stops pulling, nacks
// unstarted items, lets in-flight items finish only while their expected
// remaining time (from measured throughput) fits the budget, nacks the
// rest, deregisters and exits 0 after printing its statistics and a drain
// summary. Budgets: --drain-timeout for a signal (default 25s), 60s after an
// AWS notice (120s before termination), 15s after a GCP one (30s). A second
// signal forces the exit at once, still nacking what it can; a third ends
// the process. Bad flags exit 2; a worker the coordinator refuses exits 1.
//
// --backend exec runs items on the user's own program (package
// worker/exec): --exec-procs copies of the --exec command, each fed items as
// JSON lines on its standard input and answering on its standard output
// (python/rollout_exec.py does this for a Python function). A program that
// exits, hangs past --exec-timeout or breaks the protocol is restarted with
// backoff and the items it held fail with a reason saying so. When the
// worker has drained, its programs get SIGTERM and, after --exec-grace,
// SIGKILL, to their whole process groups.
//
// --models NAME,... names the models (a run's RunSpec.model, the [model]
// uri of its config) the worker serves: the ledger gives it items of runs
// of those models only, and of runs that name no model. Without it, an
// openai backend asks its server's GET /v1/models once at start and serves
// what it lists (every model, with a warning in the log, when that fails);
// any other backend serves every model. Registering again replaces the set.
//
// --metrics-addr serves Prometheus metrics on GET /metrics and --pprof-addr
// Go's profiles on /debug/pprof/ (both off by default, both
// unauthenticated: bind them to loopback or a private network); a bad
// address is a usage error. docs/OBSERVABILITY.md lists the metrics.
//
// The metadata base URLs can be overridden with --hint-aws-url and
// --hint-gcp-url, or the environment variables ROLLOUT_HINT_AWS_URL and
// ROLLOUT_HINT_GCP_URL.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"

	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/gpu"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/internal/telemetry"
	"github.com/rollout/rollout/jepsen-lite/history"
	"github.com/rollout/rollout/worker"
	"github.com/rollout/rollout/worker/exec"
	"github.com/rollout/rollout/worker/hint"
	"github.com/rollout/rollout/worker/mock"
	"github.com/rollout/rollout/worker/train"
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
	concurrencySet     bool // --concurrency was given
	openai             openaiOptions
	backlog            int
	mockLatency        time.Duration
	mockJitter         time.Duration
	mockFailRate       float64
	mockSeed           int64
	heartbeat          time.Duration
	callTimeout        time.Duration
	claimWait          time.Duration
	drainTimeout       time.Duration
	noSteal            bool
	logLevel           string
	history            string
	tls                mtls.Files
	renew              bool
	insecure           bool
	hint               string
	hintAWSURL         string
	hintGCPURL         string
	hintPoll           time.Duration
	gpuDevice          int
	gpuDeviceSet       bool // --gpu-device was given
	kinds              []string
	models             []string
	modelsSet          bool // --models was given
	telemetry          telemetry.Flags
	exec               execOptions
}

// usageError marks bad command-line input (exit 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// workerGCPercent is the worker's GOGC unless the environment sets one. A
// worker's live heap is small (the items it holds, a few hundred at most)
// while every item passes through it (claim replies, payloads, results,
// report requests), so at Go's default (100) it collects very often; 300
// cut its CPU per item by about a tenth in rollout-bench for a heap that
// stays a few megabytes.
const workerGCPercent = 300

// setGCDefault applies workerGCPercent when GOGC is not set.
func setGCDefault() {
	if _, ok := os.LookupEnv("GOGC"); !ok {
		debug.SetGCPercent(workerGCPercent)
	}
}

func main() {
	setGCDefault()
	// SIGHUP reloads the TLS files once the worker runs (run); until then
	// it is ignored, never the default that would kill the worker.
	signal.Ignore(syscall.SIGHUP)
	// SIGTERM and SIGINT are caught from here on and reach the worker as
	// notices (see hint.Signal).
	sig, err := hint.NewSignal(hint.SignalConfig{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "rollout-worker:", err)
		os.Exit(exitError)
	}
	code := execute(context.Background(), os.Args[1:], os.Stdout, os.Stderr, sig)
	_ = sig.Close()
	os.Exit(code)
}

// execute runs the command with args until ctx ends (or a hint ends it) and
// returns the exit code. hints are added to the ones --hint selects.
func execute(ctx context.Context, args []string, stdout, stderr io.Writer, hints ...worker.ComputeHint) int {
	cmd := newCommand(stdout, stderr, hints...)
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

func newCommand(stdout, stderr io.Writer, hints ...worker.ComputeHint) *cobra.Command {
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
			o.concurrencySet = cmd.Flags().Changed("concurrency")
			o.gpuDeviceSet = cmd.Flags().Changed("gpu-device")
			o.exec.procsSet = cmd.Flags().Changed("exec-procs")
			o.modelsSet = cmd.Flags().Changed("models")
			if err := checkExecFlags(cmd.Flags(), o.backend); err != nil {
				return err
			}
			return run(cmd.Context(), o, stdout, stderr, hints)
		},
	}
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	f := cmd.Flags()
	f.StringVar(&o.id, "id", "", "worker id, unique among workers; with mutual TLS, the name in the certificate (required)")
	f.StringVar(&o.coord, "coord", "", "comma-separated gRPC addresses (host:port) of coordinator replicas (required)")
	f.StringVar(&o.backend, "backend", "mock", "backend that runs items: mock, openai (an OpenAI-compatible server such as vllm serve), exec (your own program, see --exec), "+
		"or for training runs cpu (the kernels in pure Go) or gpu (CUDA kernels on an NVIDIA GPU; exits at start when no driver or device is usable)")
	f.IntVar(&o.gpuDevice, "gpu-device", 0, "gpu backend: the CUDA device ordinal")
	f.StringSliceVar(&o.kinds, "kinds", nil, "run kinds this worker takes items of (the ledger gives it no other): \"batch\" (batch inference), \"train\", or \"any\"; "+
		"default: batch for --backend mock and openai, train for cpu and gpu")
	f.StringSliceVar(&o.models, "models", nil, "models (a run's [model] uri) this worker serves, comma-separated: the ledger gives it items of runs of these models only (and of runs naming none); "+
		"default: with --backend openai the models its server lists at GET /v1/models (every model if that fails), else every model")
	f.IntVar(&o.concurrency, "concurrency", def.Concurrency, "items run at once (with --backend openai the default is --max-inflight, so that enough requests are in flight for the server's continuous batching)")
	addOpenAIFlags(f, &o.openai)
	addExecFlags(f, &o.exec)
	f.IntVar(&o.backlog, "backlog", 0, "items held at most, running and waiting (default 2 x --concurrency)")
	f.DurationVar(&o.mockLatency, "mock-latency", 50*time.Millisecond, "mock backend: time per item")
	f.DurationVar(&o.mockJitter, "mock-jitter", 0, "mock backend: up to this much extra time per item (deterministic)")
	f.Float64Var(&o.mockFailRate, "mock-fail-rate", 0, "mock backend: probability in [0,1] that an attempt fails (deterministic)")
	f.Int64Var(&o.mockSeed, "mock-seed", 0, "mock backend: seed of the failures and jitter")
	f.DurationVar(&o.heartbeat, "heartbeat", def.HeartbeatInterval, "interval between heartbeats")
	f.DurationVar(&o.callTimeout, "call-timeout", 2*time.Second,
		"bound on one attempt of a call to one coordinator (a long-poll adds its wait); on expiry the next replica is tried, so this bounds how long a dead or partitioned leader holds the worker")
	f.DurationVar(&o.claimWait, "claim-wait", def.ClaimWait, "how long one claim long-polls")
	f.DurationVar(&o.drainTimeout, "drain-timeout", def.DrainTimeout, "drain budget after SIGTERM or SIGINT: nack, finish what fits, report and deregister within it")
	f.StringVar(&o.hint, "hint", "signal", "preemption notices to watch besides SIGTERM/SIGINT: signal (only those), aws (EC2 spot instance-action) or gcp (Compute Engine preempted)")
	f.StringVar(&o.hintAWSURL, "hint-aws-url", envOr("ROLLOUT_HINT_AWS_URL", hint.DefaultAWSBaseURL), "EC2 instance metadata base URL (env ROLLOUT_HINT_AWS_URL)")
	f.StringVar(&o.hintGCPURL, "hint-gcp-url", envOr("ROLLOUT_HINT_GCP_URL", hint.DefaultGCPBaseURL), "Compute Engine metadata base URL (env ROLLOUT_HINT_GCP_URL)")
	f.DurationVar(&o.hintPoll, "hint-poll", hint.DefaultAWSPollInterval, "how often --hint aws reads the spot instance-action")
	f.BoolVar(&o.noSteal, "no-steal", false, "never ask to steal work when idle")
	f.StringVar(&o.logLevel, "log-level", "info", "trace, debug, info, warn or error")
	f.StringVar(&o.history, "history", "", "append a JSONL history of every coordinator call and epoch-guard decision to FILE (for jepsen-lite)")
	o.tls.AddFlags(f)
	f.BoolVar(&o.renew, "tls-renew", true, renewUsage)
	o.telemetry.AddFlags(f)
	f.BoolVar(&o.insecure, "insecure", false, "talk plaintext to a coordinator started with --insecure (no authentication; local experiments only)")
	return cmd
}

// loadTLS loads the --tls-* files as a reloading source (mtls.Source:
// re-read when they change and on SIGHUP) and checks that the certificate
// is a worker certificate named by --id (the coordinator refuses any
// other). It returns nils with --insecure; neither is a usage error.
func loadTLS(o *options, log hclog.Logger) (*tls.Config, *mtls.Source, error) {
	switch {
	case o.insecure && o.tls.Enabled():
		return nil, nil, usagef("--insecure cannot be combined with --tls-ca/--tls-cert/--tls-key")
	case o.insecure:
		return nil, nil, nil
	case !o.tls.Enabled():
		return nil, nil, usagef("no TLS configured: give --tls-ca, --tls-cert and --tls-key (a worker certificate named by --id, " +
			"made with: rollout certs --dir DIR --names ID:worker), or --insecure for a coordinator started with --insecure")
	}
	// Every load (this one, SIGHUP, a changed file) refuses a certificate
	// that is not this worker's; a reload keeps the previous one.
	conf, src, err := o.tls.LoadReloading(mtls.SourceOptions{Warn: log.Named("tls").Error, Info: log.Named("tls").Info,
		Expect: &mtls.Identity{Name: o.id, Role: mtls.RoleWorker}})
	if errors.Is(err, mtls.ErrWrongIdentity) {
		return nil, nil, usagef("%v; worker %q needs a certificate of role worker named %q (rollout certs --names %s:worker)",
			err, o.id, o.id, o.id)
	}
	if err != nil {
		return nil, nil, usageError{err}
	}
	return conf, src, nil
}

// envOr returns the environment variable name, or def when it is unset or
// empty.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// cloudHint builds the hint --hint selects (nil for signal).
func cloudHint(o *options, log hclog.Logger) (worker.ComputeHint, error) {
	switch o.hint {
	case "signal":
		return nil, nil
	case "aws":
		cfg := hint.DefaultAWSConfig()
		cfg.BaseURL, cfg.PollInterval, cfg.Logger = o.hintAWSURL, o.hintPoll, log
		h, err := hint.NewAWS(cfg)
		if err != nil {
			return nil, usageError{fmt.Errorf("--hint aws: %w", err)}
		}
		return h, nil
	case "gcp":
		cfg := hint.DefaultGCPConfig()
		cfg.BaseURL, cfg.Logger = o.hintGCPURL, log
		h, err := hint.NewGCP(cfg)
		if err != nil {
			return nil, usageError{fmt.Errorf("--hint gcp: %w", err)}
		}
		return h, nil
	}
	return nil, usagef("--hint %q: want signal, aws or gcp", o.hint)
}

// run builds the worker from o and runs it until ctx ends or a hint drains
// it.
func run(ctx context.Context, o *options, stdout, stderr io.Writer, hints []worker.ComputeHint) error {
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
	cloud, err := cloudHint(o, log)
	if err != nil {
		return err
	}
	if cloud != nil {
		hints = append(hints, cloud)
	}
	tel, err := startTelemetry(o.telemetry, log)
	if err != nil {
		return usageError{err}
	}
	defer tel.Close()
	o.openai.observer = tel.openaiObserver()

	kinds, err := workerKinds(o.backend, o.kinds)
	if err != nil {
		return err
	}
	var backend worker.Backend
	var dev gpu.Device // the cpu and gpu backends' device
	if o.gpuDeviceSet && o.backend != "gpu" {
		return usagef("--gpu-device applies to --backend gpu only")
	}
	switch o.backend {
	case "mock":
		b, err := mock.New(mock.Config{Latency: o.mockLatency, Jitter: o.mockJitter, FailRate: o.mockFailRate, Seed: o.mockSeed})
		if err != nil {
			return usageError{fmt.Errorf("--mock-*: %w", err)}
		}
		backend = b
	case "openai":
		b, err := newOpenAIBackend(&o.openai, log, os.Getenv)
		if err != nil {
			return err
		}
		backend = b
		if !o.concurrencySet {
			o.concurrency = o.openai.maxInflight
		}
	case "exec":
		b, err := newExecBackend(o, log)
		if err != nil {
			return err
		}
		// After Run: the drain has nacked what was in flight.
		defer closeExec(b, o.exec.grace, log)
		backend = b
	case "cpu", "gpu":
		d, err := openDevice(ctx, o.backend, o.gpuDevice)
		if err != nil {
			return err
		}
		dev = d
		defer func() {
			if err := dev.Close(); err != nil {
				log.Warn("closing the device failed", "device", dev.Name(), "error", err)
			}
		}()
	default:
		return usagef("unknown backend %q (available: mock, openai, exec, cpu, gpu)", o.backend)
	}

	models, err := workerModels(ctx, o.models, o.modelsSet, backend, log)
	if err != nil {
		return err
	}

	tlsConf, tlsSrc, err := loadTLS(o, log)
	if err != nil {
		return err
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	hupCtx, stopHUP := context.WithCancel(context.Background())
	defer stopHUP()
	go tlsSrc.ReloadOn(hupCtx, hup, log.Info)
	if tel.Registry != nil {
		if err := telemetry.RegisterCertExpiry(tel.Registry, tlsSrc); err != nil {
			return err
		}
	}
	if tlsConf == nil {
		fmt.Fprintln(stderr, "rollout-worker: WARNING: INSECURE: talking plaintext to the coordinator (--insecure): no authentication")
	}
	ccfg := coordclient.DefaultConfig()
	ccfg.Addrs = addrs
	ccfg.TLS = tlsConf
	ccfg.CallTimeout = o.callTimeout
	ccfg.Logger = log
	client, err := coordclient.New(ccfg)
	if err != nil {
		return usageError{fmt.Errorf("--coord: %w", err)}
	}
	defer client.Close()
	if dev != nil {
		// The epoch guard before every kernel launch: the backend compares
		// each item's term with the newest term this client has seen.
		b, err := train.NewBackend(dev, client.Guard().Highest)
		if err != nil {
			return err
		}
		backend = b
	}

	wcfg := worker.DefaultConfig()
	wcfg.ID = o.id
	wcfg.Kinds = kinds
	wcfg.Models = models
	wcfg.Concurrency = o.concurrency
	wcfg.Backlog = o.backlog
	wcfg.HeartbeatInterval = o.heartbeat
	wcfg.ClaimWait = o.claimWait
	wcfg.DrainTimeout = o.drainTimeout
	wcfg.Steal = !o.noSteal
	wcfg.Logger = log
	wcfg.Hints = hints
	wcfg.Observer = tel.workerObserver()
	if o.history != "" {
		hw, err := history.Create(o.history, fmt.Sprintf("%s/%d", o.id, os.Getpid()))
		if err != nil {
			return usageError{fmt.Errorf("--history: %w", err)}
		}
		defer func() {
			if err := hw.Close(); err != nil {
				log.Warn("writing the history failed", "error", err)
			}
		}()
		hw.Write(history.Event{Type: history.TypeInfo, Op: "start", Worker: o.id})
		wcfg.Recorder = history.NewWorkerRecorder(hw, o.id)
	}
	w, err := worker.New(wcfg, client, backend)
	if err != nil {
		return usageError{err}
	}
	if err := tel.watch(w, backend); err != nil {
		return err
	}

	var devName string
	if dev != nil {
		devName = dev.Name()
	}
	log.Info("starting", "id", o.id, "coord", strings.Join(addrs, ","), "backend", o.backend, "device", devName, "models", modelsText(models),
		"concurrency", o.concurrency, "tls", tlsConf != nil, "hint", o.hint, "drain_timeout", o.drainTimeout)
	start := time.Now()
	rctx, stopRenewal := context.WithCancel(ctx)
	renewDone := startRenewal(rctx, o, client, log)
	runErr := w.Run(ctx)
	if rev, ok := coordclient.RevokedOf(runErr); ok && errors.Is(runErr, worker.ErrRevoked) {
		// Told once, and final: say who revoked it, when and why.
		runErr = fmt.Errorf("%w: %s; stopped (nothing it sends is accepted: ask an admin for a new certificate)", worker.ErrRevoked, rev)
	}
	stopRenewal()
	renewDone()
	st := w.Stats()
	fmt.Fprintf(stdout, "rollout-worker %s: stopped after %s: completed=%d failed=%d nacked=%d dropped=%d conflicts=%d claimed=%d adopted=%d stolen=%d stale_replies_rejected=%d term=%d\n",
		o.id, time.Since(start).Round(time.Millisecond), st.Completed, st.Failed, st.Nacked, st.Dropped, st.Conflicts,
		st.Claimed, st.Adopted, st.Stolen, st.StaleRepliesRejected, st.Term)
	if d, ok := w.Drained(); ok {
		fmt.Fprintf(stdout, "rollout-worker %s: drain: provider=%s took=%s deadline_in=%s within_deadline=%t forced=%t unstarted=%d in_flight=%d cancelled=%d unreported=%d deregistered=%t nacked=%d nacked_items=[%s]\n",
			o.id, d.Notice.Provider, d.Ended.Sub(d.Started).Round(time.Millisecond), d.Deadline.Sub(d.Started).Round(time.Millisecond),
			d.WithinDeadline(), d.Forced, d.Unstarted, d.InFlight, d.Cancelled, d.Unreported, d.Deregistered, len(d.Nacked),
			worker.FormatItemRefs(d.Nacked, 1000))
	}
	if eb, ok := backend.(*exec.Backend); ok {
		closeExec(eb, o.exec.grace, log) // the drain is over: stop the programs
		es := eb.Stats()
		fmt.Fprintf(stdout, "rollout-worker %s: exec: started=%d exited=%d answered=%d errors=%d timeouts=%d protocol_errors=%d\n",
			o.id, es.Started, es.Exited, es.Answered, es.Errors, es.Timeouts, es.ProtocolErrors)
	}
	return runErr
}

// workerKinds returns the run kinds the worker registers: the --kinds given
// ("any": every kind, nil), or the backend's own kind.
func workerKinds(backend string, given []string) ([]string, error) {
	if len(given) == 0 {
		switch backend {
		case "cpu", "gpu":
			return []string{"train"}, nil
		default:
			return []string{"batch"}, nil
		}
	}
	var out []string
	for _, k := range given {
		k = strings.TrimSpace(k)
		switch {
		case k == "any" && len(given) == 1:
			return nil, nil
		case k == "any":
			return nil, usagef("--kinds: \"any\" cannot be combined with other kinds")
		case k == "" || len(k) > 64 || strings.ContainsFunc(k, func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) }):
			return nil, usagef("--kinds: %q is not a kind (printable, no spaces, at most 64 bytes)", k)
		}
		out = append(out, k)
	}
	return out, nil
}
