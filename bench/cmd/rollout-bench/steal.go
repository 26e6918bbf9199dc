package main

import (
	"context"
	"fmt"
	"time"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/worker"
)

// Steal is what a thief sees: from going idle (its claim finds nothing
// pending) to holding stolen items it can run (the Steal reply). The victim
// holds every item of the run; the thief completes what it stole before it
// goes idle again. Both are harness workers over real gRPC (the real
// worker's claim long-poll, --claim-wait, comes before its steal and is not
// included: see ClaimWaitMS).
type Steal struct {
	Steals      int     `json:"steals"`
	IdleP50MS   float64 `json:"idle_to_stolen_p50_ms"`
	IdleP99MS   float64 `json:"idle_to_stolen_p99_ms"`
	StealP50MS  float64 `json:"steal_rpc_p50_ms"`
	ItemsStolen int     `json:"items_stolen"`
	ClaimWaitMS float64 `json:"worker_claim_wait_ms"`
}

func (b *bench) steal(ctx context.Context) error {
	cl, _, err := b.startCluster(ctx, "steal")
	if err != nil {
		return err
	}
	defer cl.Stop()
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
	if err := submit(ctx, c, "steal", input); err != nil {
		return err
	}
	victim, err := client(cl, "bench-victim", 10*time.Second)
	if err != nil {
		return err
	}
	defer victim.Close()
	thief, err := client(cl, "bench-thief", 10*time.Second)
	if err != nil {
		return err
	}
	defer thief.Close()
	if _, err := victim.Register(ctx, &rolloutv1.RegisterRequest{WorkerId: "bench-victim"}); err != nil {
		return err
	}
	if _, err := thief.Register(ctx, &rolloutv1.RegisterRequest{WorkerId: "bench-thief"}); err != nil {
		return err
	}
	// The victim claims everything and runs nothing.
	for {
		t, err := runTotals(ctx, c, 10*time.Second)
		if err != nil {
			return err
		}
		if t.pending == 0 {
			break
		}
		if _, err := victim.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: "bench-victim", MaxItems: 1024, WaitMs: 0}); err != nil {
			return fmt.Errorf("victim claim: %w", err)
		}
	}
	st := &Steal{ClaimWaitMS: ms(worker.DefaultClaimWait)}
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
		st.ItemsStolen += len(items)
		req := &rolloutv1.ReportRequest{WorkerId: "bench-thief"}
		for _, it := range items {
			req.Reports = append(req.Reports, &rolloutv1.ItemReport{
				Run: it.GetRun(), Id: it.GetId(), Attempt: it.GetAttempt(),
				Outcome: rolloutv1.Outcome_OUTCOME_DONE, Result: []byte(`{"completion":"stolen"}`),
			})
		}
		if _, err := thief.Report(ctx, req); err != nil {
			return fmt.Errorf("thief report: %w", err)
		}
	}
	st.Steals = len(idle)
	st.IdleP50MS, st.IdleP99MS = ms(quantile(idle, 0.5)), ms(quantile(idle, 0.99))
	st.StealP50MS = ms(quantile(rpc, 0.5))
	b.res.Steal = st
	b.logf("steal: idle to stolen p50 %.1f ms (steal RPC %.1f ms), %d items in %d steals", st.IdleP50MS, st.StealP50MS, st.ItemsStolen, st.Steals)
	return nil
}
