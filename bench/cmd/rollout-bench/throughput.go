package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/client/localcluster"
	"github.com/rollout/rollout/store"
)

// ThroughputRun is one end-to-end run: the CLI submits (and waits), then
// writes the results; workers were started before the submit.
type ThroughputRun struct {
	Workers        int     `json:"workers"`
	GroupCommit    bool    `json:"group_commit"`
	Items          int     `json:"items"`
	WallS          float64 `json:"wall_s"`
	ItemsPerS      float64 `json:"items_per_s"`
	LogEntries     uint64  `json:"log_entries"`
	ItemsPerEntry  float64 `json:"items_per_entry"`
	LeaderChanged  bool    `json:"leader_changed,omitempty"`
	CPUPerItemUS   float64 `json:"cpu_per_item_us"`
	MachineCPUFrac float64 `json:"cpu_share_of_machine"`
}

// CPUPerItem is the CPU per item of each process kind, from the processes'
// own accounting (/proc/PID/stat; the CLI's from its rusage), in the
// 4-worker group-commit run (or the first run if there is none).
type CPUPerItem struct {
	Workers       int     `json:"workers"`
	LeaderUS      float64 `json:"leader_us"`
	FollowerUS    float64 `json:"follower_us_each"`
	WorkersUS     float64 `json:"workers_us_all"`
	WorkerEachUS  float64 `json:"worker_us_each"`
	CLIUS         float64 `json:"cli_us"`
	ProbeIncluded bool    `json:"probe_worker_in_harness"`
	TotalUS       float64 `json:"total_us"`
}

// Latency is what the probe worker (a harness goroutine registered as a
// worker, claiming up to 16 items and reporting them) saw while the real
// workers loaded the cluster.
type Latency struct {
	Workers     int     `json:"workers"`
	Claims      int     `json:"claims"`
	ClaimP50MS  float64 `json:"claim_p50_ms"`
	ClaimP99MS  float64 `json:"claim_p99_ms"`
	Reports     int     `json:"reports"`
	ReportP50MS float64 `json:"report_p50_ms"`
	ReportP99MS float64 `json:"report_p99_ms"`

	claims, reports []time.Duration // raw samples, until finish
}

// finish computes the quantiles of the samples.
func (l *Latency) finish() {
	l.Claims, l.Reports = len(l.claims), len(l.reports)
	l.ClaimP50MS, l.ClaimP99MS = ms(quantile(l.claims, 0.5)), ms(quantile(l.claims, 0.99))
	l.ReportP50MS, l.ReportP99MS = ms(quantile(l.reports, 0.5)), ms(quantile(l.reports, 0.99))
}

func (b *bench) throughput(ctx context.Context) error {
	var errs []error
	for _, gc := range []bool{true, false} {
		items := b.cfg.items
		if !gc {
			items = b.cfg.itemsNoGC
		}
		input, err := b.inputFile(items, "tp")
		if err != nil {
			return err
		}
		for _, n := range b.cfg.workers {
			probe := n == 4 && gc
			r, cpu, lat, err := b.throughputRun(ctx, input, items, n, gc, probe)
			if err != nil {
				if ctx.Err() != nil {
					return err
				}
				b.logf("throughput %d workers group commit %v: %v", n, gc, err)
				errs = append(errs, fmt.Errorf("%d workers, group commit %v: %w", n, gc, err))
				continue
			}
			b.logf("throughput %d workers, group commit %v: %.0f items/s, %.1f items/entry, %.0f µs CPU/item",
				n, gc, r.ItemsPerS, r.ItemsPerEntry, r.CPUPerItemUS)
			b.res.Throughput = append(b.res.Throughput, r)
			if cpu != nil && (b.res.CPU == nil || n == 4 && gc) {
				b.res.CPU = cpu
			}
			if lat != nil {
				b.res.Latency = lat
			}
		}
	}
	return errors.Join(errs...)
}

// throughputRun runs the input through a fresh cluster with n workers.
func (b *bench) throughputRun(ctx context.Context, input string, nItems, n int, gc, probe bool) (ThroughputRun, *CPUPerItem, *Latency, error) {
	r := ThroughputRun{Workers: n, GroupCommit: gc, Items: nItems}
	name := fmt.Sprintf("tp-w%d-gc-%v", n, gc)
	cl, dir, err := b.startCluster(ctx, name, fmt.Sprintf("--group-commit=%v", gc))
	if err != nil {
		return r, nil, nil, err
	}
	defer cl.Stop()
	profile := b.cfg.profileDir != "" && gc && !b.profiled
	var workerArgs []string
	workerPprof := ""
	if profile {
		b.profiled = true
		if workerPprof, err = freeLoopbackAddr(); err != nil {
			return r, nil, nil, err
		}
		workerArgs = []string{"--pprof-addr", workerPprof}
	}
	if _, err := startWorkers(cl, n, 64, 0, workerArgs...); err != nil {
		return r, nil, nil, err
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	leader, _, err := cl.WaitLeader(lctx)
	cancel()
	if err != nil {
		return r, nil, nil, err
	}
	before := snapshotCPU(cl)

	var lat *Latency
	var probeWG sync.WaitGroup
	probeCtx, stopProbe := context.WithCancel(ctx)
	defer stopProbe()
	if probe {
		lat = &Latency{Workers: n}
		pc, err := client(cl, "bench-probe", 10*time.Second)
		if err != nil {
			return r, nil, nil, err
		}
		defer pc.Close()
		probeWG.Add(1)
		go func() {
			defer probeWG.Done()
			runProbe(probeCtx, pc, lat)
		}()
	}

	var prof profiler
	if profile {
		addrs := map[string]string{"leader.pprof": leader.PprofAddr, "worker.pprof": workerPprof}
		for _, rep := range cl.Replicas {
			if rep.ID != leader.ID {
				addrs["follower.pprof"] = rep.PprofAddr
				break
			}
		}
		prof.start(ctx, b.cfg.profileDir, b.cfg.profileSecs, addrs)
	}
	start := time.Now()
	sub, err := b.runCLI(ctx, cl, "submit", "--input", input, "--run", "tp", storeFlag(dir), "--wait", "--interval", "100ms")
	if err != nil {
		return r, nil, nil, err
	}
	out := filepath.Join(dir, "results.jsonl")
	resCLI, err := b.runCLI(ctx, cl, "results", "--run", "tp", "-o", out)
	if err != nil {
		return r, nil, nil, err
	}
	wall := time.Since(start)
	if profile {
		if err := prof.wait(); err != nil {
			return r, nil, nil, err
		}
		// The leader's counters (RPCs by method, items claimed, commands
		// by kind) say how many items each RPC and entry carried.
		if err := fetchURL(ctx, filepath.Join(b.cfg.profileDir, "leader.metrics"), "http://"+leader.MetricsAddr+"/metrics"); err != nil {
			return r, nil, nil, err
		}
	}
	stopProbe()
	probeWG.Wait()
	after := snapshotCPU(cl)

	lines, err := countLines(out)
	if err != nil {
		return r, nil, nil, err
	}
	if lines != nItems {
		return r, nil, nil, fmt.Errorf("results: %d lines, want %d", lines, nItems)
	}
	lctx, cancel = context.WithTimeout(ctx, 30*time.Second)
	leader2, _, err := cl.WaitLeader(lctx)
	cancel()
	if err != nil {
		return r, nil, nil, err
	}
	r.LeaderChanged = leader2.ID != leader.ID
	if v := replicaView(ctx, cl, leader2.ID); v != nil {
		r.LogEntries = v.GetCommitIndex()
		if r.LogEntries > 0 {
			r.ItemsPerEntry = float64(nItems) / float64(r.LogEntries)
		}
	}
	r.WallS = wall.Seconds()
	r.ItemsPerS = float64(nItems) / r.WallS

	items := float64(nItems)
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) / items }
	cpu := &CPUPerItem{Workers: n, ProbeIncluded: probe}
	var followers, workers time.Duration
	nf := 0
	for name, d := range after {
		d -= before[name]
		switch {
		case name == leader.ID:
			cpu.LeaderUS = us(d)
		case cl.Replica(name) != nil:
			followers += d
			nf++
		default:
			workers += d
		}
	}
	if nf > 0 {
		cpu.FollowerUS = us(followers / time.Duration(nf))
	}
	cpu.WorkersUS = us(workers)
	cpu.WorkerEachUS = cpu.WorkersUS / float64(n)
	cpu.CLIUS = us(sub.CPU + resCLI.CPU)
	cpu.TotalUS = cpu.LeaderUS + cpu.FollowerUS*float64(nf) + cpu.WorkersUS + cpu.CLIUS
	r.CPUPerItemUS = cpu.TotalUS
	r.MachineCPUFrac = cpu.TotalUS * items / 1e6 / r.WallS / float64(b.res.Machine.Cores)
	if lat != nil {
		lat.finish()
	}
	return r, cpu, lat, nil
}

// snapshotCPU reads the CPU time of every running process of the cluster.
func snapshotCPU(cl *localcluster.Cluster) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, p := range cl.Procs() {
		if !p.Running() {
			continue
		}
		if d, err := procCPU(p.Pid()); err == nil {
			out[p.Name] = d
		}
	}
	return out
}

func countLines(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	n := 0
	for sc.Scan() {
		n++
	}
	return n, sc.Err()
}

// runProbe registers as worker bench-probe and, until ctx ends, claims up
// to 16 items (a short long-poll), reports them done at once, and records
// the latency of every claim that returned items and of every report.
func runProbe(ctx context.Context, c *coordclient.Client, lat *Latency) {
	const id = "bench-probe"
	if _, err := c.Register(ctx, &rolloutv1.RegisterRequest{WorkerId: id}); err != nil {
		return
	}
	var claims, reports []time.Duration
	stores := map[string]*store.Store{}
	defer func() {
		lat.claims, lat.reports = claims, reports
		for _, st := range stores {
			st.Close()
		}
	}()
	for ctx.Err() == nil {
		t0 := time.Now()
		resp, err := c.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: id, MaxItems: 16, WaitMs: 200})
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if len(resp.GetItems()) == 0 {
			continue
		}
		claims = append(claims, time.Since(t0))
		req := &rolloutv1.ReportRequest{WorkerId: id}
		result := []byte(`{"completion":"probe","finish_reason":"stop"}`)
		var ranges []*rolloutv1.RangeReport
		for _, it := range resp.GetItems() {
			if it.GetCount() > 0 {
				// A range (the default for a run with a store): done
				// whole with one range result object, or given back.
				ranges = append(ranges, probeRange(ctx, stores, it, result))
				continue
			}
			rep := &rolloutv1.ItemReport{Run: it.GetRun(), Id: it.GetId(), Attempt: it.GetAttempt(),
				Outcome: rolloutv1.Outcome_OUTCOME_DONE, Result: result}
			if it.GetStore() != "" {
				// A store run takes a reference, never inline bytes: an
				// inline result is refused, and the item would stay the
				// probe's until the failure scan (a stall of the run).
				ref, err := probeResultRef(ctx, stores, it, result)
				if err != nil {
					rep.Outcome, rep.Result = rolloutv1.Outcome_OUTCOME_NACK, nil
				} else {
					rep.Result, rep.ResultRef = nil, ref
				}
			}
			req.Reports = append(req.Reports, rep)
		}
		t1 := time.Now()
		// The report must land even when the run is ending: the CLI waits
		// for these items.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		if len(req.Reports) > 0 {
			_, err = c.Report(rctx, req)
		}
		if err == nil && len(ranges) > 0 {
			_, err = c.ReportRange(rctx, &rolloutv1.ReportRangeRequest{WorkerId: id, Reports: ranges})
		}
		cancel()
		if err == nil {
			reports = append(reports, time.Since(t1))
		}
	}
}

// probeRange does a claimed range whole as a worker would: it reads the
// range's lines, computes each sample id, and stores one range result
// object; on any error it gives the range back (nack_rest).
func probeRange(ctx context.Context, stores map[string]*store.Store, it *rolloutv1.Item, result []byte) *rolloutv1.RangeReport {
	lo, n := it.GetIndex(), it.GetCount()
	rep := &rolloutv1.RangeReport{Run: it.GetRun(), Id: it.GetId(), Attempt: it.GetAttempt(), Lo: lo, DoneTo: lo, NackRest: true}
	st, err := probeStore(ctx, stores, it.GetStore())
	if err != nil {
		return rep
	}
	sp, err := batch.ParseSamplingJSON(it.GetSampling())
	if err != nil {
		return rep
	}
	ref := it.GetPayloadRef()
	lines, err := store.ReadChunkLines(ctx, st, ref.GetObject(), ref.GetLength(), lo-it.GetBase(), n)
	if err != nil {
		return rep
	}
	rs := make([]store.RangeResult, len(lines))
	for k, line := range lines {
		idx := lo + uint64(k)
		rs[k] = store.RangeResult{Index: idx, SampleID: batch.SampleIDOfLine(it.GetModel(), line, sp, idx), Result: result}
	}
	obj, err := store.EncodeRangeResults(rs)
	if err != nil {
		return rep
	}
	key, sum, _, err := st.PutContent(ctx, store.RunResults(it.GetRun(), it.GetDataPrefix()), obj)
	if err != nil {
		return rep
	}
	rep.DoneTo, rep.NackRest = lo+n, false
	rep.ResultRef = &rolloutv1.DataRef{Object: key, Length: uint64(len(obj)), Blake3: sum[:]}
	return rep
}

// probeStore opens a run's store once per URL (into stores).
func probeStore(ctx context.Context, stores map[string]*store.Store, url string) (*store.Store, error) {
	if st := stores[url]; st != nil {
		return st, nil
	}
	st, err := store.Open(ctx, url, store.DefaultOptions())
	if err != nil {
		return nil, err
	}
	stores[url] = st
	return st, nil
}

// probeResultRef stores result in the item's run store (opened once per
// URL into stores) and returns its reference.
func probeResultRef(ctx context.Context, stores map[string]*store.Store, it *rolloutv1.Item, result []byte) (*rolloutv1.DataRef, error) {
	st := stores[it.GetStore()]
	if st == nil {
		var err error
		if st, err = store.Open(ctx, it.GetStore(), store.DefaultOptions()); err != nil {
			return nil, err
		}
		stores[it.GetStore()] = st
	}
	key, sum, _, err := st.PutContent(ctx, store.RunResults(it.GetRun(), it.GetDataPrefix()), result)
	if err != nil {
		return nil, err
	}
	return &rolloutv1.DataRef{Object: key, Length: uint64(len(result)), Blake3: sum[:]}, nil
}
