package runner

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rollout/rollout/client/localcluster"
	"github.com/rollout/rollout/jepsen-lite/history"
	"github.com/rollout/rollout/jepsen-lite/hostile"
	"github.com/rollout/rollout/jepsen-lite/nemesis"
	"github.com/rollout/rollout/jepsen-lite/network"
	"github.com/rollout/rollout/jepsen-lite/workload"
)

// stragglerID is the worker identity of the straggler client;
// rangeStragglerID that of the straggler scenario's second one, which
// claims a range of the range run.
const (
	stragglerID      = "straggler"
	rangeStragglerID = "straggler-r"
)

// ghostID is the worker identity of the hostile nemesis' worker that never
// registers.
const ghostID = "hostile-ghost"

// hostileNemesis returns the hostile nemesis of a chaos run over runs,
// recording into raw/hostile.jsonl.
func (h *harness) hostileNemesis(runs []string) (*hostile.Nemesis, error) {
	hist, err := h.writer("hostile")
	if err != nil {
		return nil, err
	}
	var reps []hostile.Replica
	for _, r := range h.c.Replicas {
		reps = append(reps, hostile.Replica{ID: r.ID, GRPCAddr: r.GRPCAddr, RaftAddr: r.RaftAddr})
	}
	n, err := hostile.New(hostile.Config{
		Seed: h.cfg.Seed, Replicas: reps, Workers: h.shape.workers, Runs: runs, Ghost: ghostID,
		TLS: h.tlsConfig, History: hist, Logger: h.log, Impostor: h.impostorCert,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	return n, nil
}

// submitFirst submits until the first chunk is acknowledged (so that the
// straggler has something to claim before any worker starts).
func (h *harness) submitFirst(ctx context.Context, sub *workload.Submitter) error {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		if _, err := sub.SubmitNext(sctx); err == nil {
			return nil
		}
		if !workload.Sleep(sctx, 300*time.Millisecond) {
			return fmt.Errorf("%w: the first chunk was not acknowledged: %v", ErrHarness, sctx.Err())
		}
	}
}

// lateReports runs the straggler's Finish and notes what the ledger said.
func (h *harness) lateReports(ctx context.Context, s *workload.Straggler, wait time.Duration) bool {
	fctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	res, overtaken, err := s.Finish(fctx)
	if err != nil {
		h.note("straggler: late report failed: %v", err)
		return false
	}
	var parts []string
	for _, r := range res {
		parts = append(parts, fmt.Sprintf("index %d: %s", r.Index, r.Status))
	}
	if !overtaken {
		h.note("%s: its items were not all taken over within %v; reported anyway: %s", s.ID(), wait, strings.Join(parts, ", "))
		return false
	}
	h.note("%s: late Done reports after its items were taken over: %s", s.ID(), strings.Join(parts, ", "))
	return true
}

// chaos is the seeded schedule of every selected nemesis with the full
// workload.
func (h *harness) chaos(ctx context.Context) error {
	cfg := h.cfg
	kinds := cfg.Nemeses
	if !cfg.TLS && slices.Contains(kinds, nemesis.Certs) {
		kinds = slices.DeleteFunc(slices.Clone(kinds), func(k nemesis.Kind) bool { return k == nemesis.Certs })
		h.note("certs nemesis left out: the run is not over mutual TLS")
	}
	plan, err := nemesis.Plan(nemesis.PlanConfig{
		Seed: cfg.Seed, Duration: cfg.Duration, Kinds: kinds, Replicas: h.shape.replicas, Workers: h.shape.workers,
		FailureTimeout: cfg.FailureTimeout, Warmup: 3 * time.Second, LeaderBias: 0.7, StoreFaults: h.stores.faults(),
	})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	h.plan = plan
	runs := h.chaosRuns()
	subCl, err := h.client("submit")
	if err != nil {
		return err
	}
	allRuns := append(slices.Clone(runs), h.rangeRuns()...)
	h.tenants = h.runTenants(allRuns)
	if err := h.setTenantWeights(ctx); err != nil {
		return err
	}
	sub, err := workload.NewSubmitter(subCl, workload.SubmitConfig{
		Runs: allRuns, ItemsPerRun: cfg.ItemsPerRun, ChunkSize: 25, Span: cfg.Duration * 6 / 10, MaxFailures: 10,
		Stores: h.stores.byRun, RangeRuns: h.rangeRuns(), RangeChunkSize: 100, Tenants: h.tenants,
	})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	h.totals = sub.Totals()
	if err := h.submitFirst(ctx, sub); err != nil {
		return err
	}
	stCl, err := h.clientAs(stragglerID, stragglerID)
	if err != nil {
		return err
	}
	strag, err := workload.NewStraggler(stCl, stragglerID)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrHarness, err)
	}
	strag.UseStores(h.stores.open)
	strag.SetModels(workload.ItemModel)
	// The straggler's worker certificate may not read runs: it watches its
	// items through a client identity.
	stRd, err := h.client(stragglerID + "-reader")
	if err != nil {
		return err
	}
	strag.ReadWith(stRd)
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	n, err := strag.Claim(cctx, 3)
	cancel()
	if err != nil {
		h.note("straggler: claimed nothing: %v", err)
	} else {
		h.note("straggler: claimed %d items and went silent", n)
	}
	for j, w := range h.shape.workers {
		if err := h.startWorker(w, "--concurrency", "3", "--mock-latency", "20ms", "--mock-jitter", "80ms",
			"--mock-fail-rate", "0.05", "--mock-seed", strconv.FormatInt(cfg.Seed*100+int64(j), 10),
			"--claim-wait", "2s", "--heartbeat", "500ms", "--drain-timeout", "2s"); err != nil {
			return err
		}
	}

	wctx, stopWorkload := context.WithCancel(ctx)
	defer stopWorkload()
	var wg sync.WaitGroup
	subDone := make(chan struct{})
	wg.Go(func() {
		if err := sub.Run(wctx); err == nil {
			close(subDone)
		}
	})
	for i := 1; i <= 2; i++ {
		cl, err := h.client("reader-" + strconv.Itoa(i))
		if err != nil {
			return err
		}
		wg.Go(func() { workload.Read(wctx, cl, h.totals, cfg.Seed*10+int64(i)) })
	}
	if n > 0 {
		wg.Go(func() { h.lateReports(wctx, strag, 4*cfg.FailureTimeout+30*time.Second) })
	}
	// The hostile client attacks beside the faults; its last attack may
	// end after them (each has a window to get a conclusive answer).
	var hw sync.WaitGroup
	var hostileEnd int64
	if cfg.hostile() {
		hn, err := h.hostileNemesis(runs)
		if err != nil {
			return err
		}
		defer hn.Close()
		steps := hostile.Plan(cfg.Seed, cfg.Duration, 3*time.Second)
		hw.Go(func() {
			hn.Run(ctx, steps)
			hostileEnd = history.Now()
			h.mu.Lock()
			h.attacks = hn.Count()
			h.mu.Unlock()
		})
	}

	if err := h.inj.Run(ctx, plan); err != nil {
		h.note("nemesis: %v", err)
	}
	hw.Wait()
	if ctx.Err() != nil {
		return fmt.Errorf("%w: interrupted: %v", ErrHarness, ctx.Err())
	}
	h.revive()
	// The completion bound counts from the last disturbance: the last heal
	// or the hostile client's last attack.
	h.lastHeal = max(h.inj.LastHeal(), hostileEnd)
	h.waitComplete(ctx, subDone)
	stopWorkload()
	wg.Wait()
	h.finalRead(ctx)
	return nil
}

// straggler checks the ledger's compare-and-swap: a straggler client and a
// paused worker report items that the failure timeout gave to others.
func (h *harness) straggler(ctx context.Context) error {
	cfg := h.cfg
	subCl, err := h.client("submit")
	if err != nil {
		return err
	}
	// An item run and a range run; their first chunks come first (item
	// run, then range run), one straggler claiming from each.
	sub, err := workload.NewSubmitter(subCl, workload.SubmitConfig{Runs: append([]string{"cas"}, h.rangeRuns()...), ItemsPerRun: 60, ChunkSize: 30,
		MaxFailures: 10, Stores: h.stores.byRun, RangeRuns: h.rangeRuns(), RangeChunkSize: 30})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	h.totals = sub.Totals()
	if err := h.submitFirst(ctx, sub); err != nil {
		return err
	}
	strag, n, err := h.claimingStraggler(ctx, stragglerID, workload.ItemModel)
	if err != nil {
		return err
	}
	h.note("straggler: claimed %d items and went silent", n)
	if err := h.submitFirst(ctx, sub); err != nil {
		return err
	}
	rstrag, n, err := h.claimingStraggler(ctx, rangeStragglerID, workload.RangeModel)
	if err != nil {
		return err
	}
	h.note("%s: claimed %d range(s) and went silent", rangeStragglerID, n)
	for _, w := range h.shape.workers {
		if err := h.startWorker(w, "--concurrency", "2", "--mock-latency", "250ms", "--mock-jitter", "100ms", "--claim-wait", "1s", "--heartbeat", "300ms"); err != nil {
			return err
		}
	}
	wctx, stopWorkload := context.WithCancel(ctx)
	defer stopWorkload()
	var wg sync.WaitGroup
	subDone := make(chan struct{})
	wg.Go(func() {
		if err := sub.Run(wctx); err == nil {
			close(subDone)
		}
	})
	rd, err := h.client("reader-1")
	if err != nil {
		return err
	}
	wg.Go(func() { workload.Read(wctx, rd, h.totals, cfg.Seed) })
	plan := []nemesis.Step{{Kind: nemesis.WorkerPause, At: 500 * time.Millisecond, Hold: cfg.FailureTimeout + 1500*time.Millisecond, Target: h.shape.workers[0]}}
	h.plan = plan
	var overtaken, rangeOvertaken bool
	var lw sync.WaitGroup
	lw.Go(func() { overtaken = h.lateReports(ctx, strag, 4*cfg.FailureTimeout+30*time.Second) })
	lw.Go(func() { rangeOvertaken = h.lateReports(ctx, rstrag, 4*cfg.FailureTimeout+30*time.Second) })
	if err := h.inj.Run(ctx, plan); err != nil {
		h.note("nemesis: %v", err)
	}
	lw.Wait()
	h.revive()
	h.lastHeal = h.inj.LastHeal()
	if !overtaken || !rangeOvertaken {
		stopWorkload()
		wg.Wait()
		return fmt.Errorf("%w: a straggler's items or range were never taken over by another worker (items: %v, range: %v)",
			ErrInconclusive, overtaken, rangeOvertaken)
	}
	h.waitComplete(ctx, subDone)
	stopWorkload()
	wg.Wait()
	h.finalRead(ctx)
	return nil
}

// claimingStraggler makes a straggler acting as worker id, serving models
// only, that claims up to 3 indexes (items, or a range's) and goes silent.
// Its worker certificate may not read runs: it watches what it claimed
// through a client identity.
func (h *harness) claimingStraggler(ctx context.Context, id string, models ...string) (*workload.Straggler, int, error) {
	stCl, err := h.clientAs(id, id)
	if err != nil {
		return nil, 0, err
	}
	strag, err := workload.NewStraggler(stCl, id)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %v", ErrHarness, err)
	}
	strag.SetModels(models...)
	if h.stores != nil {
		strag.UseStores(h.stores.open)
	}
	stRd, err := h.client(id + "-reader")
	if err != nil {
		return nil, 0, err
	}
	strag.ReadWith(stRd)
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	n, err := strag.Claim(cctx, 3)
	cancel()
	if err != nil {
		return nil, 0, fmt.Errorf("%w: straggler %s claimed nothing: %v", ErrInconclusive, id, err)
	}
	return strag, n, nil
}

// revive restarts, after the nemesis healed everything it did, any process
// that exited on its own (a crash, or a signal from outside the harness),
// and notes it: the checks after the heal need the whole cluster.
func (h *harness) revive() {
	type restartable struct {
		p       *localcluster.Proc
		restart func() error
	}
	var procs []restartable
	for _, r := range h.c.Replicas {
		procs = append(procs, restartable{r.Proc, r.Restart})
	}
	for _, w := range h.c.Workers() {
		procs = append(procs, restartable{w.Proc, w.Restart})
	}
	for _, p := range procs {
		if p.p.Running() {
			continue
		}
		if h.revokedWorker(p.p.Name) {
			// Its certificate is revoked: it is cut off by design, and
			// restarting it would change nothing.
			h.note("%s (its certificate revoked by the certs nemesis) exited (%v); not restarted", p.p.Name, p.p.Wait(time.Millisecond))
			continue
		}
		h.note("%s exited on its own during the run (%v); restarted it after the last heal", p.p.Name, p.p.Wait(time.Millisecond))
		if err := p.restart(); err != nil {
			h.note("restarting %s: %v", p.p.Name, err)
		}
	}
}

// workerHistory reads a worker's history so far.
func (h *harness) workerHistory(id string) []history.Event {
	evs, err := history.ReadFile(filepath.Join(h.raw, id+".jsonl"))
	if err != nil {
		return nil
	}
	return evs
}

// waitHistory polls worker id's history until cond holds or the timeout.
func (h *harness) waitHistory(ctx context.Context, id string, timeout time.Duration, cond func([]history.Event) bool) bool {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if cond(h.workerHistory(id)) {
			return true
		}
		if !workload.Sleep(wctx, 50*time.Millisecond) {
			return false
		}
	}
}

// staleLeader checks the worker's epoch guard against a deposed leader's
// late answer:
//
//  1. the worker holds two slow items and waits in a claim long-poll on the
//     leader L (term T);
//  2. L is paused (SIGSTOP) and at once cut off from the other replicas,
//     which elect a new leader in a term above T;
//  3. the worker's report of the items times out on L, moves to the new
//     leader and so sees the new term;
//  4. L is resumed (SIGCONT), still cut off from its peers so it cannot
//     learn the new term, but reachable by the worker: it answers the
//     waiting claim from term T.
//
// A correct worker rejects that answer; the harness waits until the
// worker's guard has judged it (accepted or rejected) so the check is
// never vacuous.
func (h *harness) staleLeader(ctx context.Context) error {
	subCl, err := h.client("submit")
	if err != nil {
		return err
	}
	sub, err := workload.NewSubmitter(subCl, workload.SubmitConfig{Runs: []string{"epoch"}, ItemsPerRun: 2, ChunkSize: 2, MaxFailures: 10})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	h.totals = sub.Totals()
	wid := h.shape.workers[0]
	if err := h.startWorker(wid, "--concurrency", "2", "--mock-latency", "3s", "--claim-wait", "30s", "--no-steal", "--heartbeat", "1s"); err != nil {
		return err
	}
	if !h.waitHistory(ctx, wid, 30*time.Second, func(evs []history.Event) bool {
		return slices.ContainsFunc(evs, func(e history.Event) bool { return e.Type == history.TypeOK && e.Op == "Heartbeat" })
	}) {
		return fmt.Errorf("%w: worker %s did not register", ErrInconclusive, wid)
	}
	if err := h.submitFirst(ctx, sub); err != nil {
		return err
	}
	// 1. The worker holds the items and waits in a new claim.
	var claimT int64
	if !h.waitHistory(ctx, wid, 30*time.Second, func(evs []history.Event) bool {
		got := false
		for i, e := range evs {
			if e.Type == history.TypeOK && e.Op == "Claim" && len(e.Items) > 0 {
				got = true
			}
			if got && e.Type == history.TypeInvoke && e.Op == "Claim" && !completed(evs[i+1:], e.Process, e.Call) {
				claimT = e.Time
				return true
			}
		}
		return false
	}) {
		return fmt.Errorf("%w: worker %s never waited in a claim holding the items", ErrInconclusive, wid)
	}
	// 2. Pause the leader, and cut it off from its peers before they elect.
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	old, oldTerm, err := h.w.leader(lctx)
	cancel()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInconclusive, err)
	}
	heal, err := h.inj.Apply(ctx, nemesis.Step{Kind: nemesis.Pause, Target: old})
	if err != nil {
		return fmt.Errorf("%w: pausing the leader %s: %v", ErrInconclusive, old, err)
	}
	var peers []string
	for _, r := range h.shape.replicas {
		if r != old {
			peers = append(peers, r)
		}
	}
	if err := h.net.Cut(ctx, network.Both([]string{old}, peers)); err != nil {
		_ = heal(ctx)
		return fmt.Errorf("%w: cutting %s off: %v", ErrHarness, old, err)
	}
	hist, err := h.writer("scenario")
	if err != nil {
		_ = heal(ctx)
		return err
	}
	hist.Write(history.Event{Type: history.TypeNemesis, Op: "partition-replicas", Detail: "start: " + old + " cut off from " + strings.Join(peers, ","), Nodes: []string{old}, Term: oldTerm})
	if seen := highestSeen(h.workerHistory(wid), claimT); seen > oldTerm {
		_ = heal(ctx)
		return fmt.Errorf("%w: worker %s saw term %d before the leader %s (term %d) was paused", ErrInconclusive, wid, seen, old, oldTerm)
	}
	// 3. The worker learns a newer term from the new leader.
	if !h.waitHistory(ctx, wid, 60*time.Second, func(evs []history.Event) bool {
		return slices.ContainsFunc(evs, func(e history.Event) bool {
			return e.Type == history.TypeGuard && !e.Rejected && e.Term > oldTerm
		})
	}) {
		_ = heal(ctx)
		return fmt.Errorf("%w: worker %s never saw a term above %d while %s was paused", ErrInconclusive, wid, oldTerm, old)
	}
	// 4. Resume the old leader; the worker must judge its late answer.
	resumed := history.Now()
	if err := heal(ctx); err != nil {
		return fmt.Errorf("%w: resuming %s: %v", ErrHarness, old, err)
	}
	addr := h.c.Replica(old).GRPCAddr
	var judged history.Event
	ok := h.waitHistory(ctx, wid, 30*time.Second, func(evs []history.Event) bool {
		for _, e := range evs {
			if e.Type == history.TypeGuard && e.Time >= resumed && e.Addr == addr && e.Term < e.Highest {
				judged = e
				return true
			}
		}
		return false
	})
	if err := h.net.Heal(ctx); err != nil {
		return fmt.Errorf("%w: healing: %v", ErrHarness, err)
	}
	hist.Write(history.Event{Type: history.TypeNemesis, Op: "partition-replicas", Detail: "heal", Nodes: []string{old}})
	h.lastHeal = history.Now()
	if !ok {
		return fmt.Errorf("%w: the paused leader's late answer never reached worker %s", ErrInconclusive, wid)
	}
	verdict := "rejected"
	if !judged.Rejected {
		verdict = "ACCEPTED"
	}
	what := "reply"
	if judged.Hint {
		what = "leader hint"
	}
	h.note("stale-leader: worker %s %s the %s to %s from %s (term %d) after seeing term %d", wid, verdict, what, judged.Op, old, judged.Term, judged.Highest)
	h.waitComplete(ctx, nil)
	h.finalRead(ctx)
	return nil
}

// highestSeen returns the highest term a worker's guard accepted up to
// time t.
func highestSeen(evs []history.Event, t int64) uint64 {
	var hi uint64
	for _, e := range evs {
		if e.Type == history.TypeGuard && !e.Rejected && e.Time <= t {
			hi = max(hi, e.Term)
		}
	}
	return hi
}

// completed reports whether evs hold the completion of process's call.
func completed(evs []history.Event, process string, call uint64) bool {
	return slices.ContainsFunc(evs, func(e history.Event) bool {
		return e.Process == process && e.Call == call && (e.Type == history.TypeOK || e.Type == history.TypeFail || e.Type == history.TypeUnknown)
	})
}
