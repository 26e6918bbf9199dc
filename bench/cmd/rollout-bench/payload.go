package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/client/localcluster"
	"github.com/rollout/rollout/jepsen-lite/s3server"
	"github.com/rollout/rollout/store/versitygw"
)

// Payload is the data plane's run of issue 17: --payload-items prompts of
// --payload-bytes each, submitted by the CLI into a file store in the
// stage's directory, run by 4 mock workers (no latency, concurrency 64),
// results read back by the CLI and checked line by line.
type Payload struct {
	Items        int     `json:"items"`
	PromptBytes  int     `json:"prompt_bytes"`
	Workers      int     `json:"workers"`
	InputBytes   int64   `json:"input_bytes"`
	SubmitS      float64 `json:"submit_to_done_s"`
	ResultsS     float64 `json:"results_s"`
	WallS        float64 `json:"wall_s"`
	ItemsPerS    float64 `json:"items_per_s"`
	MBPerS       float64 `json:"input_mb_per_s"`
	Verified     int     `json:"results_verified"`
	LogEntries   uint64  `json:"log_entries"`
	LogBytes     float64 `json:"log_command_bytes"`
	LogBytesItem float64 `json:"log_command_bytes_per_item"`
	// LeaderChanged: the leader at the end is not the one at the start
	// (the leader's figures are then the new leader's).
	LeaderChanged bool         `json:"leader_changed,omitempty"`
	Replicas      []ReplicaMem `json:"replicas"`
	Store         DirSize      `json:"store"`
	// CPU per item of each process kind over the run (from /proc and the
	// CLI's rusage): where the time of a 2-core machine goes.
	CPU PayloadCPU `json:"cpu_per_item_us"`
	// StoreKind is the store the run kept its data in: "file" (the
	// stage's directory) or "s3" (versitygw on loopback); "" in files
	// written before the field (file).
	StoreKind string `json:"store_kind,omitempty"`
	// Floor is the machine's read+hash+write floor on the same input,
	// measured in the same run (absent in files written before it).
	Floor *Floor `json:"floor,omitempty"`
	// Alone is the same input again, as a second run on the same cluster,
	// one part at a time: submit with no worker running, then the workers
	// alone, then results alone (absent in files written before it).
	Alone *PayloadAlone `json:"alone,omitempty"`
}

// PayloadAlone is a payload run made one part at a time, so that each
// part's rate is its own: `rollout submit` with every worker stopped
// (until the run is recorded), then the 4 workers started (until every
// item is done), then `rollout results` (until the file is written).
type PayloadAlone struct {
	Run      string       `json:"run"`
	Submit   PayloadPhase `json:"submit"`
	Workers  PayloadPhase `json:"workers"`
	Results  PayloadPhase `json:"results"`
	Verified int          `json:"results_verified"`
}

// PayloadPhase is one part of a PayloadAlone run. The rates are of the
// input (items and bytes) over the part's wall time; CPU is that of the
// part's own processes (the CLI, or the 4 workers), per item.
type PayloadPhase struct {
	S            float64 `json:"s"`
	ItemsPerS    float64 `json:"items_per_s"`
	MBPerS       float64 `json:"input_mb_per_s"`
	CPUPerItemUS float64 `json:"cpu_per_item_us"`
}

// phase fills a phase's rates from its wall time and CPU for n items of
// inputBytes in all.
func phase(n int, inputBytes int64, wall, cpu time.Duration) PayloadPhase {
	p := PayloadPhase{S: wall.Seconds()}
	if wall > 0 {
		p.ItemsPerS = float64(n) / wall.Seconds()
		p.MBPerS = float64(inputBytes) / 1e6 / wall.Seconds()
	}
	if n > 0 {
		p.CPUPerItemUS = float64(cpu) / float64(time.Microsecond) / float64(n)
	}
	return p
}

// PayloadCPU is the CPU per item, in µs, of each process kind.
type PayloadCPU struct {
	Leader     float64 `json:"leader"`
	Followers  float64 `json:"followers_each"`
	Workers    float64 `json:"workers_all"`
	CLISubmit  float64 `json:"cli_submit"`
	CLIResults float64 `json:"cli_results"`
	Total      float64 `json:"total"`
}

// Leader returns the leader's figures (the zero value when none is marked).
func (p *Payload) Leader() ReplicaMem {
	for _, r := range p.Replicas {
		if r.Leader {
			return r
		}
	}
	return ReplicaMem{}
}

// Targets of issue 17 for the payload run.
const (
	payloadLeaderRSSTarget = 250_000_000
	payloadDataDirTarget   = 40_000_000
	payloadItemsPerSTarget = 50000
	// Issue 41: the same run through a real S3 server; CPU per item
	// over all processes (the file run).
	payloadS3ItemsPerSTarget = 25000
	payloadCPUTarget         = 30.0
)

// Payload store kinds (--payload-store).
const (
	payloadStoreFile = "file"
	payloadStoreS3   = "s3"
)

// payload runs the stage: the floor on the input, then the run through
// each store of --payload-store (file: b.res.Payload; s3: b.res.PayloadS3),
// each on a cluster of its own.
func (b *bench) payload(ctx context.Context) error {
	n, size := b.cfg.payloadItems, b.cfg.payloadBytes
	const tag = "payload"
	input, err := b.promptInput(tag, 0, n, size)
	if err != nil {
		return err
	}
	// The floor first, with none of the stage's processes running.
	fdir, err := b.stageDir("payload-floor")
	if err != nil {
		return err
	}
	floor, _, err := measureFloor(ctx, input, fdir, 3)
	if err != nil {
		return err
	}
	b.logf("payload: floor on %s: read %.0f MB/s, read+blake3 %.0f MB/s, read+blake3+write %.0f MB/s%s",
		mib(floor.Bytes), floor.ReadMBPerS, floor.ReadHashMBPerS, floor.ReadHashWriteMBPerS, floorCommandsNote(floor))
	var errs []error
	for _, kind := range b.cfg.payloadStores {
		p := &Payload{Items: n, PromptBytes: size, Workers: 4, StoreKind: kind, Floor: floor}
		if kind == payloadStoreS3 {
			b.res.PayloadS3 = p
		} else {
			b.res.Payload = p
		}
		if err := b.payloadRun(ctx, p, tag, input); err != nil {
			if ctx.Err() != nil {
				return err
			}
			errs = append(errs, fmt.Errorf("%s store: %w", kind, err))
		}
	}
	return errors.Join(errs...)
}

// floorCommandsNote lists the external commands' rates for the log.
func floorCommandsNote(f *Floor) string {
	var sb strings.Builder
	for _, c := range f.Commands {
		fmt.Fprintf(&sb, "; %s %.0f MB/s", c.Command, c.MBPerS)
	}
	if len(f.Missing) > 0 {
		fmt.Fprintf(&sb, "; not on PATH: %s", strings.Join(f.Missing, ", "))
	}
	return sb.String()
}

// payloadStore is the store of a payload run on the cluster in dir: the
// --store flag of the CLI and a cleanup. An s3 store starts versitygw on
// loopback (its bucket in dir) and sets its credentials in this process's
// environment, which the CLI and the workers inherit.
func payloadStore(kind, dir, bin string) (flag string, stop func(), err error) {
	if kind != payloadStoreS3 {
		return storeFlag(dir), func() {}, nil
	}
	vbin, err := versitygw.Find(bin)
	if err != nil {
		return "", nil, fmt.Errorf("%w (make tools-s3 builds it; --payload-store file runs without it)", err)
	}
	srv, err := s3server.Start(s3server.Config{Bin: vbin, Dir: filepath.Join(dir, "s3")})
	if err != nil {
		return "", nil, err
	}
	for k, v := range s3server.Env(dir) {
		if err := os.Setenv(k, v); err != nil {
			_ = srv.Close()
			return "", nil, err
		}
	}
	return "--store=" + srv.URL, func() { _ = srv.Close() }, nil
}

// payloadRun is one payload run through p.StoreKind's store: the end to
// end run as before (workers running, submit --wait, results), then the
// same input as a second run one part at a time (PayloadAlone).
func (b *bench) payloadRun(ctx context.Context, p *Payload, tag, input string) error {
	n := p.Items
	if fi, err := os.Stat(input); err == nil {
		p.InputBytes = fi.Size()
	}
	name := "payload"
	if p.StoreKind == payloadStoreS3 {
		name = "payload-s3"
	}
	cl, dir, err := b.startClusterMetrics(ctx, name, true)
	if err != nil {
		return err
	}
	defer cl.Stop()
	sflag, stopStore, err := payloadStore(p.StoreKind, dir, b.cfg.bin)
	if err != nil {
		return err
	}
	// Stopped after the cluster (defers run last first): no worker is
	// left writing to a stopped server.
	defer stopStore()
	// --profile: CPU profiles of the leader and worker w1 during the run
	// (payload-leader.pprof, payload-worker.pprof; the s3 run's carry
	// -s3 before .pprof).
	var workerArgs []string
	workerPprof := ""
	if b.cfg.profileDir != "" {
		if workerPprof, err = freeLoopbackAddr(); err != nil {
			return err
		}
		workerArgs = []string{"--pprof-addr", workerPprof}
	}
	workers, err := startWorkers(cl, p.Workers, 64, 0, workerArgs...)
	if err != nil {
		return err
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	leader, _, err := cl.WaitLeader(lctx)
	cancel()
	if err != nil {
		return err
	}

	var prof profiler
	if workerPprof != "" {
		suffix := ""
		if p.StoreKind == payloadStoreS3 {
			suffix = "-s3"
		}
		prof.start(ctx, b.cfg.profileDir, b.cfg.profileSecs,
			map[string]string{"payload-leader" + suffix + ".pprof": leader.PprofAddr, "payload-worker" + suffix + ".pprof": workerPprof})
	}
	before := snapshotCPU(cl)
	start := time.Now()
	sub, err := b.runCLI(ctx, cl, "submit", "--input", input, "--run", tag, sflag, "--wait", "--interval", "100ms")
	if err != nil {
		return err
	}
	out := filepath.Join(dir, "results.jsonl")
	res, err := b.runCLI(ctx, cl, "results", "--run", tag, "-o", out)
	if err != nil {
		return err
	}
	p.WallS = time.Since(start).Seconds()
	after := snapshotCPU(cl)
	if workerPprof != "" {
		if err := prof.wait(); err != nil {
			return err
		}
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) / float64(n) }
	nf := 0
	for name, d := range after {
		d -= before[name]
		switch {
		case name == leader.ID:
			p.CPU.Leader = us(d)
		case cl.Replica(name) != nil:
			p.CPU.Followers += us(d)
			nf++
		default:
			p.CPU.Workers += us(d)
		}
	}
	p.CPU.CLISubmit, p.CPU.CLIResults = us(sub.CPU), us(res.CPU)
	p.CPU.Total = p.CPU.Leader + p.CPU.Followers + p.CPU.Workers + p.CPU.CLISubmit + p.CPU.CLIResults
	if nf > 0 {
		p.CPU.Followers /= float64(nf)
	}
	p.SubmitS, p.ResultsS = sub.Wall.Seconds(), res.Wall.Seconds()
	p.ItemsPerS = float64(n) / p.WallS
	p.MBPerS = float64(p.InputBytes) / 1e6 / p.WallS
	b.logf("payload (%s): %d items of %d B, submit to results in %.1fs: %.0f items/s, %.0f MB/s (%.0f%% of the floor); CPU µs/item %.0f",
		p.StoreKind, n, p.PromptBytes, p.WallS, p.ItemsPerS, p.MBPerS, 100*p.Floor.share(p.MBPerS), p.CPU.Total)

	if p.Verified, err = verifyFile(out, tag, n, p.PromptBytes); err != nil {
		return err
	}

	lctx, cancel = context.WithTimeout(ctx, 30*time.Second)
	leader2, _, err := cl.WaitLeader(lctx)
	cancel()
	if err != nil {
		return err
	}
	p.LeaderChanged = leader2.ID != leader.ID
	if v := replicaView(ctx, cl, leader2.ID); v != nil {
		p.LogEntries = v.GetCommitIndex()
	}
	if p.LogBytes, err = logCommandBytes(ctx, cl); err != nil {
		b.logf("payload: log bytes: %v", err)
	} else {
		p.LogBytesItem = p.LogBytes / float64(n)
	}
	if p.Replicas, err = replicaMems(cl, leader2.ID); err != nil {
		return err
	}
	storeDir := filepath.Join(dir, "store")
	if p.StoreKind == payloadStoreS3 {
		// The server's bucket directory (s3server.Server.BucketDir).
		storeDir = filepath.Join(dir, "s3", "buckets", s3server.Bucket)
	}
	if p.Store, err = dirSize(storeDir); err != nil {
		return err
	}
	l := p.Leader()
	b.logf("payload (%s): leader peak RSS %s, data dir %s; store %s", p.StoreKind, mib(l.PeakRSS), mib(l.DataDir.Bytes), mib(p.Store.Bytes))

	if p.Alone, err = b.payloadAlone(ctx, cl, workers, sflag, tag, input, n, p.PromptBytes, p.InputBytes, dir); err != nil {
		return fmt.Errorf("one part at a time: %w", err)
	}
	a := p.Alone
	b.logf("payload (%s) one part at a time: submit %.0f items/s %.0f MB/s (%.0f%% of the floor), workers %.0f items/s, results %.0f items/s %.0f MB/s (%.0f%%)",
		p.StoreKind, a.Submit.ItemsPerS, a.Submit.MBPerS, 100*p.Floor.share(a.Submit.MBPerS), a.Workers.ItemsPerS,
		a.Results.ItemsPerS, a.Results.MBPerS, 100*p.Floor.share(a.Results.MBPerS))
	if pr := cl.Unexpected(); pr != nil {
		return fmt.Errorf("%s exited unexpectedly: %v", pr.Name, pr.Err())
	}
	return nil
}

// verifyFile checks a results file of the payload input (verifyPromptResults).
func verifyFile(path, tag string, n, size int) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	got, err := verifyPromptResults(f, tag, 0, n, size)
	if err != nil {
		return got, fmt.Errorf("%s: %w", path, err)
	}
	return got, nil
}

// payloadAlone submits input again as run TAG-alone with every worker
// stopped (submit alone: until the CLI has recorded the run), then starts
// the workers again and waits until every item is done (the workers
// alone), then writes the results (results alone) and checks them.
func (b *bench) payloadAlone(ctx context.Context, cl *localcluster.Cluster, workers []*localcluster.Worker,
	sflag, tag, input string, n, size int, inputBytes int64, dir string) (*PayloadAlone, error) {
	a := &PayloadAlone{Run: tag + "-alone"}
	for _, w := range workers {
		if err := w.Stop(10 * time.Second); err != nil {
			return nil, err
		}
	}
	sub, err := b.runCLI(ctx, cl, "submit", "--input", input, "--run", a.Run, sflag)
	if err != nil {
		return nil, err
	}
	a.Submit = phase(n, inputBytes, sub.Wall, sub.CPU)

	c, err := client(cl, "cli", 30*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	start := time.Now()
	for _, w := range workers {
		if err := w.Restart(); err != nil {
			return nil, err
		}
	}
	if err := waitRunDone(ctx, c, a.Run, uint64(n), 30*time.Minute); err != nil {
		return nil, err
	}
	wall := time.Since(start)
	var cpu time.Duration
	for _, w := range workers {
		if d, err := procCPU(w.Pid()); err == nil {
			cpu += d
		}
	}
	a.Workers = phase(n, inputBytes, wall, cpu)

	out := filepath.Join(dir, "results-alone.jsonl")
	res, err := b.runCLI(ctx, cl, "results", "--run", a.Run, "-o", out)
	if err != nil {
		return nil, err
	}
	a.Results = phase(n, inputBytes, res.Wall, res.CPU)
	if a.Verified, err = verifyFile(out, tag, n, size); err != nil {
		return nil, err
	}
	return a, nil
}

// errRunDead: an item of a run the harness waits for went dead; the run
// can never be done.
var errRunDead = errors.New("run has dead items")

// waitRunDone polls the run's counters until n items are done (an error
// once any is dead, or after timeout).
func waitRunDone(ctx context.Context, c *coordclient.Client, run string, n uint64, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := c.RunStatus(cctx, &rolloutv1.RunStatusRequest{Run: run})
		ccancel()
		if err == nil {
			for _, r := range resp.GetRuns() {
				if r.GetName() != run {
					continue
				}
				if r.GetDead() > 0 {
					return fmt.Errorf("%w: %s: %d of %d", errRunDead, run, r.GetDead(), r.GetTotal())
				}
				if r.GetDone() >= n {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("run %s not done: %w (last error: %v)", run, ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
