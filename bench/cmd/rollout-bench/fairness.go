package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/client/localcluster"
	"github.com/rollout/rollout/client/runs"
	"github.com/rollout/rollout/store"
	"github.com/rollout/rollout/worker"
)

// Fairness is the fairness stage (issue 30): three measurements of how
// claims share the fleet between tenants, on 3 replicas and 4 mock
// workers of the real binaries.
//
//   - Share: tenant A's run of BigItems is running on the workers when
//     tenant B submits SmallItems; SmallDoneS is from the start of B's
//     submit to B's run finished. A's run then finishes (or, with
//     --fairness-cancel-big, is cancelled once B is done), and its
//     counters must show every item Done (or, cancelled, every item Done,
//     Running or cancelled): none lost.
//   - Weights: tenants of weights 1 and 3, each with a run larger than the
//     fleet finishes in WindowS, both queued before the workers start;
//     after a warm-up, the items each finished over WindowS (one
//     RunStatus read at each end, so the two counts are of one instant).
//     Ratio is high ÷ low; the target is 3 ± 10%.
//   - Priority: while those two runs (priority 3) are running, a third
//     tenant submits a run at priority 5; StartMS is from its submit
//     acknowledged to its first item Running or Done. A worker holds
//     about ClaimHorizonMS of work (worker.DefaultClaimHorizon) and claims
//     again as it drains, so "within one claim cycle" is StartMS ≤
//     ClaimHorizonMS.
type Fairness struct {
	Workers int `json:"workers"`

	// Share.
	BigItems         int     `json:"big_items"`
	SmallItems       int     `json:"small_items"`
	ShareLatencyMS   float64 `json:"share_mock_latency_ms"`
	BigSubmitS       float64 `json:"big_submit_s"`
	BigDoneAtSmall   uint64  `json:"big_done_when_small_submitted"`
	SmallSubmitS     float64 `json:"small_submit_s"`
	SmallDoneS       float64 `json:"small_done_s"`
	BigDoneWhenSmall uint64  `json:"big_done_when_small_done"`
	BigCancelled     bool    `json:"big_cancelled"`
	BigTotal         uint64  `json:"big_total"`
	BigDone          uint64  `json:"big_done"`
	BigDead          uint64  `json:"big_dead"`
	BigCancelledN    uint64  `json:"big_cancelled_items"`
	BigLost          uint64  `json:"big_lost"`
	BigWallS         float64 `json:"big_submit_to_end_s"`

	// Weights.
	WeightItems     int     `json:"weight_run_items"`
	WeightLatencyMS float64 `json:"weight_mock_latency_ms"`
	Concurrency     int     `json:"weight_worker_concurrency"`
	WarmupS         float64 `json:"warmup_s"`
	WindowS         float64 `json:"window_s"`
	LowWeight       uint32  `json:"low_weight"`
	HighWeight      uint32  `json:"high_weight"`
	LowDone         uint64  `json:"low_done_in_window"`
	HighDone        uint64  `json:"high_done_in_window"`
	Ratio           float64 `json:"ratio_high_to_low"`
	LowPendingEnd   uint64  `json:"low_pending_at_end"`
	HighPendingEnd  uint64  `json:"high_pending_at_end"`

	// Priority.
	PriorityItems   int     `json:"priority_items"`
	StartMS         float64 `json:"priority_start_ms"`
	PriorityDoneMS  float64 `json:"priority_done_ms"`
	BehindPending   uint64  `json:"priority3_pending_at_start"`
	ClaimHorizonMS  float64 `json:"claim_horizon_ms"`
	PriorityStarted bool    `json:"priority_started"`
}

// Targets of issue 30.
const (
	fairnessSmallDoneTarget = 5.0 // seconds
	fairnessRatioTarget     = 3.0
	fairnessRatioTolerance  = 0.10
)

// The tenants of the stage.
const (
	tenantBig, tenantSmall = "tenant-a", "tenant-b"
	tenantLow, tenantHigh  = "tenant-w1", "tenant-w3"
	tenantUrgent           = "tenant-p5"
)

func (b *bench) fairness(ctx context.Context) error {
	f := &Fairness{Workers: 4, ClaimHorizonMS: ms(worker.DefaultClaimHorizon)}
	b.res.Fairness = f
	if err := b.fairShare(ctx, f); err != nil {
		return fmt.Errorf("share: %w", err)
	}
	if err := b.fairWeights(ctx, f); err != nil {
		return fmt.Errorf("weights and priority: %w", err)
	}
	return nil
}

// tenantClient is a client that may name any tenant: the admin identity
// over TLS (a client certificate may submit only as itself); plaintext
// replicas take the tenant a submit names.
func tenantClient(cl *localcluster.Cluster, callTimeout time.Duration, tlsOn bool) (*coordclient.Client, error) {
	if tlsOn {
		return client(cl, "admin", callTimeout)
	}
	return client(cl, "cli", callTimeout)
}

// submitTenant submits file as run of tenant at priority, its data in st
// (a range run).
func submitTenant(ctx context.Context, c *coordclient.Client, run, file string, st *store.Store, tenant string, priority uint32) error {
	scfg := runs.DefaultSubmitConfig()
	scfg.Run, scfg.Files, scfg.Timeout, scfg.Invalid, scfg.Store = run, []string{file}, 60*time.Second, io.Discard, st
	scfg.Tenant, scfg.Priority = tenant, priority
	_, err := runs.Submit(ctx, c, scfg)
	return err
}

// runCounters reads every run's counters at once (one linearizable read).
func runCounters(ctx context.Context, c *coordclient.Client) (map[string]*rolloutv1.RunCounters, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := c.RunStatus(cctx, &rolloutv1.RunStatusRequest{})
	if err != nil {
		return nil, err
	}
	out := map[string]*rolloutv1.RunCounters{}
	for _, rc := range resp.GetRuns() {
		out[rc.GetName()] = rc
	}
	return out, nil
}

// waitRun polls run's counters every 10 ms until cond holds, and returns
// them, or fails after timeout.
func waitRun(ctx context.Context, c *coordclient.Client, run string, timeout time.Duration, what string, cond func(*rolloutv1.RunCounters) bool) (*rolloutv1.RunCounters, error) {
	deadline := time.Now().Add(timeout)
	var last *rolloutv1.RunCounters
	for {
		m, err := runCounters(ctx, c)
		if err == nil {
			if rc := m[run]; rc != nil {
				last = rc
				if cond(rc) {
					return rc, nil
				}
			}
		}
		if time.Now().After(deadline) {
			return last, fmt.Errorf("run %s: %s not seen within %v (last: %v)", run, what, timeout, last)
		}
		if err := ctx.Err(); err != nil {
			return last, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func finished(rc *rolloutv1.RunCounters) bool { return runs.Finished(rc) }

// fairShare is the share measurement: a small run of tenant B beside tenant
// A's big one.
func (b *bench) fairShare(ctx context.Context, f *Fairness) error {
	f.BigItems, f.SmallItems = b.cfg.fairBigItems, b.cfg.fairSmallItems
	f.ShareLatencyMS = ms(b.cfg.fairShareLatency)
	cl, dir, err := b.startCluster(ctx, "fairness-share")
	if err != nil {
		return err
	}
	defer cl.Stop()
	st, err := stageStore(ctx, dir)
	if err != nil {
		return err
	}
	defer st.Close()
	c, err := tenantClient(cl, 30*time.Second, b.cfg.tls)
	if err != nil {
		return err
	}
	defer c.Close()
	big, err := b.inputFile(f.BigItems, "fair-big")
	if err != nil {
		return err
	}
	small, err := b.inputFile(f.SmallItems, "fair-small")
	if err != nil {
		return err
	}
	if _, err := startWorkers(cl, f.Workers, 8, b.cfg.fairShareLatency); err != nil {
		return err
	}
	began := time.Now()
	if err := submitTenant(ctx, c, "big", big, st, tenantBig, 0); err != nil {
		return fmt.Errorf("submitting tenant A's run: %w", err)
	}
	f.BigSubmitS = time.Since(began).Seconds()
	b.logf("fairness: tenant A's %d items submitted in %.1f s", f.BigItems, f.BigSubmitS)
	// B comes once A holds the fleet: a tenth of A done (at least a
	// second of the workers' work), so that every worker holds A's ranges.
	rc, err := waitRun(ctx, c, "big", 10*time.Minute, "a tenth done", func(rc *rolloutv1.RunCounters) bool {
		return rc.GetDone() >= uint64(f.BigItems/10) && rc.GetRunning() > 0
	})
	if err != nil {
		return err
	}
	f.BigDoneAtSmall = rc.GetDone()
	t0 := time.Now()
	if err := submitTenant(ctx, c, "small", small, st, tenantSmall, 0); err != nil {
		return fmt.Errorf("submitting tenant B's run: %w", err)
	}
	f.SmallSubmitS = time.Since(t0).Seconds()
	if _, err := waitRun(ctx, c, "small", 5*time.Minute, "finished", finished); err != nil {
		return err
	}
	f.SmallDoneS = time.Since(t0).Seconds()
	if m, err := runCounters(ctx, c); err == nil && m["big"] != nil {
		f.BigDoneWhenSmall = m["big"].GetDone()
	}
	b.logf("fairness: tenant B's %d items done %.2f s after its submit began (submit %.2f s); A had %d of %d done then",
		f.SmallItems, f.SmallDoneS, f.SmallSubmitS, f.BigDoneWhenSmall, f.BigItems)

	if b.cfg.fairCancelBig {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := c.CancelRun(cctx, &rolloutv1.CancelRunRequest{Run: "big"})
		cancel()
		if err != nil {
			return fmt.Errorf("cancelling tenant A's run: %w", err)
		}
		f.BigCancelled = true
	}
	rc, err = waitRun(ctx, c, "big", b.cfg.fairBigTimeout, "finished", finished)
	f.BigWallS = time.Since(began).Seconds()
	if rc != nil {
		f.BigTotal, f.BigDone, f.BigDead, f.BigCancelledN = rc.Target(), rc.GetDone(), rc.GetDead(), rc.GetCancelledItems()
		if acc := f.BigDone + f.BigDead + f.BigCancelledN; acc < f.BigTotal {
			f.BigLost = f.BigTotal - acc
		}
	}
	if err != nil {
		return err
	}
	b.logf("fairness: tenant A's run ended after %.0f s: %d done, %d dead, %d cancelled of %d (%d unaccounted)",
		f.BigWallS, f.BigDone, f.BigDead, f.BigCancelledN, f.BigTotal, f.BigLost)
	if f.BigLost > 0 || f.BigDead > 0 {
		return fmt.Errorf("tenant A's run lost items: %d done, %d dead, %d cancelled of %d", f.BigDone, f.BigDead, f.BigCancelledN, f.BigTotal)
	}
	return nil
}

// fairWeights measures the 1:3 split and then the priority-5 start.
func (b *bench) fairWeights(ctx context.Context, f *Fairness) error {
	f.WeightItems, f.Concurrency = b.cfg.fairWeightItems, 8
	f.WeightLatencyMS, f.WarmupS, f.WindowS = ms(b.cfg.fairWeightLatency), b.cfg.fairWarmup.Seconds(), b.cfg.fairWindow.Seconds()
	f.LowWeight, f.HighWeight = 1, 3
	f.PriorityItems = b.cfg.fairSmallItems
	cl, dir, err := b.startCluster(ctx, "fairness-weights")
	if err != nil {
		return err
	}
	defer cl.Stop()
	st, err := stageStore(ctx, dir)
	if err != nil {
		return err
	}
	defer st.Close()
	c, err := tenantClient(cl, 30*time.Second, b.cfg.tls)
	if err != nil {
		return err
	}
	defer c.Close()
	admin, err := client(cl, "admin", 30*time.Second)
	if err != nil {
		return err
	}
	defer admin.Close()
	for name, w := range map[string]uint32{tenantLow: f.LowWeight, tenantHigh: f.HighWeight} {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := admin.SetTenant(cctx, &rolloutv1.SetTenantRequest{Name: name, Weight: &w})
		cancel()
		if err != nil {
			return fmt.Errorf("setting %s's weight to %d: %w", name, w, err)
		}
	}
	input, err := b.inputFile(f.WeightItems, "fair-weight")
	if err != nil {
		return err
	}
	urgent, err := b.inputFile(f.PriorityItems, "fair-urgent")
	if err != nil {
		return err
	}
	// Both runs are queued before any worker starts: neither gets a head
	// start.
	for run, tenant := range map[string]string{"low": tenantLow, "high": tenantHigh} {
		if err := submitTenant(ctx, c, run, input, st, tenant, 0); err != nil {
			return fmt.Errorf("submitting %s's run: %w", tenant, err)
		}
	}
	if _, err := startWorkers(cl, f.Workers, f.Concurrency, b.cfg.fairWeightLatency); err != nil {
		return err
	}
	if err := sleepCtx(ctx, b.cfg.fairWarmup); err != nil {
		return err
	}
	m0, err := runCounters(ctx, c)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := sleepCtx(ctx, b.cfg.fairWindow); err != nil {
		return err
	}
	m1, err := runCounters(ctx, c)
	if err != nil {
		return err
	}
	f.WindowS = time.Since(t0).Seconds()
	for _, run := range []string{"low", "high"} {
		if m0[run] == nil || m1[run] == nil {
			return fmt.Errorf("run %s missing from the status", run)
		}
	}
	f.LowDone = m1["low"].GetDone() - m0["low"].GetDone()
	f.HighDone = m1["high"].GetDone() - m0["high"].GetDone()
	f.LowPendingEnd, f.HighPendingEnd = m1["low"].GetPending(), m1["high"].GetPending()
	if f.LowDone > 0 {
		f.Ratio = float64(f.HighDone) / float64(f.LowDone)
	}
	b.logf("fairness: weights 1:3 over %.1f s: %d and %d items done (ratio %.3f); pending at the end %d and %d",
		f.WindowS, f.LowDone, f.HighDone, f.Ratio, f.LowPendingEnd, f.HighPendingEnd)
	var errs []error
	if f.LowPendingEnd == 0 || f.HighPendingEnd == 0 {
		errs = append(errs, fmt.Errorf("a weighted run ran out of queued work within the window (pending %d and %d): raise --fairness-weight-items", f.LowPendingEnd, f.HighPendingEnd))
	}

	// Priority 5 behind the two priority-3 runs, still running.
	t1 := time.Now()
	if err := submitTenant(ctx, c, "urgent", urgent, st, tenantUrgent, 5); err != nil {
		return errors.Join(append(errs, fmt.Errorf("submitting the priority-5 run: %w", err))...)
	}
	acked := time.Now()
	b.logf("fairness: priority-5 run submitted in %.0f ms", ms(acked.Sub(t1)))
	rc, err := waitRun(ctx, c, "urgent", 2*time.Minute, "an item running or done", func(rc *rolloutv1.RunCounters) bool {
		return rc.GetRunning()+rc.GetDone() > 0
	})
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	f.StartMS, f.PriorityStarted = ms(time.Since(acked)), true
	if m, err := runCounters(ctx, c); err == nil {
		f.BehindPending = m["low"].GetPending() + m["high"].GetPending()
	}
	_ = rc
	if _, err := waitRun(ctx, c, "urgent", 2*time.Minute, "finished", finished); err != nil {
		return errors.Join(append(errs, err)...)
	}
	f.PriorityDoneMS = ms(time.Since(acked))
	b.logf("fairness: priority-5 run: first item running %.0f ms after its submit was acknowledged, done after %.0f ms; the priority-3 runs had %d items queued",
		f.StartMS, f.PriorityDoneMS, f.BehindPending)
	if f.BehindPending == 0 {
		errs = append(errs, errors.New("the priority-3 runs had nothing queued when the priority-5 run started: it was not behind them"))
	}
	for _, run := range []string{"low", "high"} {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := c.CancelRun(cctx, &rolloutv1.CancelRunRequest{Run: run})
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("cancelling %s: %w", run, err))
		}
	}
	return errors.Join(errs...)
}

// fairnessRows are the stage's rows of the table.
func fairnessRows(f *Fairness, add func(metric, value, target, met string)) {
	if f.SmallDoneS > 0 {
		add(fmt.Sprintf("11. fairness: tenant B's %s items done after its submit began, beside tenant A's %s-item run (%d workers)",
			count(uint64(f.SmallItems)), count(uint64(f.BigItems)), f.Workers),
			fmt.Sprintf("%.2f s (submit %.2f s; A had %s done at B's submit, %s at B's end)", f.SmallDoneS, f.SmallSubmitS, count(f.BigDoneAtSmall), count(f.BigDoneWhenSmall)),
			"≤ 5 s", metStr(f.SmallDoneS <= fairnessSmallDoneTarget))
	}
	if f.BigTotal > 0 {
		how := "finished"
		if f.BigCancelled {
			how = "cancelled after B was done"
		}
		add("11. fairness: tenant A's run, "+how, fmt.Sprintf("%s done, %d dead, %s cancelled of %s; %d lost (submit → end %.0f s)",
			count(f.BigDone), f.BigDead, count(f.BigCancelledN), count(f.BigTotal), f.BigLost, f.BigWallS),
			"no item lost", metStr(f.BigLost == 0 && f.BigDead == 0))
	}
	if f.LowDone > 0 {
		lo, hi := fairnessRatioTarget*(1-fairnessRatioTolerance), fairnessRatioTarget*(1+fairnessRatioTolerance)
		add(fmt.Sprintf("11. fairness: weights %d:%d, items done over %.0f s (both runs larger than the window)", f.LowWeight, f.HighWeight, f.WindowS),
			fmt.Sprintf("%s : %s = 1 : %.3f", count(f.LowDone), count(f.HighDone), f.Ratio),
			"1 : 3 ± 10%", metStr(f.Ratio >= lo && f.Ratio <= hi))
	}
	if f.PriorityStarted {
		add("11. fairness: priority-5 run behind two priority-3 runs, submit acknowledged → first item running",
			fmt.Sprintf("%.0f ms (done %.0f ms; %s priority-3 items queued)", f.StartMS, f.PriorityDoneMS, count(f.BehindPending)),
			fmt.Sprintf("≤ one claim cycle (%.0f ms)", f.ClaimHorizonMS), metStr(f.StartMS <= f.ClaimHorizonMS))
	}
}

// count is n with thousands separators.
func count(n uint64) string {
	s := fmt.Sprint(n)
	var b []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			b = append(b, ',')
		}
		b = append(b, s[i])
	}
	return string(b)
}
