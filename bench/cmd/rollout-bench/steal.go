package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/store"
	"github.com/rollout/rollout/worker"
)

// Steal is what a thief sees. The victim, a rollout-worker running one item
// for an hour, holds every other item of the run in its backlog. First a
// harness thief over real gRPC: from going idle (its claim finds nothing
// pending) to holding stolen items it can run (the Steal reply); it
// completes what it stole before it goes idle again. Then a real
// rollout-worker as the thief: idle, it claims without waiting and then
// steals; while it runs items its claim polls at most a second, so it
// notices within that when it runs dry.
type Steal struct {
	// Layout is how the run is kept: "ranges" (the victim holds ranges and
	// a steal splits one) or "items" (--layout items).
	Layout      string  `json:"layout"`
	Steals      int     `json:"steals"`
	IdleP50MS   float64 `json:"idle_to_stolen_p50_ms"`
	IdleP99MS   float64 `json:"idle_to_stolen_p99_ms"`
	StealP50MS  float64 `json:"steal_rpc_p50_ms"`
	ItemsStolen int     `json:"items_stolen"`
	ClaimWaitMS float64 `json:"worker_claim_wait_ms"`

	// The real worker: a rollout-worker (mock backend, 5 ms an item: with
	// none, a round's items could finish before its claimer looks again,
	// and the idle claimer would steal the next round at once, chaining
	// rounds until the victim ran out) started
	// with nothing pending steals from the harness victim. WorkerFirstMS
	// is from its start to the first stolen item done; WorkerRoundMS the
	// times between one round of stolen items done and the next (in
	// between it runs dry: its claim poll, at most a second while it runs
	// items, returns, then a no-wait claim and a steal).
	WorkerFirstMS    float64   `json:"worker_start_to_first_stolen_done_ms"`
	WorkerRoundMS    []float64 `json:"worker_idle_to_next_stolen_done_ms"`
	WorkerRoundP50MS float64   `json:"worker_idle_to_next_stolen_done_p50_ms"`
}

// workerStealRounds is how many steal rounds of the real worker are timed.
const workerStealRounds = 3

func (b *bench) steal(ctx context.Context) error {
	cl, dir, err := b.startCluster(ctx, "steal")
	if err != nil {
		return err
	}
	defer cl.Stop()
	// The run is made of ranges (a store, the default layout) unless
	// --layout items: a steal then splits the victim's range past what it
	// started.
	var runStore *store.Store
	if b.cfg.layout != "items" {
		if runStore, err = stageStore(ctx, dir); err != nil {
			return err
		}
		defer runStore.Close()
	}
	c, err := client(cl, "cli", 10*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	n := 64 * b.cfg.steals * 2
	input, err := b.inputFile(n, "steal")
	if err != nil {
		return err
	}
	if err := submitTo(ctx, c, "steal", input, runStore); err != nil {
		return err
	}
	thief, err := client(cl, "bench-thief", 10*time.Second)
	if err != nil {
		return err
	}
	defer thief.Close()
	if _, err := thief.Register(ctx, &rolloutv1.RegisterRequest{WorkerId: "bench-thief"}); err != nil {
		return err
	}
	// The victim, a real worker, claims everything and runs one item for
	// an hour: the rest waits in its backlog, and it stays alive
	// (heartbeats) so that its items stay its own.
	if _, err := cl.StartWorker("w1", "--backend", "mock", "--concurrency", "1",
		"--backlog", strconv.Itoa(n), "--mock-latency", "1h"); err != nil {
		return err
	}
	for {
		t, err := runTotals(ctx, c, 10*time.Second)
		if err != nil {
			return err
		}
		if t.pending == 0 {
			break
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
	st := &Steal{ClaimWaitMS: ms(worker.DefaultClaimWait), Layout: layoutName(b.cfg.layout)}
	stores := map[string]*store.Store{}
	defer func() {
		for _, s := range stores {
			s.Close()
		}
	}()
	var idle, rpc []time.Duration
	for i := 0; i < b.cfg.steals; i++ {
		t0 := time.Now()
		resp, err := thief.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: "bench-thief", MaxItems: 64, WaitMs: 0})
		if err != nil {
			return fmt.Errorf("thief claim: %w", err)
		}
		if len(resp.GetItems()) > 0 {
			return fmt.Errorf("thief claimed %d items: nothing should be pending", len(resp.GetItems()))
		}
		t1 := time.Now()
		sresp, err := thief.Steal(ctx, &rolloutv1.StealRequest{WorkerId: "bench-thief"})
		if err != nil {
			return fmt.Errorf("steal %d: %w", i+1, err)
		}
		t2 := time.Now()
		items := sresp.GetItems()
		if len(items) == 0 {
			return fmt.Errorf("steal %d: nothing stolen from a victim that holds items", i+1)
		}
		idle = append(idle, t2.Sub(t0))
		rpc = append(rpc, t2.Sub(t1))
		result := []byte(`{"completion":"stolen"}`)
		req := &rolloutv1.ReportRequest{WorkerId: "bench-thief"}
		rreq := &rolloutv1.ReportRangeRequest{WorkerId: "bench-thief"}
		for _, it := range items {
			if it.GetCount() > 0 {
				// A stolen tail of the victim's range: done whole with
				// one range result object, as a worker does it.
				st.ItemsStolen += int(it.GetCount())
				rreq.Reports = append(rreq.Reports, probeRange(ctx, stores, it, result))
				continue
			}
			st.ItemsStolen++
			req.Reports = append(req.Reports, &rolloutv1.ItemReport{
				Run: it.GetRun(), Id: it.GetId(), Attempt: it.GetAttempt(),
				Outcome: rolloutv1.Outcome_OUTCOME_DONE, Result: result,
			})
		}
		if len(req.Reports) > 0 {
			if _, err := thief.Report(ctx, req); err != nil {
				return fmt.Errorf("thief report: %w", err)
			}
		}
		if len(rreq.Reports) > 0 {
			resp, err := thief.ReportRange(ctx, rreq)
			if err != nil {
				return fmt.Errorf("thief range report: %w", err)
			}
			for k, r := range rreq.Reports {
				res := resp.GetResults()[k]
				if r.GetNackRest() || res.GetStatus() != rolloutv1.ReportStatus_REPORT_STATUS_APPLIED {
					return fmt.Errorf("thief range report %d: stolen range %x not done (%v: %s)", k, r.GetId(), res.GetStatus(), res.GetMessage())
				}
			}
		}
	}
	st.Steals = len(idle)
	st.IdleP50MS, st.IdleP99MS = ms(quantile(idle, 0.5)), ms(quantile(idle, 0.99))
	st.StealP50MS = ms(quantile(rpc, 0.5))
	b.res.Steal = st
	b.logf("steal: idle to stolen p50 %.1f ms (steal RPC %.1f ms), %d items in %d steals", st.IdleP50MS, st.StealP50MS, st.ItemsStolen, st.Steals)

	// The real worker as the thief.
	base, err := runTotals(ctx, c, 10*time.Second)
	if err != nil {
		return err
	}
	start := time.Now()
	if _, err := cl.StartWorker("w2", "--backend", "mock", "--concurrency", "4", "--mock-latency", "5ms"); err != nil {
		return err
	}
	last, lastAt := base.done, start
	var rounds []time.Duration
	deadline := start.Add(time.Duration(workerStealRounds+2) * (worker.DefaultClaimWait + 10*time.Second))
	for len(rounds) <= workerStealRounds {
		if time.Now().After(deadline) {
			return fmt.Errorf("the real worker completed %d steal rounds in %v; want %d", len(rounds), time.Since(start), workerStealRounds+1)
		}
		t, err := runTotals(ctx, c, 2*time.Second)
		if err != nil {
			continue
		}
		if t.done > last {
			now := time.Now()
			rounds = append(rounds, now.Sub(lastAt))
			// The round's items complete within a few ms of each other; wait
			// until the count settles before the worker counts as idle.
			for {
				time.Sleep(20 * time.Millisecond)
				t2, err := runTotals(ctx, c, 2*time.Second)
				if err == nil && t2.done == t.done {
					break
				}
				if err == nil {
					t = t2
				}
			}
			last, lastAt = t.done, time.Now()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(5 * time.Millisecond)
	}
	st.WorkerFirstMS = ms(rounds[0])
	var rest []time.Duration
	for _, d := range rounds[1:] {
		st.WorkerRoundMS = append(st.WorkerRoundMS, ms(d))
		rest = append(rest, d)
	}
	st.WorkerRoundP50MS = ms(quantile(rest, 0.5))
	b.logf("steal: real worker: start to first stolen item done %.0f ms, idle to next stolen done p50 %.0f ms", st.WorkerFirstMS, st.WorkerRoundP50MS)
	return nil
}
