package main

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/store"
)

// Failover is the time from signalling the leader to the next item
// completed (the done count of all runs moving under a newer term), under
// load: 4 workers (concurrency 64, mock latency --failover-mock-latency)
// and a backlog kept above 20,000 pending items, with every replica's Raft
// timeouts scaled by RaftMultiplier (rollout-coord --raft-multiplier).
type Failover struct {
	// RaftMultiplier is the replicas' --raft-multiplier (0 in files
	// written before it was a dimension: 1).
	RaftMultiplier int `json:"raft_multiplier,omitempty"`
	// Layout is how the runs are kept: "ranges" or "items" (--layout).
	Layout          string    `json:"layout"`
	Workers         int       `json:"workers"`
	MockLatencyMS   float64   `json:"mock_latency_ms"`
	KillMS          []float64 `json:"sigkill_ms"`
	KillMedianMS    float64   `json:"sigkill_median_ms"`
	KillMaxMS       float64   `json:"sigkill_max_ms"`
	TransferMS      []float64 `json:"transfer_ms"`
	TransferMedMS   float64   `json:"transfer_median_ms"`
	TransferMaxMS   float64   `json:"transfer_max_ms"`
	Terms           uint64    `json:"terms_elapsed"`
	Spurious        int64     `json:"spurious_elections"`
	ItemsPerSLoaded float64   `json:"items_per_s_between_failovers"`
}

const failoverBacklog = 20000

// failover runs the failover measurement once per --failover-multipliers
// value, each on a cluster of its own: the run at 1 is Results.Failover,
// the others Results.FailoverMultiplied.
func (b *bench) failover(ctx context.Context) error {
	for _, m := range b.cfg.foMults {
		// What was measured before an error is kept.
		fo, err := b.failoverAt(ctx, m)
		switch {
		case fo == nil:
		case m == 1:
			b.res.Failover = fo
		default:
			b.res.FailoverMultiplied = append(b.res.FailoverMultiplied, fo)
		}
		if err != nil {
			return fmt.Errorf("--raft-multiplier %d: %w", m, err)
		}
	}
	return nil
}

// failoverAt measures failover on a cluster whose replicas run with
// --raft-multiplier mult. It returns what it measured (nil when it failed
// before measuring), also with an error.
func (b *bench) failoverAt(ctx context.Context, mult int) (*Failover, error) {
	name := "failover"
	if mult != 1 {
		name = fmt.Sprintf("failover-x%d", mult)
	}
	cl, dir, err := b.startCluster(ctx, name, "--raft-multiplier", fmt.Sprint(mult))
	if err != nil {
		return nil, err
	}
	defer cl.Stop()
	// Runs of ranges (a store, the default layout) unless --layout items:
	// the next completion is then the next range progress report.
	var runStore *store.Store
	if b.cfg.layout != "items" {
		if runStore, err = stageStore(ctx, dir); err != nil {
			return nil, err
		}
		defer runStore.Close()
	}
	c, err := client(cl, "cli", 2*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	input, err := b.inputFile(failoverBacklog, "fo")
	if err != nil {
		return nil, err
	}
	fo := &Failover{RaftMultiplier: mult, Workers: 4, MockLatencyMS: ms(b.cfg.foLatency), Layout: layoutName(b.cfg.layout)}
	runs := 0
	topUp := func() error {
		t, err := runTotals(ctx, c, 10*time.Second)
		if err != nil {
			return err
		}
		if t.pending >= failoverBacklog {
			return nil
		}
		runs++
		return submitTo(ctx, c, fmt.Sprintf("fo-%d", runs), input, runStore)
	}
	if err := topUp(); err != nil {
		return fo, err
	}
	if _, err := startWorkers(cl, 4, 64, b.cfg.foLatency); err != nil {
		return fo, err
	}
	first, err := runTotals(ctx, c, 10*time.Second)
	if err != nil {
		return fo, err
	}
	steadyItems, steadyTime := uint64(0), time.Duration(0)

	one := func(kill bool) (time.Duration, error) {
		if err := topUp(); err != nil {
			return 0, err
		}
		if err := topUp(); err != nil { // a second run if one did not reach the backlog
			return 0, err
		}
		// Wait for progress under the current leader.
		t0, err := runTotals(ctx, c, 10*time.Second)
		if err != nil {
			return 0, err
		}
		s0 := time.Now()
		for {
			t1, err := runTotals(ctx, c, 10*time.Second)
			if err == nil && t1.done > t0.done+100 {
				steadyItems += t1.done - t0.done
				steadyTime += time.Since(s0)
				break
			}
			if time.Since(s0) > 30*time.Second {
				return 0, fmt.Errorf("no progress in 30s before the failover (done %d)", t0.done)
			}
			time.Sleep(20 * time.Millisecond)
		}
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		victim, term, err := cl.WaitLeader(lctx)
		cancel()
		if err != nil {
			return 0, err
		}
		start := time.Now()
		if kill {
			err = victim.Kill()
		} else {
			err = victim.Signal(syscall.SIGTERM)
		}
		if err != nil {
			return 0, err
		}
		d, err := nextCompletion(ctx, c, term, start)
		if err != nil {
			return 0, err
		}
		if !kill {
			if err := victim.Wait(30 * time.Second); err != nil {
				b.logf("failover: %s after SIGTERM: %v", victim.ID, err)
			}
		}
		if err := victim.Restart(); err != nil {
			return 0, err
		}
		if _, err := waitCaughtUp(ctx, cl, victim.ID, 60*time.Second); err != nil {
			return 0, err
		}
		return d, nil
	}
	for i := 0; i < b.cfg.kills; i++ {
		d, err := one(true)
		if err != nil {
			return fo, fmt.Errorf("SIGKILL %d: %w", i+1, err)
		}
		b.logf("failover: SIGKILL %d: next item completed after %.0f ms", i+1, ms(d))
		fo.KillMS = append(fo.KillMS, ms(d))
	}
	for i := 0; i < b.cfg.transfers; i++ {
		d, err := one(false)
		if err != nil {
			return fo, fmt.Errorf("transfer %d: %w", i+1, err)
		}
		b.logf("failover: SIGTERM %d: next item completed after %.0f ms", i+1, ms(d))
		fo.TransferMS = append(fo.TransferMS, ms(d))
	}
	last, err := runTotals(ctx, c, 10*time.Second)
	if err != nil {
		return fo, err
	}
	fo.Terms = last.term - first.term
	fo.Spurious = int64(fo.Terms) - int64(b.cfg.kills+b.cfg.transfers)
	fo.KillMedianMS, fo.KillMaxMS = medianMax(fo.KillMS)
	fo.TransferMedMS, fo.TransferMaxMS = medianMax(fo.TransferMS)
	if steadyTime > 0 {
		fo.ItemsPerSLoaded = float64(steadyItems) / steadyTime.Seconds()
	}
	if p := cl.Unexpected(); p != nil {
		return fo, fmt.Errorf("%s exited unexpectedly: %v", p.Name, p.Err())
	}
	return fo, nil
}

// nextCompletion polls the done count of all runs every 5 ms after the
// leader of term was signalled at start. The first count read under a newer
// term is the baseline (it includes everything committed before the
// signal); the result is the time from start to the first count above it.
// It overstates the failover by at most the gap between two completions and
// one poll.
func nextCompletion(ctx context.Context, c *coordclient.Client, term uint64, start time.Time) (time.Duration, error) {
	var base uint64
	haveBase := false
	for {
		if time.Since(start) > 60*time.Second {
			return 0, fmt.Errorf("no item completed within 60s of signalling the leader of term %d", term)
		}
		t, err := runTotals(ctx, c, time.Second)
		now := time.Now()
		if err == nil && t.term > term {
			if !haveBase {
				base, haveBase = t.done, true
			} else if t.done > base {
				return now.Sub(start), nil
			}
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func medianMax(xs []float64) (float64, float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	ds := make([]time.Duration, len(xs))
	var m float64
	for i, x := range xs {
		ds[i] = time.Duration(x * float64(time.Millisecond))
		m = max(m, x)
	}
	return ms(quantile(ds, 0.5)), m
}
