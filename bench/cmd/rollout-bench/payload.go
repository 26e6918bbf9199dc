package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
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
)

func (b *bench) payload(ctx context.Context) error {
	n, size := b.cfg.payloadItems, b.cfg.payloadBytes
	const tag = "payload"
	input, err := b.promptInput(tag, 0, n, size)
	if err != nil {
		return err
	}
	p := &Payload{Items: n, PromptBytes: size, Workers: 4}
	b.res.Payload = p
	if fi, err := os.Stat(input); err == nil {
		p.InputBytes = fi.Size()
	}
	cl, dir, err := b.startClusterMetrics(ctx, "payload", true)
	if err != nil {
		return err
	}
	defer cl.Stop()
	// --profile: CPU profiles of the leader and worker w1 during the run
	// (payload-leader.pprof, payload-worker.pprof).
	var workerArgs []string
	workerPprof := ""
	if b.cfg.profileDir != "" {
		if workerPprof, err = freeLoopbackAddr(); err != nil {
			return err
		}
		workerArgs = []string{"--pprof-addr", workerPprof}
	}
	if _, err := startWorkers(cl, p.Workers, 64, 0, workerArgs...); err != nil {
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
		prof.start(ctx, b.cfg.profileDir, b.cfg.profileSecs,
			map[string]string{"payload-leader.pprof": leader.PprofAddr, "payload-worker.pprof": workerPprof})
	}
	before := snapshotCPU(cl)
	start := time.Now()
	sub, err := b.runCLI(ctx, cl, "submit", "--input", input, "--run", tag, storeFlag(dir), "--wait", "--interval", "100ms")
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
	b.logf("payload: %d items of %d B, submit to results in %.1fs: %.0f items/s", n, size, p.WallS, p.ItemsPerS)

	f, err := os.Open(out)
	if err != nil {
		return err
	}
	p.Verified, err = verifyPromptResults(f, tag, 0, n, size)
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", out, err)
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
	if p.Store, err = dirSize(filepath.Join(dir, "store")); err != nil {
		return err
	}
	l := p.Leader()
	b.logf("payload: leader peak RSS %s, data dir %s; store %s", mib(l.PeakRSS), mib(l.DataDir.Bytes), mib(p.Store.Bytes))
	if pr := cl.Unexpected(); pr != nil {
		return fmt.Errorf("%s exited unexpectedly: %v", pr.Name, pr.Err())
	}
	return nil
}
