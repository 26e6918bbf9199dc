// Command rollout-bench is `make bench`: it measures, in one run on
// loopback, a 3-replica rollout cluster of the real binaries against the
// bare replicated log it is built on (hashicorp/raft + raft-boltdb/v2 with a
// no-op FSM) and against the same work ledger built on a real 3-member etcd
// cluster, and prints one table and writes a JSON file (bench/results.json).
//
//	rollout-bench --bin DIR [--etcd-driver PATH] [--only throughput,failover,...] [--out FILE]
//
// Stages (--only picks a subset; every stage starts its own cluster in a
// fresh directory and stops every process it started, on every exit path):
//
//	throughput  items/s end to end (submit, claim, complete, results with the
//	            rollout CLI) at 1, 4 and 16 workers, group commit on and off;
//	            claim and report latency of a probe worker and CPU per item of
//	            every process kind, in the 4-worker group-commit run
//	barelog     commands/s of the bare log (in-process, 3 nodes, loopback TCP)
//	etcd        items/s of the etcd ledger (bench/etcdledger, etcd on loopback)
//	failover    leader SIGKILL and graceful transfer (SIGTERM) under load:
//	            from the signal to the next completed item
//	steal       from a thief going idle to a stolen item it can run
//	scale       a large run (--scale-items, default 1,000,000): submit time,
//	            leader peak RSS, snapshot size and time, restore time, and the
//	            time for a replica with an empty disk to catch up
//	payload     the data plane (issue 17): --payload-items prompts of
//	            --payload-bytes (default 100,000 x 2 KB) into a file store,
//	            through 4 mock workers, submit to results, every result
//	            checked: items/s, each replica's peak RSS and data directory;
//	            issue 41: the machine's read+blake3+write floor on the same
//	            input, the same input again one part at a time (submit with
//	            no worker, the workers alone, results alone), each as a
//	            share of the floor, and all of it again through versitygw
//	            on loopback (--payload-store, default file,s3)
//	liveness    issue 29: --liveness-workers (default 100, 1,000 and
//	            10,000) registered, heartbeating, idle simulated workers
//	            (fleet.go: one certificate and one connection each, over
//	            mutual TLS) in steps: leader CPU, Raft entries/s and
//	            heartbeats/s over --liveness-window at each size; at
//	            --liveness-busy-workers, a range run through
//	            --liveness-busy-real rollout-worker processes beside them
//	            (entries/s against items/s); at the largest size one worker
//	            stopped (time to its expiry) and the leader SIGKILLed
//	            (workers expired while all keep heartbeating)
//	fairness    tenants sharing the fleet (issue 30): tenant B's small run
//	            beside tenant A's 1,000,000-item run on 4 workers (time to
//	            B done; A loses nothing); weights 1 and 3 over a 60 s
//	            window (items done, ratio); a priority-5 run behind two
//	            priority-3 runs (submit to first item running)
//	scale-e2e   not run unless named (make bench-scale): --scale-e2e-items
//	            (default 10,000,000) prompts of --scale-e2e-bytes (1 KB;
//	            make bench-scale: 32 B) through 4 mock workers in two runs (a
//	            tenth, then the rest), every result checked: leader peak RSS,
//	            its slope per item and its extrapolation to 100M and 1B, Raft
//	            log and snapshot bytes per item, restart to caught up; it
//	            refuses to start when the disk cannot hold the run
//
// Every stage that submits with the CLI passes --store file://STAGEDIR/store,
// so that inputs and results stay (and leave) with the stage's directory.
//
// Linux only: it reads the processes' CPU and memory from /proc.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/rollout/rollout/bench/summary"
	"github.com/rollout/rollout/server"
)

// stages in the order they run.
var allStages = []string{"throughput", "barelog", "etcd", "failover", "steal", "scale", "payload", "liveness", "fairness", "scale-e2e"}

// defaultStages run without --only: all but scale-e2e, which takes an hour
// and tens of GB of disk at its default size (make bench-scale runs it).
var defaultStages = slices.DeleteFunc(slices.Clone(allStages), func(s string) bool { return s == "scale-e2e" })

// config is the command line.
type config struct {
	bin        string
	etcdDriver string
	etcdBin    string
	out        string
	merge      bool
	markdown   string
	render     string
	// docs is a Markdown file whose generated summary block (package
	// bench/summary) is rewritten from the results (and docsAlso's).
	docs         string
	docsAlso     []string
	dir          string
	keep         bool
	only         []string
	tls          bool
	items        int
	itemsNoGC    int
	workers      []int
	etcdItems    int
	barelogDur   time.Duration
	kills        int
	transfers    int
	foLatency    time.Duration
	foMults      []int // --failover-multipliers: the failover stage's --raft-multiplier values
	steals       int
	scaleItems   int
	payloadItems int
	payloadBytes int
	// payloadStores are the stores the payload stage runs through, in
	// order (--payload-store): "file" and/or "s3".
	payloadStores []string
	// scale-e2e: items, prompt size, items of the first run (0: a tenth).
	scaleE2EItems int
	scaleE2EBytes int
	scaleE2EMid   int
	// scaleE2ENoMemCheck runs scale-e2e whole even when its first part
	// predicts more memory than the machine has.
	scaleE2ENoMemCheck bool
	startTimeout       time.Duration
	profileDir         string
	profileSecs        int
	// liveness: the idle fleet sizes, in increasing order; the size at
	// which the busy window runs (0: none) and its rollout-worker
	// processes; the window, the settling time after each growth, the
	// replicas' --failure-timeout and how long a stopped worker's expiry
	// is awaited at most.
	livenessWorkers        []int
	livenessBusyWorkers    int
	livenessBusyReal       int
	livenessWindow         time.Duration
	livenessSettle         time.Duration
	livenessFailureTimeout time.Duration
	livenessExpiryWait     time.Duration
	// fairness: tenant A's and B's run sizes, the mock latency of the
	// share measurement, whether A is cancelled once B is done, how long
	// A may take to finish; the weighted runs' size and latency, the
	// warm-up and the window.
	fairBigItems, fairSmallItems int
	fairShareLatency             time.Duration
	fairCancelBig                bool
	fairBigTimeout               time.Duration
	fairWeightItems              int
	fairWeightLatency            time.Duration
	fairWarmup, fairWindow       time.Duration
	// layout is how the CLI's submits and the failover and steal stages
	// keep a run: "" (the CLI's default, ranges for a run with a store) or
	// "items" (rollout submit --items; inline submits).
	layout string
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "rollout-bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "rollout-bench:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("rollout-bench", flag.ContinueOnError)
	fs.StringVar(&c.bin, "bin", "bin", "directory holding rollout-coord, rollout-worker and rollout")
	fs.StringVar(&c.etcdDriver, "etcd-driver", "", "the etcdledger binary (built from bench/etcdledger; default BIN/etcdledger)")
	fs.StringVar(&c.etcdBin, "etcd", "etcd", "the etcd server binary")
	fs.StringVar(&c.out, "out", filepath.Join("bench", "results.json"), "JSON results file")
	fs.BoolVar(&c.merge, "merge", false, "keep, in --out, the figures of the stages this run does not run (make bench BENCH=... sets it): a subset updates its stages and drops no others")
	fs.StringVar(&c.render, "render", "", "run nothing: print the table of this results file (and write --markdown)")
	fs.StringVar(&c.markdown, "markdown", "", "also write the table as Markdown to this file (for docs/BENCHMARKS.md)")
	fs.StringVar(&c.docs, "docs", "", "also rewrite the generated summary table of this Markdown file (docs/BENCHMARKS.md, between its BEGIN/END GENERATED markers) from the results, and from --docs-also's (make bench-docs)")
	docsAlso := fs.String("docs-also", "", "comma-separated further results files whose summary rows follow in --docs's table (bench/results-scale.json)")
	fs.StringVar(&c.dir, "dir", "", "working directory, kept (default: a fresh temporary directory, removed at the end unless --keep or a stage failed)")
	fs.BoolVar(&c.keep, "keep", false, "keep the working directory (data and logs of every cluster)")
	only := fs.String("only", "", "comma-separated stages to run (default all but scale-e2e): "+strings.Join(allStages, ","))
	fs.StringVar(&c.layout, "layout", "", "how the runs of the CLI, failover and steal stages are kept: \"\" (rollout submit's default for a run with a store: ranges) or \"items\" (rollout submit --items; failover and steal submit inline), to compare the two")
	fs.BoolVar(&c.tls, "tls", false, "run the rollout clusters over mutual TLS (default plaintext, like etcd and the bare log here)")
	fs.IntVar(&c.items, "items", 50000, "items per throughput run with group commit")
	fs.IntVar(&c.itemsNoGC, "items-nogc", 5000, "items per throughput run without group commit (it runs about ten times slower)")
	workers := fs.String("workers", "1,4,16", "worker counts of the throughput runs")
	fs.IntVar(&c.etcdItems, "etcd-items", 10000, "items of the etcd ledger run")
	fs.DurationVar(&c.barelogDur, "barelog-duration", 4*time.Second, "how long each bare-log variant runs")
	fs.IntVar(&c.kills, "failover-kills", 10, "leader SIGKILLs")
	fs.IntVar(&c.transfers, "failover-transfers", 10, "graceful leadership transfers (leader SIGTERM)")
	fs.DurationVar(&c.foLatency, "failover-mock-latency", 100*time.Millisecond, "mock latency of the workers that keep the cluster under load during failover")
	foMults := fs.String("failover-multipliers", "1,5", "the failover stage runs once per rollout-coord --raft-multiplier listed (1 to 10, each once): 1 is the default timings, 5 a loaded host's")
	fs.IntVar(&c.steals, "steals", 20, "steals measured")
	fs.IntVar(&c.scaleItems, "scale-items", 1000000, "items of the scale run")
	fs.IntVar(&c.payloadItems, "payload-items", 100000, "items of the payload run")
	fs.IntVar(&c.payloadBytes, "payload-bytes", 2048, "prompt bytes of each item of the payload run")
	payloadStores := fs.String("payload-store", "file,s3", "stores the payload stage runs through, each on a cluster of its own: file (the stage's directory) and s3 (versitygw on loopback: make tools-s3)")
	fs.IntVar(&c.scaleE2EItems, "scale-e2e-items", 10000000, "items of the scale-e2e run (make bench-scale: SCALE_ITEMS)")
	fs.IntVar(&c.scaleE2EBytes, "scale-e2e-bytes", 1024, "prompt bytes of each item of the scale-e2e run (make bench-scale: SCALE_BYTES, default 32)")
	fs.IntVar(&c.scaleE2EMid, "scale-e2e-mid", 0, "items of the scale-e2e run's first part, where the leader's memory is read the first time (0: a tenth)")
	fs.BoolVar(&c.scaleE2ENoMemCheck, "scale-e2e-no-memcheck", false, "run scale-e2e whole even when its first part predicts that the three replicas need more memory than the machine has")
	fs.StringVar(&c.profileDir, "profile", "", "write CPU profiles of the leader, a follower and worker w1, taken during the first group-commit throughput run, into this directory (leader.pprof, follower.pprof, worker.pprof), and the leader's metrics after the run (leader.metrics); the payload stage adds payload-leader.pprof and payload-worker.pprof; scale-e2e adds every replica's heap profile after each of its runs (scale-N-ID.heap, and scale-N-ID.heap.txt with the runtime's memory statistics)")
	fs.IntVar(&c.profileSecs, "profile-seconds", 5, "length of the --profile CPU profiles (the run should last longer: raise --items)")
	fs.IntVar(&c.fairBigItems, "fairness-big-items", 1000000, "fairness: items of tenant A's run")
	fs.IntVar(&c.fairSmallItems, "fairness-small-items", 200, "fairness: items of tenant B's run (and of the priority-5 run)")
	fs.DurationVar(&c.fairShareLatency, "fairness-share-latency", 0, "fairness: the mock latency of the workers while A and B run")
	fs.BoolVar(&c.fairCancelBig, "fairness-cancel-big", false, "fairness: cancel tenant A's run once B's is done instead of waiting for it to finish (its counters must still account for every item)")
	fs.DurationVar(&c.fairBigTimeout, "fairness-big-timeout", 20*time.Minute, "fairness: how long tenant A's run may take to end")
	fs.IntVar(&c.fairWeightItems, "fairness-weight-items", 200000, "fairness: items of each weighted tenant's run (more than the fleet finishes in the window)")
	fs.DurationVar(&c.fairWeightLatency, "fairness-weight-latency", 20*time.Millisecond, "fairness: the mock latency of the workers while the weighted runs run")
	fs.DurationVar(&c.fairWarmup, "fairness-warmup", 5*time.Second, "fairness: how long the weighted runs run before the window")
	fs.DurationVar(&c.fairWindow, "fairness-window", 60*time.Second, "fairness: the window the weighted runs' items are counted over")
	livenessWorkers := fs.String("liveness-workers", "100,1000,10000", "liveness stage: idle fleet sizes, increasing (the fleet grows from one to the next)")
	fs.IntVar(&c.livenessBusyWorkers, "liveness-busy-workers", 1000, "liveness stage: the idle fleet size (one of --liveness-workers) beside which the busy window runs (0: none)")
	fs.IntVar(&c.livenessBusyReal, "liveness-busy-real", 8, "liveness stage: rollout-worker processes (mock backend) of the busy window")
	fs.DurationVar(&c.livenessWindow, "liveness-window", 30*time.Second, "liveness stage: length of each measured window")
	fs.DurationVar(&c.livenessSettle, "liveness-settle", 5*time.Second, "liveness stage: wait after the fleet grew, before its window")
	fs.DurationVar(&c.livenessFailureTimeout, "liveness-failure-timeout", server.DefaultConfig().FailureTimeout, "liveness stage: the replicas' --failure-timeout")
	fs.DurationVar(&c.livenessExpiryWait, "liveness-expiry-wait", 5*time.Minute, "liveness stage: how long to wait at most for a stopped worker to be declared lost")
	fs.DurationVar(&c.startTimeout, "start-timeout", 90*time.Second, "how long a cluster may take to form")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if *docsAlso != "" {
		if c.docs == "" {
			return nil, errors.New("--docs-also needs --docs")
		}
		for _, f := range strings.Split(*docsAlso, ",") {
			if f = strings.TrimSpace(f); f == "" {
				return nil, fmt.Errorf("--docs-also: empty file name in %q", *docsAlso)
			}
			c.docsAlso = append(c.docsAlso, f)
		}
	}
	for _, s := range strings.Split(*payloadStores, ",") {
		s = strings.TrimSpace(s)
		if (s != payloadStoreFile && s != payloadStoreS3) || slices.Contains(c.payloadStores, s) {
			return nil, fmt.Errorf("--payload-store: %q is not file or s3 listed once (got %q)", s, *payloadStores)
		}
		c.payloadStores = append(c.payloadStores, s)
	}
	if c.layout != "" && c.layout != "items" {
		return nil, fmt.Errorf("--layout is %q: want \"\" (the CLI's default, ranges) or \"items\"", c.layout)
	}
	if *only == "" {
		c.only = defaultStages
	} else {
		for _, s := range strings.Split(*only, ",") {
			s = strings.TrimSpace(s)
			if !slices.Contains(allStages, s) {
				return nil, fmt.Errorf("--only: unknown stage %q (stages: %s)", s, strings.Join(allStages, ","))
			}
			c.only = append(c.only, s)
		}
	}
	for _, s := range strings.Split(*workers, ",") {
		var n int
		if _, err := fmt.Sscanf(strings.TrimSpace(s), "%d", &n); err != nil || n < 1 || n > 64 {
			return nil, fmt.Errorf("--workers: %q is not a count between 1 and 64", s)
		}
		c.workers = append(c.workers, n)
	}
	for _, s := range strings.Split(*foMults, ",") {
		var m int
		if _, err := fmt.Sscanf(strings.TrimSpace(s), "%d", &m); err != nil || m < 1 || m > 10 || slices.Contains(c.foMults, m) {
			return nil, fmt.Errorf("--failover-multipliers: %q is not a multiplier from 1 to 10 listed once", s)
		}
		c.foMults = append(c.foMults, m)
	}
	prev := 0
	for _, s := range strings.Split(*livenessWorkers, ",") {
		var n int
		if _, err := fmt.Sscanf(strings.TrimSpace(s), "%d", &n); err != nil || n <= prev || n > 15000 {
			return nil, fmt.Errorf("--liveness-workers: %q is not a count above the one before it and at most 15,000", s)
		}
		c.livenessWorkers, prev = append(c.livenessWorkers, n), n
	}
	if c.livenessBusyWorkers != 0 && !slices.Contains(c.livenessWorkers, c.livenessBusyWorkers) {
		return nil, fmt.Errorf("--liveness-busy-workers %d is not one of --liveness-workers", c.livenessBusyWorkers)
	}
	switch {
	case c.livenessBusyReal < 1 || c.livenessBusyReal > 64:
		return nil, fmt.Errorf("--liveness-busy-real must lie between 1 and 64, got %d", c.livenessBusyReal)
	case c.livenessWindow <= 0 || c.livenessSettle < 0 || c.livenessFailureTimeout <= 0 || c.livenessExpiryWait <= 0:
		return nil, errors.New("--liveness-window, --liveness-failure-timeout and --liveness-expiry-wait must be positive, --liveness-settle not negative")
	}
	switch {
	case c.items < 100 || c.itemsNoGC < 100:
		return nil, fmt.Errorf("--items and --items-nogc must be at least 100, got %d and %d", c.items, c.itemsNoGC)
	case c.etcdItems < 100:
		return nil, fmt.Errorf("--etcd-items must be at least 100, got %d", c.etcdItems)
	case c.scaleItems < 1000:
		return nil, fmt.Errorf("--scale-items must be at least 1000, got %d", c.scaleItems)
	case c.payloadItems < 100 || c.scaleE2EItems < 1000:
		return nil, fmt.Errorf("--payload-items must be at least 100 and --scale-e2e-items at least 1000, got %d and %d", c.payloadItems, c.scaleE2EItems)
	case c.payloadBytes < 32 || c.scaleE2EBytes < 32 || c.payloadBytes > 1<<20 || c.scaleE2EBytes > 1<<20:
		return nil, fmt.Errorf("--payload-bytes and --scale-e2e-bytes must lie between 32 and 1 MiB, got %d and %d", c.payloadBytes, c.scaleE2EBytes)
	case c.scaleE2EMid < 0 || c.scaleE2EMid >= c.scaleE2EItems:
		return nil, fmt.Errorf("--scale-e2e-mid must lie between 0 (a tenth) and --scale-e2e-items - 1, got %d", c.scaleE2EMid)
	case c.fairBigItems < 1000 || c.fairSmallItems < 1 || c.fairWeightItems < 1000:
		return nil, fmt.Errorf("--fairness-big-items and --fairness-weight-items must be at least 1000 and --fairness-small-items at least 1, got %d, %d and %d", c.fairBigItems, c.fairWeightItems, c.fairSmallItems)
	case c.fairShareLatency < 0 || c.fairWeightLatency < 0 || c.fairWarmup < 0 || c.fairWindow <= 0 || c.fairBigTimeout <= 0:
		return nil, errors.New("--fairness-window and --fairness-big-timeout must be positive, the fairness latencies and warm-up not negative")
	case c.kills < 0 || c.transfers < 0 || c.steals < 1:
		return nil, errors.New("--failover-kills and --failover-transfers must not be negative, --steals at least 1")
	case c.barelogDur <= 0 || c.foLatency < 0 || c.startTimeout <= 0:
		return nil, errors.New("--barelog-duration and --start-timeout must be positive, --failover-mock-latency not negative")
	}
	if c.etcdDriver == "" {
		c.etcdDriver = filepath.Join(c.bin, "etcdledger")
	}
	return c, nil
}

func (c *config) runs(stage string) bool { return slices.Contains(c.only, stage) }

// Results is the JSON file.
type Results struct {
	Started    time.Time         `json:"started"`
	WallS      float64           `json:"wall_s"`
	Machine    Machine           `json:"machine"`
	Stages     []string          `json:"stages"`
	TLS        bool              `json:"tls"`
	Throughput []ThroughputRun   `json:"throughput,omitempty"`
	Latency    *Latency          `json:"latency,omitempty"`
	CPU        *CPUPerItem       `json:"cpu_per_item,omitempty"`
	BareLog    []BareLogRun      `json:"bare_log,omitempty"`
	Etcd       *EtcdRun          `json:"etcd,omitempty"`
	Failover   *Failover         `json:"failover,omitempty"`
	Steal      *Steal            `json:"steal,omitempty"`
	Scale      *Scale            `json:"scale,omitempty"`
	Payload    *Payload          `json:"payload,omitempty"`
	ScaleE2E   *ScaleE2E         `json:"scale_e2e,omitempty"`
	Fairness   *Fairness         `json:"fairness,omitempty"`
	Liveness   *Liveness         `json:"liveness,omitempty"`
	Errors     map[string]string `json:"errors,omitempty"`
	Rows       []Row             `json:"rows"`
	// StageStarted is when the run that measured each stage began, where
	// the file merges stages of several runs (--merge); absent otherwise.
	StageStarted map[string]time.Time `json:"stage_started,omitempty"`
	// StageRuns is, per stage, the run that measured it: its start, the
	// commit and the machine's load at the stage's start and end. A stage
	// kept by --merge keeps its own; files written before the field have
	// none (stageRuns falls back to StageStarted and Started).
	StageRuns map[string]summary.Run `json:"stage_runs,omitempty"`
	// FailoverMultiplied are the failover stage's runs at a
	// --raft-multiplier other than 1 (Failover is the run at 1).
	FailoverMultiplied []*Failover `json:"failover_multiplied,omitempty"`
	// PayloadS3 is the payload stage's run through versitygw on loopback
	// (--payload-store s3); Payload is its run through a file store.
	PayloadS3 *Payload `json:"payload_s3,omitempty"`
}

// Machine describes where the run was made.
type Machine struct {
	Cores     int    `json:"cores"`
	CPUModel  string `json:"cpu_model"`
	GoVersion string `json:"go_version"`
	OS        string `json:"os"`
	Etcd      string `json:"etcd_version,omitempty"`
}

func run(ctx context.Context, cfg *config) (err error) {
	if cfg.render != "" {
		return render(cfg)
	}
	for _, b := range []string{"rollout-coord", "rollout-worker", "rollout"} {
		if _, err := os.Stat(filepath.Join(cfg.bin, b)); err != nil {
			return fmt.Errorf("--bin %s has no %s (build with: go build -o %s/ ./cmd/...)", cfg.bin, b, cfg.bin)
		}
	}
	if err := supported(); err != nil {
		return err
	}
	temp := cfg.dir == ""
	if temp {
		if cfg.dir, err = os.MkdirTemp("", "rollout-bench-"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(cfg.dir, 0o755); err != nil {
		return err
	}
	defer func() {
		if !temp {
			return
		}
		if cfg.keep || err != nil {
			fmt.Fprintf(os.Stderr, "kept %s (data and logs of every stage)\n", cfg.dir)
			return
		}
		os.RemoveAll(cfg.dir)
	}()

	res := &Results{Started: time.Now().UTC(), Machine: machine(), Stages: cfg.only, TLS: cfg.tls, Errors: map[string]string{},
		StageRuns: map[string]summary.Run{}}
	commit, dirty := sourceRevision(ctx)
	b := &bench{cfg: cfg, res: res}
	for _, st := range allStages {
		if !cfg.runs(st) {
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		began := time.Now()
		sr := summary.Run{Started: res.Started, Commit: commit, Dirty: dirty, Load1Start: load1()}
		b.logf("stage %s", st)
		var serr error
		switch st {
		case "throughput":
			serr = b.throughput(ctx)
		case "barelog":
			serr = b.bareLog(ctx)
		case "etcd":
			serr = b.etcd(ctx)
		case "failover":
			serr = b.failover(ctx)
		case "steal":
			serr = b.steal(ctx)
		case "scale":
			serr = b.scale(ctx)
		case "payload":
			serr = b.payload(ctx)
		case "liveness":
			serr = b.liveness(ctx)
		case "fairness":
			serr = b.fairness(ctx)
		case "scale-e2e":
			serr = b.scaleE2E(ctx)
		}
		if serr != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			b.logf("stage %s FAILED: %v", st, serr)
			res.Errors[st] = serr.Error()
		}
		sr.Load1End = load1()
		res.StageRuns[st] = sr
		b.logf("stage %s took %.1fs", st, time.Since(began).Seconds())
	}
	res.WallS = time.Since(b.started()).Seconds()
	if cfg.merge {
		if err := mergeInto(res, cfg.out); err != nil {
			return err
		}
	}
	res.Rows = rows(res)
	printTable(os.Stdout, res)
	if err := writeJSON(cfg.out, res); err != nil {
		return err
	}
	fmt.Printf("\nwrote %s (wall time %.0fs)\n", cfg.out, res.WallS)
	if cfg.markdown != "" {
		var md strings.Builder
		writeMarkdown(&md, res)
		if err := os.WriteFile(cfg.markdown, []byte(md.String()), 0o644); err != nil {
			return err
		}
		fmt.Printf("wrote %s\n", cfg.markdown)
	}
	if cfg.docs != "" {
		if err := writeDocs(cfg, res); err != nil {
			return err
		}
	}
	if len(res.Errors) > 0 {
		return fmt.Errorf("%d stage(s) failed: %s", len(res.Errors), strings.Join(mapsKeys(res.Errors), ", "))
	}
	return nil
}

// render prints the table of an earlier run's results file.
func render(cfg *config) error {
	data, err := os.ReadFile(cfg.render)
	if err != nil {
		return err
	}
	var res Results
	if err := json.Unmarshal(data, &res); err != nil {
		return fmt.Errorf("%s: %w", cfg.render, err)
	}
	res.Rows = rows(&res)
	printTable(os.Stdout, &res)
	if cfg.markdown != "" {
		var md strings.Builder
		writeMarkdown(&md, &res)
		if err := os.WriteFile(cfg.markdown, []byte(md.String()), 0o644); err != nil {
			return err
		}
	}
	if cfg.docs != "" {
		return writeDocs(cfg, &res)
	}
	return nil
}

func mapsKeys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func writeJSON(path string, res *Results) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// bench is one run of the harness.
type bench struct {
	cfg *config
	res *Results
	// profiled says the --profile profiles were taken (by the first
	// group-commit throughput run).
	profiled bool
}

func (b *bench) started() time.Time { return b.res.Started }

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%6.1fs] %s\n", time.Since(b.started()).Seconds(), fmt.Sprintf(format, args...))
}

// stageDir is a fresh directory for one cluster.
func (b *bench) stageDir(name string) (string, error) {
	d := filepath.Join(b.cfg.dir, name)
	if err := os.RemoveAll(d); err != nil {
		return "", err
	}
	return d, os.MkdirAll(d, 0o755)
}

func machine() Machine {
	m := Machine{Cores: runtime.NumCPU(), GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}
